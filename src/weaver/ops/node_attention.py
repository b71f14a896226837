"""Masked softmax attention of a few query rows (Weaver tree nodes, or the adapter's prefix rows).

    out = masked_attention(q, k, v, mask)   # q [B, H, W, D]; k, v [B, Hkv, S, D]; mask [B, W, S] bool

The torch reference of `weaver.kernels.triton.node_attention` (scale D**-0.5, grouped-query heads: query
head h reads kv head h // (H / Hkv)); the adapter's prefix pass and teacher-forced chain call it directly.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

__all__ = ["masked_attention"]


def masked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """SDPA with a boolean mask shared by the heads: q [B, H, W, D]; k, v [B, Hkv, S, D] (H % Hkv == 0);
    mask [B, W, S], True = attend, at least one True a row -> [B, H, W, D]."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None], enable_gqa=k.shape[1] != q.shape[1])
