"""Tensor helpers on batched draft trees, shared by tree attention, the GDN tree solve and the tree conv.

A batch of trees is `parents: LongTensor [B, N]` (DESIGN §1): `parents[b, 0] = -1` (the root),
`parents[b, i] < i` for every real node (topological order), and a node i > 0 with parent -1 is an
isolated pad node: it is its own root and nobody's ancestor. Rows may hold different trees.

Everything here is loop-free over nodes: ancestors are found by pointer jumping (each step doubles the
distance a pointer covers), so a loop of ceil(log2 N) gathers replaces a walk up the tree. The loop
length depends only on N, never on the data, so these functions add no host-device syncs and keep
static shapes for CUDA graphs.
"""

from __future__ import annotations

import torch

__all__ = ["ancestor_mask", "node_depth", "path_prefix_sum", "validate_parents"]


def _num_jumps(n: int) -> int:
    """ceil(log2 n): after k jumps a pointer chain covers distances 0..2^k - 1 >= n - 1 (the max depth)."""
    return max(0, (n - 1).bit_length())


def _parent_pointers(parents: torch.Tensor) -> torch.Tensor:
    """[B, N] parents -> [B, N + 1] pointers where -1 (and the sentinel row N itself) points to sentinel N."""
    if parents.dim() != 2:
        raise ValueError(f"parents must be [B, N], got shape {tuple(parents.shape)}")
    B, N = parents.shape
    p = parents.long()
    p = torch.where(p < 0, torch.full_like(p, N), p)
    sentinel = torch.full((B, 1), N, dtype=torch.long, device=parents.device)
    return torch.cat([p, sentinel], dim=1)


def ancestor_mask(parents: torch.Tensor) -> torch.Tensor:
    """Ancestor-or-self mask.

    parents: LongTensor [B, N].
    Returns bool [B, N, N] with M[b, i, j] = True iff j lies on the path root..i of row b
    (diagonal included; a pad node has only itself).
    """
    B, N = parents.shape
    up = _parent_pointers(parents)  # [B, N+1]; up[b, i] = 2^k-th ancestor of i (or the sentinel N)
    # Row N (the sentinel) is all False, so a jump past the root adds nothing.
    mask = torch.eye(N + 1, N, dtype=torch.bool, device=parents.device).expand(B, N + 1, N).clone()
    for _ in range(_num_jumps(N)):
        mask = mask | mask.gather(1, up[:, :, None].expand(B, N + 1, N))
        up = up.gather(1, up)
    return mask[:, :N]


def path_prefix_sum(x: torch.Tensor, parents: torch.Tensor) -> torch.Tensor:
    """Sum of x over each node's ancestors-or-self (the tree analogue of cumsum along time).

    x: [B, N, ...] any dtype; parents: LongTensor [B, N]. Returns [B, N, ...] in x's dtype.
    """
    B, N = parents.shape
    if x.shape[:2] != (B, N):
        raise ValueError(f"x must start with [B, N] = {(B, N)}, got shape {tuple(x.shape)}")
    flat = x.reshape(B, N, -1)
    F = flat.shape[-1]
    s = torch.cat([flat, flat.new_zeros(B, 1, F)], dim=1)  # sentinel row of zeros
    up = _parent_pointers(parents)
    for _ in range(_num_jumps(N)):
        s = s + s.gather(1, up[:, :, None].expand(B, N + 1, F))
        up = up.gather(1, up)
    return s[:, :N].reshape(x.shape)


def node_depth(parents: torch.Tensor) -> torch.Tensor:
    """Depth of every node (root and pad nodes 0). parents: [B, N] -> LongTensor [B, N]."""
    ones = torch.ones(parents.shape, dtype=torch.long, device=parents.device)
    return path_prefix_sum(ones, parents) - 1


def validate_parents(parents: torch.Tensor) -> None:
    """Raise ValueError naming the first bad entry unless parents is a batch of topological trees.

    Reads the tensor on the host (a device sync), so call it where trees are built, not per layer.
    """
    if parents.dim() != 2 or parents.shape[1] < 1:
        raise ValueError(f"parents must be [B, N] with N >= 1, got shape {tuple(parents.shape)}")
    if parents.dtype.is_floating_point or parents.dtype == torch.bool:
        raise ValueError(f"parents must be an integer tensor, got {parents.dtype}")
    p = parents.detach().long().cpu()
    idx = torch.arange(p.shape[1])
    bad = (p < -1) | (p >= idx) | ((idx == 0) & (p != -1))
    if bad.any():
        b, i = (int(t) for t in bad.nonzero()[0])
        raise ValueError(
            f"parents[{b}, {i}] = {int(p[b, i])}: need parents[:, 0] == -1 and -1 <= parents[b, i] < i"
        )
