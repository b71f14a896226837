"""The tree verify's first two launches of an attention layer in one: (norm + qkv GEMM) and (qk-norm + RoPE
+ K/V write), for models whose RoPE spans the whole head.

    q = qkv_rope_write(x, w_qkv, norm_w, eps, cache_k, cache_v, lengths, depth, inv_freq, H, Hkv, q_norm, k_norm)

A program owns one head (a q, k or v head of the fused projection) for a tile of BLOCK_M node rows. It
multiplies the normed rows with the head's two column halves into two accumulators, so the RoPE partner of
every column (d +- D/2) is in its own registers: the epilogue rounds the projection to the model dtype (the
rows the two-launch path stores), applies qk-norm and RoPE at position lengths + depth with the rounding
points of `tree_rope_kv_write`, and writes q to the output, k and v to cache slot lengths + j. The qkv
activations never reach memory and the 2.2 us RoPE launch of each layer is gone (30 a SmolLM2 verify).
Reference: `fused_gemv` then `tree_rope_kv_write` (the test compares them).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from weaver.ops.triton._utils import check_device, interpreting
from weaver.ops.triton.decode import _dot_rows, _round, load_normed_rows, rows_rstd

__all__ = ["qkv_rope_config", "qkv_rope_write"]


def qkv_rope_config(hidden: int) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_K): 16-row tiles as the tuned verify GEMMs chose at 16 and 65 rows (h200.json), K in
    steps of 128 (sm_90, triton 3.6: 106 registers, no spill; 256 takes 168 and 48 B of stack, 64-row tiles
    250+). WEAVER_VERIFY_QKV_TILES="BM,BK" overrides it (for timing other tiles)."""
    env = os.environ.get("WEAVER_VERIFY_QKV_TILES")
    if env:
        block_m, block_k = (int(v) for v in env.split(","))
        return block_m, block_k
    return 16, min(128, max(16, triton.next_power_of_2(hidden)))


@triton.jit
def _qkv_rope_kernel(
    x_ptr, w_ptr, norm_ptr, k_ptr, v_ptr, len_ptr, depth_ptr, inv_freq_ptr, qn_ptr, kn_ptr, q_ptr,
    M, K, T, S, eps, qk_eps,
    stride_xm, stride_wn, stride_db, stride_cb, stride_ch, stride_cs, stride_q,
    H: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, QK_NORM: tl.constexpr, INTERPRET: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    i_h = tl.program_id(0)  # head of the fused projection: q heads, then k heads, then v heads
    i_m = tl.program_id(1)
    dtype = x_ptr.dtype.element_ty
    HALF: tl.constexpr = D // 2
    o_m = i_m * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = o_m < M
    o_c = tl.arange(0, HALF)
    o_k0 = tl.arange(0, BLOCK_K)
    p_x = x_ptr + o_m[:, None] * stride_xm
    rstd = rows_rstd(p_x, mask_m, K, eps, BLOCK_M, BLOCK_K)
    acc_lo = tl.zeros([BLOCK_M, HALF], dtype=tl.float32)
    acc_hi = tl.zeros([BLOCK_M, HALF], dtype=tl.float32)
    p_w = w_ptr + (i_h * D + o_c)[None, :] * stride_wn  # [1, HALF]: the head's first column half
    for k0 in range(0, K, BLOCK_K):
        o_k = k0 + o_k0
        mask_k = o_k < K
        b_x = load_normed_rows(p_x, o_k, mask_m, mask_k, rstd, norm_ptr, True, dtype)
        w_lo = tl.load(p_w + o_k[:, None], mask=mask_k[:, None], other=0.0)  # [BLOCK_K, HALF]: W^T tile
        w_hi = tl.load(p_w + HALF * stride_wn + o_k[:, None], mask=mask_k[:, None], other=0.0)
        acc_lo += _dot_rows(b_x, w_lo, dtype, w_ptr.dtype.element_ty, INTERPRET)
        acc_hi += _dot_rows(b_x, w_hi, dtype, w_ptr.dtype.element_ty, INTERPRET)
    lo = _round(acc_lo, dtype)  # the qkv activations as the two-launch path stores them
    hi = _round(acc_hi, dtype)
    i_b = o_m // T
    i_j = o_m % T
    length = tl.load(len_ptr + i_b, mask=mask_m, other=0)
    mask = mask_m[:, None] & (o_c < HALF)[None, :]
    if i_h < H + HKV:  # q or k head: [qk-norm ->] RoPE (half split, the whole head rotated)
        if QK_NORM:
            p_n = qn_ptr if i_h < H else kn_ptr
            r = 1.0 / tl.sqrt((tl.sum(lo * lo, axis=1) + tl.sum(hi * hi, axis=1)) / D + qk_eps)
            lo = _round(_round(lo * r[:, None], dtype) * tl.load(p_n + o_c).to(tl.float32)[None, :], dtype)
            hi = _round(_round(hi * r[:, None], dtype) * tl.load(p_n + HALF + o_c).to(tl.float32)[None, :], dtype)
        pos = length + tl.load(depth_ptr + i_b * stride_db + i_j, mask=mask_m, other=0)
        angle = pos.to(tl.float32)[:, None] * tl.load(inv_freq_ptr + o_c)[None, :]
        cos = _round(tl.cos(angle), dtype)
        sin = _round(tl.sin(angle), dtype)
        out_lo = _round(_round(lo * cos, dtype) + _round(-hi * sin, dtype), dtype)
        out_hi = _round(_round(hi * cos, dtype) + _round(lo * sin, dtype), dtype)
        if i_h < H:
            p_q = q_ptr + o_m[:, None] * stride_q + i_h * D + o_c[None, :]
            tl.store(p_q, out_lo.to(q_ptr.dtype.element_ty), mask=mask)
            tl.store(p_q + HALF, out_hi.to(q_ptr.dtype.element_ty), mask=mask)
        else:
            slot = length + i_j
            keep = mask & (slot < S)[:, None]  # a tree past the capacity is dropped, never written out of bounds
            p_k = k_ptr + (i_b * stride_cb + (i_h - H) * stride_ch + slot * stride_cs)[:, None] + o_c[None, :]
            tl.store(p_k, out_lo.to(k_ptr.dtype.element_ty), mask=keep)
            tl.store(p_k + HALF, out_hi.to(k_ptr.dtype.element_ty), mask=keep)
    else:  # v head: stored as projected
        slot = length + i_j
        keep = mask & (slot < S)[:, None]
        p_v = v_ptr + (i_b * stride_cb + (i_h - H - HKV) * stride_ch + slot * stride_cs)[:, None] + o_c[None, :]
        tl.store(p_v, lo.to(v_ptr.dtype.element_ty), mask=keep)
        tl.store(p_v + HALF, hi.to(v_ptr.dtype.element_ty), mask=keep)


def qkv_rope_write(
    x: torch.Tensor,  # [B T, hidden] the layer's input rows (before the input norm)
    weight: torch.Tensor,  # [(H + 2 Hkv) D, hidden]: the fused q | k | v projection
    norm_weight: torch.Tensor,  # [hidden] input RMSNorm
    eps: float,
    cache_k: torch.Tensor,  # [B, Hkv, S, D], unit stride along D
    cache_v: torch.Tensor,
    lengths: torch.Tensor,  # [B] long: committed tokens per row
    depth: torch.Tensor,  # [B, T] long: node depths (root 0)
    inv_freq: torch.Tensor,  # [D/2] fp32: RoPE over the whole head
    num_heads: int,
    num_kv_heads: int,
    q_norm: torch.Tensor | None = None,  # [D] per-head RMSNorm weights (qwen3)
    k_norm: torch.Tensor | None = None,
    qk_eps: float = 1e-6,
) -> torch.Tensor:
    """`tree_rope_kv_write(fused_gemv(x, weight, norm_weight), ...)` in one launch; returns q [B T, H D]."""
    check_device(x, weight, norm_weight, cache_k, cache_v, lengths, depth, inv_freq)
    b, _, s, d = cache_k.shape
    if depth.dim() != 2 or depth.shape[0] != b or lengths.shape != (b,):
        raise ValueError(f"lengths must be [{b}] and depth [{b}, T], got {tuple(lengths.shape)}, {tuple(depth.shape)}")
    t = depth.shape[1]
    m, hidden = x.shape
    if m != b * t or weight.shape != ((num_heads + 2 * num_kv_heads) * d, hidden) or x.stride(1) != 1:
        raise ValueError(f"x must be [{b * t}, hidden] and weight [(H + 2 Hkv) D, hidden], got {tuple(x.shape)}, "
                         f"{tuple(weight.shape)}")  # fmt: skip
    if weight.stride(1) != 1 or cache_k.stride() != cache_v.stride() or cache_k.stride(3) != 1:
        raise ValueError("qkv_rope_write needs unit strides along K and D and equal cache strides")
    if 2 * inv_freq.shape[0] != d or d % 32 or num_heads % num_kv_heads or (q_norm is None) != (k_norm is None):
        raise ValueError("qkv_rope_write needs RoPE over the whole head, D a multiple of 32, H % Hkv == 0 and "
                         "q_norm / k_norm together")  # fmt: skip
    q = torch.empty(m, num_heads * d, device=x.device, dtype=x.dtype)
    if m == 0:
        return q
    inv_freq = inv_freq.float().contiguous()
    block_m, block_k = qkv_rope_config(hidden)
    grid = (num_heads + 2 * num_kv_heads, triton.cdiv(m, block_m))
    _qkv_rope_kernel[grid](
        x, weight, norm_weight, cache_k, cache_v, lengths, depth, inv_freq,
        q_norm if q_norm is not None else inv_freq, k_norm if k_norm is not None else inv_freq, q,
        m, hidden, t, s, eps, qk_eps,
        x.stride(0), weight.stride(0), depth.stride(0), cache_k.stride(0), cache_k.stride(1), cache_k.stride(2),
        q.stride(0),
        H=num_heads, HKV=num_kv_heads, D=d, QK_NORM=q_norm is not None, INTERPRET=interpreting(),
        BLOCK_M=block_m, BLOCK_K=block_k, num_warps=4,
    )  # fmt: skip
    return q
