"""Fused single-token decode kernels: five launches per attention layer instead of ~15.

    y = fused_gemv(x, W, norm_weight=ln, residual=r, swiglu=True)   # RMSNorm prologue, epilogues
    o = decode_attention(qkv, cache_k, cache_v, lengths, inv_freq, H, Hkv, q_norm, k_norm)

A batch-1 decode step is launch-bound (the weights of a 135M model stream in ~60 us, the ~450 kernels
of the unfused step take ~1.2 ms), so fewer kernels is the whole point. Each kernel recomputes the
RMSNorm of its input row (K <= a few thousand values, read from L2) rather than launching a norm kernel.
Torch references with the same rounding points: `weaver.ops.decode`. The tree verify
(`weaver.kernels.triton.tree_attention`) runs `fused_gemv` over B T rows: from ROW_TILE_MIN_M rows (or when asked)
a program takes BLOCK_M rows and reads its weight tile once for all of them.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from weaver.kernels.gemv import GEMV_MAX_K, GEMV_MIN_BYTES, GEMV_MIN_K
from weaver.kernels.triton import tuning
from weaver.kernels.triton._utils import (
    check_device,
    interpreting,
    pdl_launch,
    pdl_wait,
    prefetch_prefix,
    prefetch_rows,
)


def gemv_config(
    n_out: int, k: int, rows: int, device: torch.device, block_m: int = 1, swiglu: bool = False
) -> tuple[int, int, int]:
    """(BLOCK_N, BLOCK_K, num_warps) for an [n_out, k] GEMV over `rows` input rows, block_m of them a program.

    One warp per program and a 1024-element weight tile: on the H200 that is the fastest, or within
    0.3 us of it, for every SmolLM2 shape (benchmarks/results/ar/v3/decode_sweep.txt): tiny programs,
    many of them, so the loads of all SMs are in flight at once. Wide outputs (the LM head) take taller
    tiles to bound the program count. A program of block_m > 1 rows (a Weaver adapter step's nodes) loads whole
    input rows at once with two warps: on an H100 at width 2048, 2.8-3.2x faster than the per-row rule's tiles
    (benchmarks/results/scale/h100_session44_finish). One row of a large weight (the 27B shapes) loads whole
    input rows too, up to 8,192 (one or two weight rows a program, 4 warps a row): on an H100 faster than cuBLAS
    for every such shape with K <= 8,192 (kernels/h100_session45_split_gemv). Under the CPU interpreter, few large
    programs run fastest.
    """
    if device.type != "cuda":
        return 16, min(128, triton.next_power_of_2(k)), 1
    if block_m == 1 and rows == 1 and 2 * n_out * k >= GEMV_MIN_BYTES and k >= GEMV_MIN_K:  # 16-bit weights
        wide = n_out > 8192 and not swiglu
        return (2 if wide else 1), min(GEMV_MAX_K, triton.next_power_of_2(k)), (8 if wide else 4)
    if block_m > 1:
        return (4 if n_out >= 2048 else 2), min(2048, triton.next_power_of_2(k)), 2
    block_n = 2 if n_out * rows <= 1024 else 4 if n_out * rows <= 4096 else 16
    block_k = min(1024 // block_n, triton.next_power_of_2(k))
    return block_n, block_k, 1


ROW_TILE_MIN_M = 16  # rows from which fused_gemv tiles M (tl.dot needs 16-row tiles; below, the decode GEMV)


class GemmTiles(NamedTuple):
    """Launch configuration of the row-tiled GEMV: tile sizes (powers of two, >= 16) and Triton's options."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 3  # Triton's default on NVIDIA GPUs


def gemm_rows_config(n_out: int, k: int, rows: int, device: torch.device) -> GemmTiles:
    """The built-in row-tiled GEMV configuration: all rows of a tree in few M tiles."""
    block_m = min(64, max(16, triton.next_power_of_2(rows)))
    block_k = min(128, max(16, triton.next_power_of_2(k)))
    if device.type != "cuda":  # the interpreter: few, large programs
        return GemmTiles(block_m, 64, block_k, 1)
    block_n = 32 if n_out * triton.cdiv(rows, block_m) <= 8192 else 64
    return GemmTiles(block_m, block_n, min(block_k, 64), 4)


_INTERPRETED = tl.constexpr(interpreting())  # fixed at import: triton reads TRITON_INTERPRET when it loads


@triton.jit
def _round(x, DTYPE: tl.constexpr):
    """Round fp32 to the model dtype and back (the rounding points of the unfused torch code).

    bf16 rounds to nearest-even by bit arithmetic: Triton's interpreter truncates on `.to(bfloat16)`,
    and the CPU tests must see the same values as the GPU. Compiled, the conversion is one round-to-nearest-even
    instruction each way (the bit arithmetic cost ~10 integer instructions an element, in the GEMMs' K loops)."""
    if DTYPE == tl.bfloat16 and not _INTERPRETED:
        return x.to(tl.bfloat16).to(tl.float32)
    elif DTYPE == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.to(tl.float32, bitcast=True)
    elif DTYPE == tl.float16:
        return x.to(tl.float16).to(tl.float32)
    else:
        return x


@triton.jit
def _gemv_kernel(
    x_ptr, w_ptr, norm_ptr, res_ptr, out_ptr, bias_ptr, norm_bias_ptr,
    M, K, N_OUT, HALF, eps,
    stride_xm, stride_wn, stride_rm, stride_om,
    NORM: tl.constexpr, SWIGLU: tl.constexpr, RESIDUAL: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    NORM_FP32: tl.constexpr = False, NORM_BIAS: tl.constexpr = False, BIAS: tl.constexpr = False,
    GELU: tl.constexpr = False, PDL: tl.constexpr = False, K_LINES: tl.constexpr = 1, BLOCK_M: tl.constexpr = 1,
):
    """BLOCK_M input rows x BLOCK_N outputs a program: each weight tile is read once for the program's rows (the
    decode step: one row; a Weaver adapter step: its few node rows, whose weights pass L2 at the paper's width)."""
    pid_n = tl.program_id(0)
    o_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    m_ok = o_m < M
    dtype = x_ptr.dtype.element_ty
    o_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = o_n < N_OUT
    if PDL:  # as in _gemm_rows_kernel: this program's weight rows toward L2, then wait for the previous kernel
        prefetch_rows(w_ptr + tl.minimum(o_n, N_OUT - 1)[:, None] * stride_wn, K, K_LINES)
        if SWIGLU:
            prefetch_rows(w_ptr + (tl.minimum(o_n, N_OUT - 1) + HALF)[:, None] * stride_wn, K, K_LINES)
        pdl_wait()
    cols0 = tl.arange(0, BLOCK_K)
    p_x = x_ptr + o_m[:, None] * stride_xm  # [BLOCK_M, 1]
    rstd = tl.full([BLOCK_M], 1.0, dtype=tl.float32)
    if NORM:  # RMSNorm statistics of the whole input rows, recomputed by every program
        rstd = rows_rstd(p_x, m_ok, K, eps, BLOCK_M, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        cols = k0 + cols0
        col_ok = cols < K
        xk = tl.load(p_x + cols[None, :], mask=m_ok[:, None] & col_ok[None, :], other=0.0).to(tl.float32)
        if NORM:
            nw = tl.load(norm_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
            if NORM_FP32:  # WeaverNorm: weight * x / rms(x) (+ bias) in fp32, one rounding
                xk = xk * rstd[:, None] * nw
                if NORM_BIAS:
                    xk += tl.load(norm_bias_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
                xk = _round(xk, dtype)
            else:
                xk = _round(_round(xk * rstd[:, None], dtype) * nw, dtype)
        tile = n_ok[:, None] & col_ok[None, :]
        w = tl.load(w_ptr + o_n[:, None] * stride_wn + cols[None, :], mask=tile, other=0.0).to(tl.float32)
        acc += tl.sum(w[None, :, :] * xk[:, None, :], axis=2)
        if SWIGLU:
            w_up = tl.load(w_ptr + (o_n[:, None] + HALF) * stride_wn + cols[None, :], mask=tile, other=0.0)
            acc_up += tl.sum(w_up.to(tl.float32)[None, :, :] * xk[:, None, :], axis=2)
    y = acc
    if SWIGLU:  # silu(gate) * up; with BIAS each half's bias joins its accumulator before its one rounding
        up = acc_up
        if BIAS:
            y += tl.load(bias_ptr + o_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
            up += tl.load(bias_ptr + o_n + HALF, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        gate = _round(y, dtype)
        y = _round(gate / (1.0 + tl.exp(-gate)), dtype) * _round(up, dtype)
    elif BIAS:  # nn.Linear's bias joins the fp32 accumulator before the one rounding
        y = _round(y + tl.load(bias_ptr + o_n, mask=n_ok, other=0.0).to(tl.float32)[None, :], dtype)
    if GELU:  # exact (erf) GELU of the rounded linear output
        y = 0.5 * y * (1.0 + tl.math.erf(y * 0.7071067811865476))
    out_tile = m_ok[:, None] & n_ok[None, :]
    if RESIDUAL:
        r = tl.load(res_ptr + o_m[:, None] * stride_rm + o_n[None, :], mask=out_tile, other=0.0).to(tl.float32)
        y = _round(y, dtype) + r
    out_dtype = out_ptr.dtype.element_ty
    tl.store(out_ptr + o_m[:, None] * stride_om + o_n[None, :], _round(y, out_dtype).to(out_dtype), mask=out_tile)


def fused_gemv(
    x: torch.Tensor,  # [M, K]
    weight: torch.Tensor,  # [N, K], rows contiguous
    norm_weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    residual: torch.Tensor | None = None,  # [M, N_out]
    swiglu: bool = False,
    out_dtype: torch.dtype | None = None,
    config: tuple[int, int, int] | None = None,  # (BLOCK_N, BLOCK_K, num_warps); default: gemv_config
    norm_out: torch.Tensor | None = None,  # [M, K]: receives RMSNorm(x) (needs norm_weight)
    row_tiles: bool | None = None,  # BLOCK_M rows per program; None: from ROW_TILE_MIN_M rows or with norm_out
    tiles: GemmTiles | None = None,  # the row-tiled launch (implies row_tiles); None: tuned or gemm_rows_config
    *,
    block_m: int = 1,  # rows a program of the per-row GEMV reads each weight tile for (a power of two <= 8)
    norm_fp32: bool = False,  # the Weaver adapter's norm: weight * x / rms(x) (+ norm_bias) in fp32, one rounding
    norm_bias: torch.Tensor | None = None,  # [K] (needs norm_fp32)
    bias: torch.Tensor | None = None,  # [N]: nn.Linear's bias (with swiglu: [gate; up], 2 N_out)
    gelu: bool = False,  # exact GELU after the (biased) linear
    out: torch.Tensor | None = None,  # [M, N_out] to write into (e.g. a column slice of a wider buffer)
) -> torch.Tensor:
    """[RMSNorm ->] x @ W^T [+ bias] [-> GELU | silu(gate) * up] [-> + residual]: one launch (see
    fused_gemv_ref; the adapter's options, norm_fp32 / norm_bias / bias / gelu, only on the per-row GEMV, where
    bias also goes with swiglu).

    Below ROW_TILE_MIN_M rows each program reads its weight tile for block_m rows (the tuned decode GEMV: one);
    from there on a program takes BLOCK_M rows and multiplies them with one read of its weight tile.
    The row-tiled launch is `tiles`, else the entry of the WEAVER_TRITON_TUNING table for this shape
    (`tuning`), else `gemm_rows_config`.
    """
    check_device(x, weight, norm_weight, residual, norm_out)
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"fused_gemv needs x [M, K] and weight [N, K], got {tuple(x.shape)} and {tuple(weight.shape)}")
    if weight.stride(1) != 1 or x.stride(1) != 1:
        raise ValueError("fused_gemv needs unit stride along K")
    m, k = x.shape
    n = weight.shape[0]
    if swiglu and n % 2:
        raise ValueError("swiglu needs an even number of output rows (gate | up)")
    n_out = n // 2 if swiglu else n
    if out is None:
        out = torch.empty(m, n_out, device=x.device, dtype=out_dtype or x.dtype)
    elif out.shape != (m, n_out) or out.stride(1) != 1 or out.dtype != (out_dtype or x.dtype):
        raise ValueError(f"out must be [{m}, {n_out}] {out_dtype or x.dtype} with unit stride, got "
                         f"{tuple(out.shape)} {out.dtype}")
    if residual is not None and (residual.shape != (m, n_out) or residual.stride(1) != 1):
        raise ValueError(f"residual must be [{m}, {n_out}] with unit stride, got {tuple(residual.shape)}")
    if norm_out is not None and (norm_weight is None or norm_out.shape != x.shape or norm_out.stride(1) != 1):
        raise ValueError(f"norm_out needs norm_weight and shape {tuple(x.shape)} with unit stride")
    adapter_opts = norm_fp32 or norm_bias is not None or bias is not None or gelu
    if adapter_opts and (row_tiles or tiles is not None or norm_out is not None or (gelu and swiglu)):
        raise ValueError("norm_fp32, norm_bias, bias and gelu are options of the per-row GEMV (no tiles; gelu or "
                         "swiglu, not both)")
    if block_m not in (1, 2, 4, 8):
        raise ValueError(f"block_m must be 1, 2, 4 or 8, got {block_m}")
    if bias is not None and bias.shape != (n,):
        raise ValueError(f"bias must be [{n}] (one entry a weight row), got {tuple(bias.shape)}")
    if norm_bias is not None and not (norm_fp32 and norm_weight is not None):
        raise ValueError("norm_bias needs norm_weight and norm_fp32=True")
    check_device(x, bias, norm_bias)
    if row_tiles is None:
        row_tiles = not adapter_opts and (
            norm_out is not None or tiles is not None or (config is None and m >= ROW_TILE_MIN_M)
        )
    if row_tiles:
        if tiles is None:
            tiles = row_tiles_for(x, n_out, out.dtype, norm_weight is not None, swiglu, residual is not None,
                                  norm_out is not None)  # fmt: skip
        return _fused_gemm_rows(x, weight, norm_weight, eps, residual, swiglu, out, norm_out, tiles)
    if tiles is not None:
        raise ValueError("tiles configure the row-tiled kernel (row_tiles=None or True)")
    if norm_out is not None:
        raise ValueError("norm_out needs the row-tiled kernel (row_tiles=None or True)")
    block_n, block_k, warps = config or gemv_config(n_out, k, m, x.device, block_m, swiglu)
    grid = (triton.cdiv(n_out, block_n), triton.cdiv(m, block_m))
    _gemv_kernel[grid](
        x, weight, norm_weight if norm_weight is not None else x, residual if residual is not None else out, out,
        bias if bias is not None else out, norm_bias if norm_bias is not None else out,
        m, k, n_out, n_out, eps,
        x.stride(0), weight.stride(0), residual.stride(0) if residual is not None else 0, out.stride(0),
        NORM=norm_weight is not None, SWIGLU=swiglu, RESIDUAL=residual is not None,
        BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps,
        NORM_FP32=norm_fp32, NORM_BIAS=norm_bias is not None, BIAS=bias is not None, GELU=gelu, BLOCK_M=block_m,
        **pdl_gemm_options(x.device, k, weight.element_size()),
    )
    return out


@triton.jit
def _dot_rows(a, w, DTYPE: tl.constexpr, W_DTYPE: tl.constexpr, INTERPRET: tl.constexpr):
    """a [M, K] (DTYPE) @ w [K, N] with an fp32 result, every product exact.

    16-bit operands go to the tensor cores as they are; fp32 (and the interpreter, which would multiply
    bf16 bit patterns) take exact fp32 FMAs."""
    if INTERPRET or DTYPE == tl.float32 or DTYPE != W_DTYPE:
        return tl.dot(a.to(tl.float32), w.to(tl.float32), input_precision="ieee")
    else:
        return tl.dot(a, w)


@triton.jit
def rows_rstd(p_x, mask_m, K, eps, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """1 / rms of each row of a [BLOCK_M, K] tile (p_x: [BLOCK_M, 1] row pointers), recomputed per program."""
    o_k0 = tl.arange(0, BLOCK_K)
    sq = tl.zeros([BLOCK_M, BLOCK_K], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        o_k = k0 + o_k0
        b_x = tl.load(p_x + o_k[None, :], mask=mask_m[:, None] & (o_k < K)[None, :], other=0.0).to(tl.float32)
        sq += b_x * b_x
    return 1.0 / tl.sqrt(tl.sum(sq, axis=1) / K + eps)


@triton.jit
def load_normed_rows(p_x, o_k, mask_m, mask_k, rstd, norm_ptr, NORM: tl.constexpr, DTYPE: tl.constexpr):
    """Columns o_k of the rows in DTYPE (x's dtype), through the RMSNorm (weight at norm_ptr) with NORM, rounded
    as the unfused norm stores them; without NORM the loaded tile as it is (no fp32 round trip before the dot)."""
    b_x = tl.load(p_x + o_k[None, :], mask=mask_m[:, None] & mask_k[None, :], other=0.0)
    if NORM:
        b_nw = tl.load(norm_ptr + o_k, mask=mask_k, other=0.0).to(tl.float32)
        b_x = _round(_round(b_x.to(tl.float32) * rstd[:, None], DTYPE) * b_nw[None, :], DTYPE).to(DTYPE)
    return b_x


@triton.jit
def gemm_rows_acc(
    x_ptr, w_ptr, norm_ptr, nout_ptr, o_m, mask_m, o_n, i_n,
    K, N_OUT, HALF, eps, stride_xm, stride_wn, stride_nm,
    NORM: tl.constexpr, SWIGLU: tl.constexpr, NORM_OUT: tl.constexpr, INTERPRET: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr, K_LINES: tl.constexpr,
):  # fmt: skip
    """Rows o_m x output columns o_n of [RMSNorm ->] x @ W^T [-> silu(gate) * up] in fp32 (not rounded): the
    row-tiled GEMV's main loop, one read of the program's weight tile for all of its rows; with NORM_OUT,
    program column i_n == 0 hands out the normalised rows."""
    dtype = x_ptr.dtype.element_ty
    w_dtype = w_ptr.dtype.element_ty
    o_k0 = tl.arange(0, BLOCK_K)
    mask_n = o_n < N_OUT
    p_x = x_ptr + o_m[:, None] * stride_xm
    if PDL:  # launched before the previous kernel ends: pull this program's weights toward L2, then wait for it
        prefetch_rows(w_ptr + tl.minimum(o_n, N_OUT - 1)[:, None] * stride_wn, K, K_LINES)
        if SWIGLU:
            prefetch_rows(w_ptr + (tl.minimum(o_n, N_OUT - 1) + HALF)[:, None] * stride_wn, K, K_LINES)
        pdl_wait()
    rstd = tl.full([BLOCK_M], 1.0, dtype=tl.float32)
    if NORM:  # RMSNorm statistics of every row of the tile, recomputed by every program
        rstd = rows_rstd(p_x, mask_m, K, eps, BLOCK_M, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        o_k = k0 + o_k0
        mask_k = o_k < K
        b_x = load_normed_rows(p_x, o_k, mask_m, mask_k, rstd, norm_ptr, NORM, dtype)
        if NORM_OUT:
            if i_n == 0:  # the first column of programs hands the normalised rows out
                p_no = nout_ptr + o_m[:, None] * stride_nm + o_k[None, :]
                tl.store(p_no, b_x.to(nout_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_k[None, :])
        p_w = w_ptr + o_n[None, :] * stride_wn + o_k[:, None]  # [BLOCK_K, BLOCK_N]: W^T tile
        mask_w = mask_k[:, None] & mask_n[None, :]
        acc += _dot_rows(b_x, tl.load(p_w, mask=mask_w, other=0.0), dtype, w_dtype, INTERPRET)
        if SWIGLU:
            b_up = tl.load(p_w + HALF * stride_wn, mask=mask_w, other=0.0)
            acc_up += _dot_rows(b_x, b_up, dtype, w_dtype, INTERPRET)
    y = acc
    if SWIGLU:
        gate = _round(acc, dtype)
        y = _round(gate / (1.0 + tl.exp(-gate)), dtype) * _round(acc_up, dtype)
    return y


@triton.jit
def _gemm_rows_kernel(
    x_ptr, w_ptr, norm_ptr, res_ptr, out_ptr, nout_ptr,
    M, K, N_OUT, HALF, eps,
    stride_xm, stride_wn, stride_rm, stride_om, stride_nm,
    NORM: tl.constexpr, SWIGLU: tl.constexpr, RESIDUAL: tl.constexpr, NORM_OUT: tl.constexpr,
    INTERPRET: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PDL: tl.constexpr = False, K_LINES: tl.constexpr = 1,
):
    i_n = tl.program_id(0)
    i_m = tl.program_id(1)
    dtype = x_ptr.dtype.element_ty
    o_m = i_m * BLOCK_M + tl.arange(0, BLOCK_M)
    o_n = i_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = o_m < M
    y = gemm_rows_acc(
        x_ptr, w_ptr, norm_ptr, nout_ptr, o_m, mask_m, o_n, i_n, K, N_OUT, HALF, eps, stride_xm, stride_wn,
        stride_nm, NORM, SWIGLU, NORM_OUT, INTERPRET, BLOCK_M, BLOCK_N, BLOCK_K, PDL, K_LINES,
    )  # fmt: skip
    mask_o = mask_m[:, None] & (o_n < N_OUT)[None, :]
    if RESIDUAL:
        r = tl.load(res_ptr + o_m[:, None] * stride_rm + o_n[None, :], mask=mask_o, other=0.0).to(tl.float32)
        y = _round(y, dtype) + r
    out_dtype = out_ptr.dtype.element_ty
    tl.store(out_ptr + o_m[:, None] * stride_om + o_n[None, :], _round(y, out_dtype).to(out_dtype), mask=mask_o)


def row_tiles_for(
    x: torch.Tensor, n_out: int, out_dtype: torch.dtype, norm: bool, swiglu: bool, residual: bool, norm_out: bool
) -> GemmTiles:
    """The row-tiled launch of x [M, K] -> [M, n_out]: the WEAVER_TRITON_TUNING entry, else `gemm_rows_config`."""
    m, k = x.shape
    key = tuning.gemm_rows_key(n_out, k, m, x.dtype, out_dtype, norm, swiglu, residual, norm_out)
    return GemmTiles(*tuning.tuned("gemm_rows", key) or gemm_rows_config(n_out, k, m, x.device))


def pdl_gemm_options(device: torch.device, k: int, itemsize: int) -> dict:
    """Programmatic dependent launch for the row GEMM (`pdl_launch`).

    The launch may start while the previous kernel in the stream still runs: each program asks L2 for its
    weight rows (a prefetch hint, no data read), then waits for the previous kernel (`griddepcontrol.wait`)
    before it loads anything, so the weight stream overlaps the kernel boundary. H200 (rounds/h200_v18): the
    chain verify stage graph 0.81 -> 0.73 ms; the one-graph round did not move."""
    options = pdl_launch(device, itemsize)
    lines = triton.next_power_of_2(triton.cdiv(k, 64)) if options["PDL"] else 1
    return {**options, "K_LINES": lines}  # every constexpr explicit (`pdl_launch`)


def _fused_gemm_rows(x, weight, norm_weight, eps, residual, swiglu, out, norm_out, tiles: GemmTiles) -> torch.Tensor:
    """Launch the row-tiled kernel for fused_gemv (arguments already checked there)."""
    m, k = x.shape
    n_out = out.shape[1]
    if min(tiles[:3]) < 16 or any(b & (b - 1) for b in tiles[:3]):
        raise ValueError(f"row tiles must be powers of two >= 16 (tl.dot), got {tiles}")
    grid = (triton.cdiv(n_out, tiles.block_n), triton.cdiv(m, tiles.block_m))
    _gemm_rows_kernel[grid](
        x, weight, norm_weight if norm_weight is not None else x, residual if residual is not None else out, out,
        norm_out if norm_out is not None else out,
        m, k, n_out, n_out, eps,
        x.stride(0), weight.stride(0), residual.stride(0) if residual is not None else 0, out.stride(0),
        norm_out.stride(0) if norm_out is not None else 0,
        NORM=norm_weight is not None, SWIGLU=swiglu, RESIDUAL=residual is not None, NORM_OUT=norm_out is not None,
        INTERPRET=interpreting(), BLOCK_M=tiles.block_m, BLOCK_N=tiles.block_n, BLOCK_K=tiles.block_k,
        num_warps=tiles.num_warps, num_stages=tiles.num_stages, **pdl_gemm_options(x.device, k, weight.element_size()),
    )
    return out


@triton.jit
def _head_vector(
    src, d, D: tl.constexpr, ROT: tl.constexpr, pos, inv_freq_ptr, norm_ptr, eps,
    QK_NORM: tl.constexpr, DTYPE: tl.constexpr,
):
    """One head's q or k [BLOCK_D] in fp32: [RMSNorm ->] RoPE (half-split on the first ROT dims)."""
    d_ok = d < D
    x = tl.load(src + d, mask=d_ok, other=0.0).to(tl.float32)
    HALF: tl.constexpr = ROT // 2
    partner = tl.where(d < HALF, d + HALF, d - HALF)
    in_rot = d < ROT
    xp = tl.load(src + partner, mask=in_rot & d_ok, other=0.0).to(tl.float32)
    if QK_NORM:
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / D + eps)
        w = tl.load(norm_ptr + d, mask=d_ok, other=0.0).to(tl.float32)
        wp = tl.load(norm_ptr + partner, mask=in_rot & d_ok, other=0.0).to(tl.float32)
        x = _round(_round(x * rstd, DTYPE) * w, DTYPE)
        xp = _round(_round(xp * rstd, DTYPE) * wp, DTYPE)
    freq = tl.load(inv_freq_ptr + (d % HALF), mask=in_rot, other=0.0)
    angle = pos.to(tl.float32) * freq
    cos = _round(tl.cos(angle), DTYPE)
    sin = _round(tl.sin(angle), DTYPE)
    signed = tl.where(d < HALF, -xp, xp)
    rotated = _round(_round(x * cos, DTYPE) + _round(signed * sin, DTYPE), DTYPE)
    return tl.where(in_rot, rotated, x)


@triton.jit
def _decode_attention_kernel(
    qkv_ptr, k_ptr, v_ptr, len_ptr, inv_freq_ptr, qn_ptr, kn_ptr, out_ptr,
    S, eps, scale,
    stride_qkv, stride_cb, stride_ch, stride_cs, stride_out,
    H: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, ROT: tl.constexpr,
    QK_NORM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr, PDL: tl.constexpr = False,
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    GROUP: tl.constexpr = H // HKV
    kvh = h // GROUP
    dtype = k_ptr.dtype.element_ty
    if PDL:  # launched while the qkv GEMV ends (it writes neither the lengths nor the cache): the committed
        # slots' K/V rows toward L2, then wait for it
        prefetch_prefix(k_ptr + b * stride_cb + kvh * stride_ch, v_ptr + b * stride_cb + kvh * stride_ch,
                        tl.load(len_ptr + b), stride_cs, D)  # fmt: skip
        pdl_wait()
    pos = tl.load(len_ptr + b)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    row = qkv_ptr + b * stride_qkv
    q = _round(_head_vector(row + h * D, d, D, ROT, pos, inv_freq_ptr, qn_ptr, eps, QK_NORM, dtype), dtype)
    k_new = _round(_head_vector(row + (H + kvh) * D, d, D, ROT, pos, inv_freq_ptr, kn_ptr, eps, QK_NORM, dtype), dtype)
    v_new = tl.load(row + (H + HKV + kvh) * D + d, mask=d_ok, other=0.0).to(tl.float32)
    cache_k = k_ptr + b * stride_cb + kvh * stride_ch
    cache_v = v_ptr + b * stride_cb + kvh * stride_ch
    if h % GROUP == 0:  # one program per kv head writes the new slot; nobody reads it from memory
        tl.store(cache_k + pos * stride_cs + d, k_new.to(dtype), mask=d_ok)  # exact: k_new is rounded
        tl.store(cache_v + pos * stride_cs + d, v_new.to(dtype), mask=d_ok)
    # the new token first (it is always visible), then the committed slots, with an online softmax
    m_i = tl.sum(q * k_new, axis=0) * scale
    l_i = m_i * 0.0 + 1.0
    acc = v_new
    s0 = tl.arange(0, BLOCK_S)
    for start in range(0, pos, BLOCK_S):
        s = start + s0
        s_ok = s < pos
        tile = s_ok[:, None] & d_ok[None, :]
        kb = tl.load(cache_k + s[:, None] * stride_cs + d[None, :], mask=tile, other=0.0).to(tl.float32)
        scores = tl.sum(kb * q[None, :], axis=1) * scale
        scores = tl.where(s_ok, scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=0))
        p = tl.exp(scores - m_new)
        alpha = tl.exp(m_i - m_new)
        vb = tl.load(cache_v + s[:, None] * stride_cs + d[None, :], mask=tile, other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * vb, axis=0)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        m_i = m_new
    tl.store(out_ptr + b * stride_out + h * D + d, _round(acc / l_i, dtype).to(dtype), mask=d_ok)


def decode_attention(
    qkv: torch.Tensor,  # [B, (H + 2 Hkv) D]
    cache_k: torch.Tensor,  # [B, Hkv, S, D], unit stride along D
    cache_v: torch.Tensor,
    lengths: torch.Tensor,  # [B] long: the new token's slot and position
    inv_freq: torch.Tensor,  # [rot/2] fp32
    num_heads: int,
    num_kv_heads: int,
    q_norm: torch.Tensor | None = None,
    k_norm: torch.Tensor | None = None,
    eps: float = 1e-6,
    block_s: int = 128,
) -> torch.Tensor:
    """qk-norm + RoPE + K/V write + attention over slots 0..length, one launch (see decode_attention_ref)."""
    check_device(qkv, cache_k, cache_v, lengths, inv_freq)
    b, _, s, d = cache_k.shape
    if qkv.shape != (b, (num_heads + 2 * num_kv_heads) * d) or qkv.stride(1) != 1:
        raise ValueError(f"qkv must be [{b}, {(num_heads + 2 * num_kv_heads) * d}], got {tuple(qkv.shape)}")
    if cache_k.stride() != cache_v.stride() or cache_k.stride(3) != 1 or num_heads % num_kv_heads:
        raise ValueError("cache_k and cache_v need equal strides, unit stride along D, and H % Hkv == 0")
    out = torch.empty(b, num_heads * d, device=qkv.device, dtype=qkv.dtype)
    inv_freq = inv_freq.float().contiguous()
    _decode_attention_kernel[(b, num_heads)](
        qkv, cache_k, cache_v, lengths, inv_freq,
        q_norm if q_norm is not None else inv_freq, k_norm if k_norm is not None else inv_freq, out,
        s, eps, d**-0.5,
        qkv.stride(0), cache_k.stride(0), cache_k.stride(1), cache_k.stride(2), out.stride(0),
        H=num_heads, HKV=num_kv_heads, D=d, ROT=2 * inv_freq.shape[0], QK_NORM=q_norm is not None,
        BLOCK_D=triton.next_power_of_2(d), BLOCK_S=block_s, num_warps=4, **pdl_launch(qkv.device, qkv.element_size()),
    )
    return out
