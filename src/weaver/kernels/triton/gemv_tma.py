"""One row of a large weight streamed through Hopper's Tensor Memory Accelerator (TMA) into a ring of shared-memory
tiles, the sums on CUDA cores.

    y = gemv_tma(x, weight)                   # x [1, K] @ weight[N, K]^T
    h = gemv_tma(x, gate_up, swiglu=True)     # silu(gate) * up of the [gate; up] rows: [1, N / 2]

Why: at one row a projection is a weight read, and on an H200 cuBLAS read every one-row Qwen3.6-27B shape faster
than weaver's register-tiled GEMVs (`decode._gemv_kernel`, `gemv_tiles`: 3.0-4.0 against 3.4-4.1 TB/s,
kernels/h200_session57_gemv). Those hold a whole weight tile in registers (114-165 a thread), which caps the
programs an SM keeps and so the bytes in flight. Here `BLOCK_N x BLOCK_K` tiles land in shared memory through TMA
(no registers), `STAGES` of them in flight a program (Triton's pipeliner over the descriptor loads); rows past N
and columns past K read as zeros. Each program keeps BLOCK_N x BLOCK_K fp32 partial sums and reduces them once.
Reference: F.linear (tests/kernels/test_gemv_dispatch.py). Reached through `RuntimeOptions.gemv="tma"`; untimed
on a GPU until `scripts/gpu/gemv_wide_ab.py --kinds tma` and the AR step A/B (`scripts/gpu/owed_27b.sh`) run.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from weaver.kernels.triton._utils import check_device, pdl_launch, pdl_wait, prefetch_rows


class TmaTiles(NamedTuple):
    """gemv_tma's launch: BLOCK_N weight rows a program, BLOCK_K columns a tile (<= 256: one TMA box), STAGES
    tiles in flight, num_warps."""

    block_n: int = 8
    block_k: int = 256
    stages: int = 4
    num_warps: int = 4


@triton.jit
def _gemv_tma_kernel(
    w_desc, w_ptr, x_ptr, norm_ptr, res_ptr, out_ptr, N_OUT, K, UP_ROW, eps,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, STAGES: tl.constexpr, SWIGLU: tl.constexpr,
    NORM: tl.constexpr, RESIDUAL: tl.constexpr, PDL: tl.constexpr, K_LINES: tl.constexpr,
):  # fmt: skip
    """out[o_n] = W[o_n] . x for BLOCK_N rows (SWIGLU: silu(W[o_n] . x) * (W[UP_ROW + o_n] . x)). NORM: of
    Qwen3.5's offset RMSNorm of x, W . (x * (1 + g)) / rms(x) in fp32: the statistics come from the x tiles the loop
    loads anyway, so the weight stream starts at once; the normed row is not rounded to x's dtype, as the model's
    norm rounds it (a difference of bf16 ties). RESIDUAL: plus res[o_n], rounded once."""
    n0 = tl.program_id(0) * BLOCK_N
    o_n = n0 + tl.arange(0, BLOCK_N)
    if PDL:  # launched while the previous kernel runs: the first STAGES tiles toward L2, then wait for it (x)
        rows = w_ptr + tl.minimum(o_n, N_OUT - 1)[:, None] * K
        prefetch_rows(rows, tl.minimum(K, STAGES * BLOCK_K), K_LINES)
        if SWIGLU:
            prefetch_rows(rows + UP_ROW * K, tl.minimum(K, STAGES * BLOCK_K), K_LINES)
        pdl_wait()
    sum_sq = tl.zeros([BLOCK_K], dtype=tl.float32)
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    acc_up = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for k0 in tl.range(0, K, BLOCK_K, num_stages=STAGES):
        cols = k0 + tl.arange(0, BLOCK_K)
        xk = tl.load(x_ptr + cols, mask=cols < K, other=0.0).to(tl.float32)
        if NORM:
            sum_sq += xk * xk
            xk *= 1.0 + tl.load(norm_ptr + cols, mask=cols < K, other=0.0).to(tl.float32)
        xk = xk[None, :]
        acc += w_desc.load([n0, k0]).to(tl.float32) * xk
        if SWIGLU:
            acc_up += w_desc.load([UP_ROW + n0, k0]).to(tl.float32) * xk
    y = tl.sum(acc, axis=1)
    rstd = tl.rsqrt(tl.sum(sum_sq, axis=0) / K + eps) if NORM else 1.0
    y *= rstd
    if SWIGLU:
        y = y / (1.0 + tl.exp(-y)) * tl.sum(acc_up, axis=1) * rstd
    if RESIDUAL:
        y += tl.load(res_ptr + o_n, mask=o_n < N_OUT, other=0.0).to(tl.float32)
    tl.store(out_ptr + o_n, y.to(out_ptr.dtype.element_ty), mask=o_n < N_OUT)


DEFAULT_TILES = TmaTiles()


def gemv_tma(
    x: torch.Tensor,
    weight: torch.Tensor,
    swiglu: bool = False,
    tiles: TmaTiles = DEFAULT_TILES,
    norm_weight: torch.Tensor | None = None,  # [K]: of x's RMSNorm (Qwen3.5's offset form)
    eps: float = 1e-6,
    residual: torch.Tensor | None = None,  # [1, N_out]: added in the epilogue (a decoder layer's residual stream)
) -> torch.Tensor:
    """x [1, K] @ weight[N, K]^T through TMA tiles ([1, N / 2] silu(gate) * up with swiglu). The weight must be
    16-bit, contiguous, with rows of K a multiple of 8 (TMA's 16-byte row stride). `norm_weight`: the projection
    of RMSNorm(x), the statistics taken in the kernel's own loop (the decoder layers' norms on the TMA route:
    `gemv.linear(norm=)`; `scripts/gpu/gemv_wide_ab.py --norm` times what it costs the GEMV)."""
    check_device(x, weight)
    if x.dim() != 2 or x.shape[0] != 1 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"gemv_tma needs x [1, K] and weight [N, K], got {tuple(x.shape)}, {tuple(weight.shape)}")
    if x.is_cuda and torch.cuda.get_device_capability(x.device)[0] < 9:
        raise ValueError("gemv_tma (RuntimeOptions.gemv='tma') needs a Hopper or newer GPU: TMA")
    n, k = weight.shape
    if weight.element_size() != 2 or not weight.is_contiguous() or k % 8 or x.stride(1) != 1:
        raise ValueError("gemv_tma needs a contiguous 16-bit weight whose rows are a multiple of 8 long")
    if residual is not None and residual.numel() != (n // 2 if swiglu else n):
        raise ValueError(f"gemv_tma's residual must have the output's {n // 2 if swiglu else n} values, got "
                         f"{tuple(residual.shape)}")  # fmt: skip
    if norm_weight is not None and norm_weight.shape != (k,):
        raise ValueError(f"gemv_tma's norm_weight must be [K] = [{k}], got {tuple(norm_weight.shape)}")
    if swiglu and n % 2:
        raise ValueError(f"swiglu needs [gate; up] rows, an even N, got N = {n}")
    n_out = n // 2 if swiglu else n
    out = torch.empty(1, n_out, device=x.device, dtype=x.dtype)
    desc = TensorDescriptor.from_tensor(weight, [tiles.block_n, tiles.block_k])
    options = pdl_launch(x.device, weight.element_size())
    lines = triton.next_power_of_2(triton.cdiv(min(k, tiles.stages * tiles.block_k), 64)) if options["PDL"] else 1
    _gemv_tma_kernel[(triton.cdiv(n_out, tiles.block_n),)](
        desc, weight, x, norm_weight if norm_weight is not None else x, residual if residual is not None else out,
        out, n_out, k, n_out, eps, BLOCK_N=tiles.block_n, BLOCK_K=tiles.block_k, STAGES=tiles.stages, SWIGLU=swiglu,
        NORM=norm_weight is not None, RESIDUAL=residual is not None, K_LINES=lines, num_warps=tiles.num_warps,
        num_stages=tiles.stages, **options,
    )  # fmt: skip
    return out
