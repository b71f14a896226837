"""A GEMM of a few input rows against a large weight, the weight rows as the MMA's M: a tree verify's 17 or 65
rows and a draft's 16, at the 27B widths.

    y = skinny_gemm(x, w)                 # = F.linear(x, w), x [M, K] with M <= 128
    h = skinny_gemm(x, gate_up, swiglu=True)   # = silu(gate) * up of the [gate; up] rows

At these rows a projection is a weight read. cuBLAS's kernels for them (`nvjet_sm90_tst_384x16_...`) put the
weight rows in the MMA's M dimension and the input rows in its N; weaver's row-tiled GEMM (`decode.fused_gemv`
from 16 rows) does the opposite and, compiled for sm_90, runs mma.sync on register-staged loads. Here a program's
BLOCK_N weight rows are the left operand ([BLOCK_N, BLOCK_K], read along K as stored; >= 64 rows, so Hopper's
wgmma applies, fed by a cp.async pipeline) and all input rows the right ([BLOCK_K, BLOCK_M], BLOCK_M >= M: each
weight tile is read once). Shapes whose column blocks alone leave SMs idle (N = 5,120) split K over SPLIT programs
that write fp32 partials, summed by one torch reduction. Reference: F.linear (+ SwiGLU), `weaver.kernels.gemv`.
Session 50 built it for a sweep (`scripts/gpu/skinny_gemm_ab.py`) and an A/B of the 27B rounds; `gemv.linear`
takes it only for the shapes a GPU's tuning table timed faster than cuBLAS (`beats_cublas`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from weaver.kernels.triton import tuning
from weaver.kernels.triton._utils import check_device, interpreting, pdl_launch, pdl_wait, prefetch_rows
from weaver.kernels.triton.decode import _round

SKINNY_MAX_M = 128  # input rows one program holds (the right operand's columns)


class SkinnyTiles(NamedTuple):
    """Launch configuration: weight rows and K per tile (powers of two, >= 16), warps, pipeline stages, K splits."""

    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 3
    split: int = 1


def skinny_config(n_out: int, k: int, rows: int, device: torch.device, swiglu: bool = False) -> SkinnyTiles:
    """The built-in configuration (a tuning table's `skinny_gemm` entry overrides it): 128-row weight tiles and a
    4-stage pipeline; the N = 5,120 shapes split K four ways so that ~160 programs fill the GPU; shorter K steps
    where a SwiGLU's gate and up tiles or 65 rows fill shared memory; past 32 rows 8 warps for 128-row tiles, 64-row
    tiles for a SwiGLU's two accumulators (ptxas for sm_90, triton 3.6: one accumulator of 128 registers a thread
    spills, two of 64 do not); the interpreter takes few, large programs."""
    if device.type != "cuda":
        return SkinnyTiles(64, min(64, triton.next_power_of_2(k)), 1, 1, 1)
    if n_out <= 8192 and not swiglu:  # a SwiGLU is never split (its epilogue needs the whole sum)
        return SkinnyTiles(64, 128, 4, 4, 4)
    if rows <= 32:
        return SkinnyTiles(128, 64 if swiglu else 128, 4, 4, 1)
    return SkinnyTiles(64, 64, 4, 4, 1) if swiglu else SkinnyTiles(128, 64, 8, 4, 1)


def skinny_key(n_out: int, k: int, rows: int, dtype: torch.dtype, swiglu: bool) -> str:
    """The tuning table's shape key of a skinny GEMM (the row-tiled GEMM's format, no norm or residual)."""
    return tuning.gemm_rows_key(n_out, k, rows, dtype, dtype, False, swiglu, False, False)


def skinny_tiles_for(x: torch.Tensor, n_out: int, swiglu: bool) -> SkinnyTiles:
    """The launch of x [M, K] against n_out weight rows (gate and up pairs with swiglu): tuned, else the rule."""
    m, k = x.shape
    tuned = tuning.tuned("skinny_gemm", skinny_key(n_out, k, m, x.dtype, swiglu))
    return SkinnyTiles(*tuned or skinny_config(n_out, k, m, x.device, swiglu))


def beats_cublas(n_out: int, k: int, rows: int, dtype: torch.dtype, swiglu: bool) -> bool:
    """Whether the GPU's tuning table timed this shape (or its nearest row count) faster than cuBLAS: the only
    shapes `weaver.kernels.gemv.linear` gives this kernel. No table or no entry: False."""
    entry = tuning.tuned_entry("skinny_gemm", skinny_key(n_out, k, rows, dtype, swiglu))
    return entry is not None and entry.get("us", float("inf")) < entry.get("cublas_us", 0.0)


@triton.jit
def _skinny_gemm_kernel(
    x_ptr, w_ptr, out_ptr, M, N, K, K_SPLIT, HALF, stride_xm, stride_wn, stride_os, stride_om,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SWIGLU: tl.constexpr, PARTIAL: tl.constexpr,
    EXACT: tl.constexpr, PDL: tl.constexpr, K_LINES: tl.constexpr,
):  # fmt: skip
    """out[i_s, :M, n-block] = (x[:, K slice i_s] @ W[n-block, K slice i_s]^T), as W_tile @ x_tile^T in fp32;
    with SWIGLU, rows n and n + HALF are gate and up (never split). With PDL the program asks L2 for the first
    K_LINES 128-byte lines of its weight rows, then waits for the previous kernel (which writes x)."""
    i_n = tl.program_id(0)
    i_s = tl.program_id(1)
    dtype = x_ptr.dtype.element_ty
    o_n = i_n * BLOCK_N + tl.arange(0, BLOCK_N)
    o_m = tl.arange(0, BLOCK_M)
    o_k0 = tl.arange(0, BLOCK_K)
    mask_n = o_n < N
    mask_m = o_m < M
    k_lo = i_s * K_SPLIT
    if PDL:  # the weight stream starts across the kernel boundary; x is read only after the wait
        p_rows = w_ptr + tl.minimum(o_n, N - 1)[:, None] * stride_wn + k_lo
        prefetch_rows(p_rows, K - k_lo, K_LINES)
        if SWIGLU:
            prefetch_rows(p_rows + HALF * stride_wn, K - k_lo, K_LINES)
        pdl_wait()
    acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    acc_up = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    for k0 in range(k_lo, tl.minimum(k_lo + K_SPLIT, K), BLOCK_K):
        o_k = k0 + o_k0
        mask_k = o_k < K
        mask_w = mask_n[:, None] & mask_k[None, :]
        p_w = w_ptr + o_n[:, None] * stride_wn + o_k[None, :]
        xt = tl.load(x_ptr + o_m[None, :] * stride_xm + o_k[:, None], mask=mask_k[:, None] & mask_m[None, :], other=0.0)
        w = tl.load(p_w, mask=mask_w, other=0.0)
        if EXACT:  # fp32 operands, or the interpreter (which would multiply bf16 bit patterns): exact products
            acc += tl.dot(w.to(tl.float32), xt.to(tl.float32), input_precision="ieee")
        else:
            acc += tl.dot(w, xt)
        if SWIGLU:
            w_up = tl.load(p_w + HALF * stride_wn, mask=mask_w, other=0.0)
            if EXACT:
                acc_up += tl.dot(w_up.to(tl.float32), xt.to(tl.float32), input_precision="ieee")
            else:
                acc_up += tl.dot(w_up, xt)
    y = acc
    if SWIGLU:  # the torch path's rounding points: the GEMM's output, then silu, then the product
        gate = _round(acc, dtype)
        y = _round(gate / (1.0 + tl.exp(-gate)), dtype) * _round(acc_up, dtype)
    out_dtype = out_ptr.dtype.element_ty
    p_out = out_ptr + i_s * stride_os + o_m[None, :] * stride_om + o_n[:, None]
    value = y if PARTIAL else _round(y, out_dtype)
    tl.store(p_out, value.to(out_dtype), mask=mask_n[:, None] & mask_m[None, :])


def skinny_pdl(device: torch.device, tiles: SkinnyTiles, itemsize: int) -> dict:
    """Programmatic dependent launch (`pdl_launch`): each program prefetches the K lines of its pipeline's first
    stages (num_stages x BLOCK_K columns of its rows), which the kernel boundary would otherwise leave idle.
    Session 51 (H100, 27B chain-16 round): without it the skinny GEMM's 136 launches a round added 0.78 ms of
    gaps between kernels, more than its 0.5 ms of faster weight reads; cuBLAS's kernels launch this way."""
    options = pdl_launch(device, itemsize)
    lines = triton.next_power_of_2(tiles.num_stages * tiles.block_k // 64) if options["PDL"] else 1
    return {**options, "K_LINES": lines}  # every constexpr explicit (`pdl_launch`)


def skinny_gemm(
    x: torch.Tensor,  # [M, K], M <= SKINNY_MAX_M
    weight: torch.Tensor,  # [N, K], rows contiguous
    swiglu: bool = False,  # weight is [gate; up]: return silu(gate) * up, [M, N / 2]
    tiles: SkinnyTiles | None = None,  # None: the tuning table's entry, else skinny_config
) -> torch.Tensor:
    """x @ weight^T (or its SwiGLU) in x's dtype, fp32 accumulation; one launch, plus one sum when K is split."""
    check_device(x, weight)
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1] or weight.stride(1) != 1:
        raise ValueError(f"skinny_gemm needs x [M, K] and a row-contiguous weight [N, K]: {x.shape}, {weight.shape}")
    x = x if x.stride(1) == 1 else x.contiguous()  # the kernel walks K with unit stride
    m, k = x.shape
    n_out = weight.shape[0] // 2 if swiglu else weight.shape[0]
    if not 1 <= m <= SKINNY_MAX_M or (swiglu and weight.shape[0] % 2):
        raise ValueError(f"skinny_gemm takes 1 to {SKINNY_MAX_M} rows (and an even [gate; up]): {m}, {weight.shape}")
    tiles = tiles or skinny_tiles_for(x, n_out, swiglu)
    if min(tiles.block_n, tiles.block_k) < 16 or any(b & (b - 1) for b in (tiles.block_n, tiles.block_k)):
        raise ValueError(f"skinny tiles must be powers of two >= 16 (tl.dot), got {tiles}")
    k_split = triton.cdiv(triton.cdiv(k, 1 if swiglu else tiles.split), tiles.block_k) * tiles.block_k
    split = triton.cdiv(k, k_split)
    out = torch.empty(m, n_out, device=x.device, dtype=x.dtype)
    target = out if split == 1 else torch.empty(split, m, n_out, device=x.device, dtype=torch.float32)
    _skinny_gemm_kernel[(triton.cdiv(n_out, tiles.block_n), split)](
        x, weight, target, m, n_out, k, k_split, n_out, x.stride(0), weight.stride(0),
        target.stride(0) if split > 1 else 0, target.stride(-2),
        BLOCK_M=max(16, triton.next_power_of_2(m)), BLOCK_N=tiles.block_n, BLOCK_K=tiles.block_k, SWIGLU=swiglu,
        PARTIAL=split > 1, EXACT=x.dtype == torch.float32 or interpreting(),
        num_warps=tiles.num_warps, num_stages=tiles.num_stages, **skinny_pdl(x.device, tiles, weight.element_size()),
    )  # fmt: skip
    if split > 1:
        out.copy_(target.sum(0))  # fp32 partials, one rounding to x's dtype
    return out
