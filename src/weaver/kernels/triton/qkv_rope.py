"""The tree verify's qkv projection with its qk-norm, RoPE and K/V write in the same launch.

    q = qkv_rope_kv(x, w_qkv, norm_w, eps, cache_k, cache_v, lengths, depth, inv_freq, H, Hkv, q_norm, k_norm)
    o = tree_attention(q, cache_k, cache_v, lengths, anc, H, Hkv)

is `tree_rope_kv_write(fused_gemv(x, w_qkv, norm_weight=norm_w, row_tiles=True), ...)` in one launch instead
of two, for trees past ROPE_ATTENTION_MAX_NODES (the weaver verify: 30 launches fewer a SmolLM2 verify).
A program's column tile is one head (BLOCK_N = head dim) of q, k or v for BLOCK_M nodes. A q or k tile
goes out to the qkv rows, comes back after a barrier (so each element can meet its RoPE partner, which
another thread of the program computed), and goes through the same `_rope_rows` as `tree_rope_kv_write`;
a v tile goes straight to the cache. Under the interpreter the results are the two launches' bit for bit at
the same tiles (tests); compiled, the one-graph rounds with it give the ar tokens (rounds/h200_v27).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from weaver.kernels.triton._utils import check_device, interpreting
from weaver.kernels.triton.decode import GemmTiles, _round, gemm_rows_acc, pdl_gemm_options, row_tiles_for
from weaver.kernels.triton.tree_attention import _rope_rows, check_tree_rope

__all__ = ["head_dim_fits", "qkv_rope_kv"]


def head_dim_fits(head_dim: int) -> bool:
    """A program's column tile is one whole head: a power of two >= 16 (tl.dot, tl.arange)."""
    return head_dim >= 16 and head_dim & (head_dim - 1) == 0


@triton.jit
def _qkv_rope_kv_kernel(
    x_ptr, w_ptr, norm_ptr, qkv_ptr, q_ptr, k_ptr, v_ptr, len_ptr, depth_ptr, inv_freq_ptr, qn_ptr, kn_ptr,
    M, K, T, S, eps,
    stride_xm, stride_wn, stride_om, stride_q, stride_db, stride_dj, stride_cb, stride_ch, stride_cs,
    H: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, ROT: tl.constexpr, QK_NORM: tl.constexpr,
    INTERPRET: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
    PDL: tl.constexpr = False, K_LINES: tl.constexpr = 1,
):  # fmt: skip
    i_n = tl.program_id(0)  # head i_n of q | k | v
    i_m = tl.program_id(1)
    dtype = x_ptr.dtype.element_ty
    o_m = i_m * BLOCK_M + tl.arange(0, BLOCK_M)  # rows b * T + j: node j of batch row b
    o_d = tl.arange(0, D)
    o_n = i_n * D + o_d
    mask_m = o_m < M
    n_out = (H + 2 * HKV) * D
    y = gemm_rows_acc(
        x_ptr, w_ptr, norm_ptr, x_ptr, o_m, mask_m, o_n, i_n, K, n_out, n_out, eps, stride_xm, stride_wn, 0,
        True, False, False, INTERPRET, BLOCK_M, D, BLOCK_K, PDL, K_LINES,
    )  # fmt: skip
    y = _round(y, dtype).to(dtype)
    mask_o = mask_m[:, None] & (o_d < D)[None, :]
    tl.store(qkv_ptr + o_m[:, None] * stride_om + o_n[None, :], y, mask=mask_o)
    i_b = o_m // T
    i_j = o_m % T
    length = tl.load(len_ptr + i_b, mask=mask_m, other=0)
    slot = length + i_j
    mask_kv = mask_o & (slot < S)[:, None]  # a tree past the capacity is dropped, never written out of bounds
    if i_n < H + HKV:  # q or k: RoPE at position length + depth, each element with its partner half
        tl.debug_barrier()  # the tile's stores above are visible to every thread of the program
        pos = length + tl.load(depth_ptr + i_b * stride_db + i_j * stride_dj, mask=mask_m, other=0)
        freq = tl.load(inv_freq_ptr + (o_d % (ROT // 2)), mask=o_d < ROT, other=0.0)
        angle = pos.to(tl.float32)[:, None] * freq[None, :]
        cos = _round(tl.cos(angle), dtype)
        sin = _round(tl.sin(angle), dtype)
        p_rows = qkv_ptr + o_m[:, None] * stride_om + i_n * D
        if i_n < H:
            b_q = _rope_rows(p_rows, mask_m, o_d, D, ROT, cos, sin, qn_ptr, eps, QK_NORM, dtype)
            tl.store(q_ptr + o_m[:, None] * stride_q + i_n * D + o_d[None, :], b_q.to(dtype), mask=mask_o)
        else:
            b_k = _rope_rows(p_rows, mask_m, o_d, D, ROT, cos, sin, kn_ptr, eps, QK_NORM, dtype)
            offset = i_b[:, None] * stride_cb + (i_n - H) * stride_ch + slot[:, None] * stride_cs + o_d[None, :]
            tl.store(k_ptr + offset, b_k.to(k_ptr.dtype.element_ty), mask=mask_kv)
    else:  # v: to the cache as projected
        offset = i_b[:, None] * stride_cb + (i_n - H - HKV) * stride_ch + slot[:, None] * stride_cs + o_d[None, :]
        tl.store(v_ptr + offset, y.to(v_ptr.dtype.element_ty), mask=mask_kv)


def qkv_rope_kv(
    x: torch.Tensor, weight: torch.Tensor, norm_weight: torch.Tensor, eps: float, cache_k: torch.Tensor,
    cache_v: torch.Tensor, lengths: torch.Tensor, depth: torch.Tensor, inv_freq: torch.Tensor, num_heads: int,
    num_kv_heads: int, q_norm: torch.Tensor | None = None, k_norm: torch.Tensor | None = None,
    tiles: GemmTiles | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm (norm_weight, eps) + the fused q | k | v projection (weight [(H + 2 Hkv) D, hidden]) of the node
    rows x [B T, hidden], then `tree_rope_kv_write` with the remaining arguments, in one launch: returns (qkv
    [B T, (H + 2 Hkv) D] before RoPE, q [B T, H D] after). tiles: None = the qkv GEMM's own (tuned) tiles with
    BLOCK_N = D."""
    check_device(x, weight, norm_weight, cache_k, cache_v, lengths, depth, inv_freq)
    b, t, s, d = check_tree_rope(cache_k, cache_v, lengths, depth, num_heads, num_kv_heads, q_norm, k_norm)
    width = (num_heads + 2 * num_kv_heads) * d
    if x.dim() != 2 or x.shape[0] != b * t or weight.shape != (width, x.shape[1]) or norm_weight.shape != x.shape[1:]:
        raise ValueError(f"qkv_rope_kv: x [{b * t}, hidden], weight [{width}, hidden], norm_weight [hidden]; got "
                         f"{tuple(x.shape)}, {tuple(weight.shape)}, {tuple(norm_weight.shape)}")  # fmt: skip
    if x.stride(1) != 1 or weight.stride(1) != 1 or not head_dim_fits(d):
        raise ValueError("qkv_rope_kv: unit stride along hidden and a power-of-two head dim >= 16")
    tiles = tiles or row_tiles_for(x, width, x.dtype, True, False, False, False)
    qkv = torch.empty(b * t, width, device=x.device, dtype=x.dtype)
    q = torch.empty(b * t, num_heads * d, device=x.device, dtype=x.dtype)
    inv_freq = inv_freq.float().contiguous()
    grid = (num_heads + 2 * num_kv_heads, triton.cdiv(b * t, tiles.block_m))
    _qkv_rope_kv_kernel[grid](
        x, weight, norm_weight, qkv, q, cache_k, cache_v, lengths, depth, inv_freq,
        q_norm if q_norm is not None else inv_freq, k_norm if k_norm is not None else inv_freq,
        b * t, x.shape[1], t, s, eps,
        x.stride(0), weight.stride(0), qkv.stride(0), q.stride(0), *depth.stride(), cache_k.stride(0),
        cache_k.stride(1), cache_k.stride(2),
        H=num_heads, HKV=num_kv_heads, D=d, ROT=2 * inv_freq.shape[0], QK_NORM=q_norm is not None,
        INTERPRET=interpreting(), BLOCK_M=tiles.block_m, BLOCK_K=tiles.block_k, num_warps=tiles.num_warps,
        num_stages=tiles.num_stages, **pdl_gemm_options(x.device, x.shape[1], weight.element_size()),
    )  # fmt: skip
    return qkv, q
