"""The full-attention layers' decode and verify attention on CUDA: the committed prefix read in parallel chunks
(weaver.kernels.triton.split_attention), in place of SDPA over the whole static cache.

    out = attend_tree(q, cache_k, cache_v, lengths, anc, gate, options)   # None: take the SDPA path

SDPA with the [B, 1, T, S] mask reads all S slots of every layer's cache, so a server whose cache holds its whole
context (`Engine.min_capacity`) paid for the context in every step, whatever the prompt. The kernel reads slots
< lengths plus the tree's own. It is the custom op `weaver::split_tree_attention` under torch.compile (one
opaque kernel pair for inductor); eager calls launch it directly. The DFlash drafter's block attention takes it too,
with its sliding windows. Chains over SPLIT_ATTENTION_MAX_NODES tokens (a long prefill) keep SDPA: the kernel walks
the ancestor mask of every node pair. This module imports without triton.
"""

from __future__ import annotations

import torch

from weaver.kernels.dispatch import launch, use_kernel
from weaver.options import RuntimeOptions

__all__ = ["SPLIT_ATTENTION_MAX_NODES", "attend_tree", "split_tree_attention_op"]

SPLIT_ATTENTION_MAX_NODES = 256  # new tokens a forward may have for the kernel (decode, verify); longer: SDPA
_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@torch.library.custom_op("weaver::split_tree_attention", mutates_args=())
def split_tree_attention_op(
    q: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor, lengths: torch.Tensor, anc: torch.Tensor,
    num_heads: int, num_kv_heads: int, gate: torch.Tensor | None, window: int,
) -> torch.Tensor:
    """`weaver.kernels.triton.split_attention.split_tree_attention` as a custom op: o [B T, H D]."""
    from weaver.kernels.triton.split_attention import split_tree_attention

    return split_tree_attention(q, cache_k, cache_v, lengths, anc, num_heads, num_kv_heads, gate, window)


@split_tree_attention_op.register_fake
def _split_tree_attention_fake(q, cache_k, cache_v, lengths, anc, num_heads, num_kv_heads, gate, window):
    return q.new_empty(q.shape)


def attend_tree(
    q: torch.Tensor,  # [B, H, T, D] roped queries
    cache_k: torch.Tensor,  # [B, Hkv, S, D] with the new tokens' K/V written at slots lengths + j
    cache_v: torch.Tensor,
    lengths: torch.Tensor,  # [B] committed tokens per row
    anc: torch.Tensor,  # [B, T, T] bool ancestor-or-self mask (a chain: lower triangle)
    gate: torch.Tensor | None,  # [B, T, H, D] output gate (Qwen3.5), or None
    options: RuntimeOptions,
    window: int = 0,  # > 0: node i at position lengths + i sees the prefix slots > its position - window
) -> torch.Tensor | None:
    """o [B, T, H D] (times sigmoid(gate)) through the prefix-split kernel, or None where it does not run (CPU,
    kernels="torch", a long chain, a window shorter than the nodes, other dtypes): the caller then runs SDPA over
    the masked cache."""
    b, h, t, d = q.shape
    hkv = cache_k.shape[1]
    fits = (
        t <= SPLIT_ATTENTION_MAX_NODES
        and (window == 0 or window >= t)
        and q.dtype in _DTYPES
        and cache_k.dtype == q.dtype
        and cache_v.dtype == q.dtype
        and cache_k.stride() == cache_v.stride()
        and cache_k.stride(3) == 1
        and h % hkv == 0
        and anc.shape == (b, t, t)
        and (gate is None or gate.stride(3) == 1)
    )
    if not fits or not use_kernel(options, q, cache_k):
        return None
    rows = q.transpose(1, 2).reshape(b * t, h * d)
    gate_rows = None if gate is None else gate.reshape(b * t, h, d)
    args = (rows, cache_k, cache_v, lengths, anc, h, hkv, gate_rows, window)
    out = launch(split_tree_attention_op, "weaver.kernels.triton.split_attention", "split_tree_attention", *args)
    return out.view(b, t, h * d)
