"""The DDTree builder's selection (DESIGN §8): the best `nodes` prefixes under a factorized score, level by level.

    score, flat, order = ddtree_select(top_lq, nodes)     # top_lq [B, D, k] float64, each depth sorted descending
    tokens, parents, depth, valid, logq = ddtree_tree(top_lq, top_ids, root, nodes)   # the DraftTree's fields

Level d holds the best L_d depth-d paths of the whole trie (`level_sizes`): the top L_d of {p + x : p in
level d-1, x in the top-k of depth d}, recorded as the path's score and `flat` = parent's index in level d-1
* k + rank of x, ties to the lower flat index. `order` is the best `nodes` entries of all levels together,
best first, ties to the lower column (a stable sort: a node tied with an ancestor comes after it). Why each
level suffices: `weaver.speculative.builders.ddtree`. `ddtree_tree` turns the selection into the tree's
[B, 1 + nodes] fields (root first, then the chosen entries best first; entries whose score is -inf become pad
nodes). `weaver.kernels.triton.ddtree_select` is the one-launch form of both (same arguments and outputs).
"""

from __future__ import annotations

import torch

__all__ = ["ddtree_select", "ddtree_tree", "level_sizes"]


def level_sizes(depth: int, k: int, nodes: int) -> list[int]:
    """L_d for d = 1 .. min(depth, nodes): at most nodes - d + 1 depth-d paths fit under their ancestors, and
    level d has at most L_{d-1} * k candidates."""
    sizes, prev = [], 1
    for d in range(min(depth, nodes)):
        prev = min(nodes - d, prev * k)
        sizes.append(prev)
    return sizes


def ddtree_select(top_lq: torch.Tensor, nodes: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """top_lq [B, D, k] (float64, sorted descending per depth; -inf: no token) -> score [B, M] float64, flat
    [B, M] int64, order [B, nodes] int64 with M = sum(level_sizes(D, k, nodes)) (module docstring)."""
    b, depth, k = top_lq.shape
    scores, flats = [], []
    prev = torch.zeros(b, 1, dtype=top_lq.dtype, device=top_lq.device)  # level 0: the root
    for d, size in enumerate(level_sizes(depth, k, nodes)):
        cand = (prev[:, :, None] + top_lq[:, d, None, :]).flatten(1)  # [B, L_{d-1} * k]
        prev, flat = torch.sort(cand, dim=1, descending=True, stable=True)  # ties: the lower flat index first
        prev, flat = prev[:, :size], flat[:, :size]  # [B, L_d]
        scores.append(prev)
        flats.append(flat)
    score, flat = torch.cat(scores, dim=1), torch.cat(flats, dim=1)
    order = torch.sort(score, dim=1, descending=True, stable=True).indices[:, :nodes]
    return score, flat, order


def ddtree_tree(
    top_lq: torch.Tensor, top_ids: torch.Tensor, root: torch.Tensor, nodes: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The tree of `ddtree_select(top_lq, nodes)`: tokens, parents, depth [B, N] int64, valid [B, N] bool and the
    nodes' log q [B, N] float32 (N = 1 + nodes; top_ids [B, D, k] int64 the tokens of top_lq, root [B] int64)."""
    b, depth, k = top_lq.shape
    dev = top_lq.device
    score, flat, order = ddtree_select(top_lq, nodes)
    sizes = level_sizes(depth, k, nodes)
    starts = [0]
    for size in sizes:
        starts.append(starts[-1] + size)  # column where each level starts
    # per candidate (levels concatenated): depth, parent's candidate column (-1: the root), token, log q
    level = torch.cat([torch.full((b, size), d + 1, device=dev) for d, size in enumerate(sizes)], dim=1)  # [B, M]
    level_start = torch.cat([torch.full((b, size), starts[max(d - 1, 0)], device=dev)
                             for d, size in enumerate(sizes)], dim=1)  # fmt: skip
    parent = torch.where(level > 1, flat // k + level_start, -1)
    flat_rank = (level - 1) * k + flat % k  # index into top_lq / top_ids flattened over (depth, rank)
    token = top_ids.flatten(1).gather(1, flat_rank)
    logq = top_lq.flatten(1).gather(1, flat_rank).float()
    # node ids of the chosen candidates (0: not chosen)
    position = torch.zeros_like(flat).scatter_(1, order, torch.arange(1, nodes + 1, device=dev).expand(b, nodes))
    valid = score.gather(1, order) > float("-inf")  # [B, nodes]
    par = parent.gather(1, order)
    par_node = torch.where(par >= 0, position.gather(1, par.clamp(min=0)), 0)

    def column(t: torch.Tensor, pad: float | int) -> torch.Tensor:
        return torch.where(valid, t.gather(1, order), pad)

    zero = torch.zeros(b, 1, dtype=torch.long, device=dev)
    return (torch.cat([root[:, None].long(), column(token, 0)], dim=1),
            torch.cat([zero - 1, torch.where(valid, par_node, -1)], dim=1),
            torch.cat([zero, column(level, 0)], dim=1),
            torch.cat([zero == 0, valid], dim=1),
            torch.cat([zero.float(), column(logq, 0.0)], dim=1))  # fmt: skip
