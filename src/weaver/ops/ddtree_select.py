"""The DDTree builder's selection (DESIGN §8): the best `nodes` prefixes under a factorized score, level by level.

    score, flat, order = ddtree_select(top_lq, nodes)     # top_lq [B, D, k] float64, each depth sorted descending

Level d holds the best L_d depth-d paths of the whole trie (`level_sizes`): the top L_d of {p + x : p in
level d-1, x in the top-k of depth d}, recorded as the path's score and `flat` = parent's index in level d-1
* k + rank of x, ties to the lower flat index. `order` is the best `nodes` entries of all levels together,
best first, ties to the lower column (a stable sort: a node tied with an ancestor comes after it). Why each
level suffices: `weaver.speculative.builders.ddtree`. `weaver.kernels.triton.ddtree_select` is the
one-launch form (same arguments and outputs).
"""

from __future__ import annotations

import torch

__all__ = ["ddtree_select", "level_sizes"]


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
