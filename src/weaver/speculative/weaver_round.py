"""One round's state of the Weaver adapter (`weaver.speculative.weaver`): K/V slots, visibility, pools, table."""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["WeaverRound"]


@dataclass
class WeaverRound:
    """One round's adapter state: prefix K/V, node K/V slots, visibility and the candidate pools.

    Buffer column P + s holds node slot s (P = prefix rows = 1 + D). The caller assigns slots; a tree
    builder uses slot = node index (root 0) and keeps a few spare slots for padding entries.
    """

    k: torch.Tensor  # [L, B, H, P + S, head_dim]
    v: torch.Tensor  # [L, B, H, P + S, head_dim]
    visible: torch.Tensor  # [B, S, P + S] bool: row s = what node s attends to (prefix + ancestors-or-self)
    pool_ids: torch.Tensor  # [B, D, K] long: candidates of depth d+1 in row d
    pool_prior: torch.Tensor  # [B, D, K] float32: their raw drafter logits

    # the candidate table (`weaver.speculative.weaver`): e_n [B, 1 + D K, d_rank] and the first block's q/k/v
    # [B, 1 + D K, 3 d_rank] of the root (row 0) and every pool candidate (row 1 + t K + j), or None; or, with
    # cand_rope, the vocabulary's rows [B (stride 0), V, ...] by token, q / k unrotated: a node's are rotated by
    # cos, sin [max_depth + 1, head_dim] at its position when it is read
    cand_x: torch.Tensor | None = None
    cand_qkv: torch.Tensor | None = None
    cand_rope: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def prefix_len(self) -> int:
        return self.pool_ids.shape[1] + 1

    @property
    def capacity(self) -> int:
        return self.visible.shape[1]

    @property
    def depth(self) -> int:
        return self.pool_ids.shape[1]
