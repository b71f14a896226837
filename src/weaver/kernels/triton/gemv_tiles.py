"""One row of a weight whose input rows are longer than one tile (the 27B down projection, K = 17,408), with
every load of a weight row issued at once.

    y = gemv_long_rows(x, weight)   # x [1, K] @ weight[N, K]^T, K = NUM x BLOCK_K + tail pieces
    y = gemv(x, weight)             # the custom op's launcher: this kernel past GEMV_MAX_K, else fused_gemv
    y = gemv(x, weight, tma=True)   # ... or gemv_tma (RuntimeOptions.gemv = "tma")

`decode._gemv_kernel` walks K in a loop of BLOCK_K tiles, the last one masked: a program has one tile's loads in
flight at a time, one memory round trip per tile, and at K = 17,408 (8,192 + 8,192 + a masked 1,024) it read at
2.68 TB/s on an H100, below cuBLAS's 2.79. Here the full tiles are unrolled (tl.static_range) and the tail is
covered exactly by at most three power-of-two pieces (`gemv.long_row_tiles`), no loop-carried dependence and no
masked lanes along K: 3.02 TB/s, 0.926x cuBLAS (kernels/h100_session52_gemv_tiles). Reference: F.linear.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from weaver.kernels.gemv import GEMV_MAX_K, GEMV_TILE_K, long_row_tiles
from weaver.kernels.triton._utils import check_device, pdl_wait, prefetch_rows
from weaver.kernels.triton.decode import fused_gemv, pdl_gemm_options
from weaver.kernels.triton.gemv_tma import gemv_tma


def gemv(
    x: torch.Tensor,
    weight: torch.Tensor,
    swiglu: bool = False,
    tma: bool = False,
    norm_weight: torch.Tensor | None = None,
    eps: float = 0.0,
    residual: torch.Tensor | None = None,
) -> torch.Tensor:
    """The launcher of the custom op `weaver::gemv` (weaver.kernels.gemv): `tma` through `gemv_tma` (with x's
    offset RMSNorm when `norm_weight` is given, plus `residual`), rows longer than GEMV_MAX_K through
    `gemv_long_rows`, the rest through `fused_gemv` and its long-tile rule (`decode.gemv_config`)."""
    if tma:
        return gemv_tma(x, weight, swiglu, norm_weight=norm_weight, eps=eps, residual=residual)
    if norm_weight is not None or residual is not None:
        raise ValueError("gemv: only the TMA GEMV (tma=True) takes a norm or a residual")
    if weight.shape[1] > GEMV_MAX_K and not swiglu:
        return gemv_long_rows(x, weight)
    return fused_gemv(x, weight, swiglu=swiglu)


@triton.jit
def _piece_dot(x_ptr, w_rows, k0, WIDTH: tl.constexpr):
    """Per weight row, sum over the WIDTH columns from k0 of w * x (fp32): one unmasked load of each operand."""
    cols = k0 + tl.arange(0, WIDTH)
    xk = tl.load(x_ptr + cols).to(tl.float32)
    w = tl.load(w_rows + cols[None, :]).to(tl.float32)
    return tl.sum(w * xk[None, :], axis=1)


@triton.jit
def _gemv_tiles_kernel(
    x_ptr, w_ptr, out_ptr, N, K, stride_wn,
    NUM: tl.constexpr, BLOCK_K: tl.constexpr, TAIL1: tl.constexpr, TAIL2: tl.constexpr, TAIL3: tl.constexpr,
    BLOCK_N: tl.constexpr, PDL: tl.constexpr, K_LINES: tl.constexpr,
):  # fmt: skip
    """out[o_n] = W[o_n] . x for BLOCK_N weight rows, K = NUM x BLOCK_K + TAIL1 + TAIL2 + TAIL3 exactly."""
    o_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = o_n < N
    w_rows = w_ptr + tl.minimum(o_n, N - 1)[:, None] * stride_wn  # rows past N read row N - 1, never stored
    if PDL:  # launched before the previous kernel ends: this program's weight rows toward L2, then wait for it
        prefetch_rows(w_rows, K, K_LINES)
        pdl_wait()
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for t in tl.static_range(NUM):
        acc += _piece_dot(x_ptr, w_rows, t * BLOCK_K, BLOCK_K)
    if TAIL1 > 0:
        acc += _piece_dot(x_ptr, w_rows, NUM * BLOCK_K, TAIL1)
    if TAIL2 > 0:
        acc += _piece_dot(x_ptr, w_rows, NUM * BLOCK_K + TAIL1, TAIL2)
    if TAIL3 > 0:
        acc += _piece_dot(x_ptr, w_rows, NUM * BLOCK_K + TAIL1 + TAIL2, TAIL3)
    tl.store(out_ptr + o_n, acc.to(out_ptr.dtype.element_ty), mask=n_ok)


def gemv_long_rows(
    x: torch.Tensor,  # [1, K], unit stride
    weight: torch.Tensor,  # [N, K], rows contiguous
    block_k: int = GEMV_TILE_K,
    min_piece: int = 64,
    block_n: int = 1,
    num_warps: int = 8,
) -> torch.Tensor:
    """x @ weight^T for one row, K covered by `long_row_tiles(K, block_k, min_piece)` (a ValueError if it is
    not). Defaults: the best of the H100 sweep at the 27B down shape (one weight row, 8 warps a program)."""
    check_device(x, weight)
    if x.dim() != 2 or x.shape[0] != 1 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"gemv_long_rows needs x [1, K] and weight [N, K], got {tuple(x.shape)}, "
                         f"{tuple(weight.shape)}")  # fmt: skip
    if weight.stride(1) != 1 or x.stride(1) != 1:
        raise ValueError("gemv_long_rows needs unit stride along K")
    n, k = weight.shape
    tiles = long_row_tiles(k, block_k, min_piece)
    if tiles is None:
        raise ValueError(f"K = {k} is not {block_k}-wide tiles plus at most three power-of-two pieces >= {min_piece}")
    num, tail = tiles
    tail = (*tail, 0, 0, 0)[:3]
    out = torch.empty(1, n, device=x.device, dtype=x.dtype)
    _gemv_tiles_kernel[(triton.cdiv(n, block_n),)](
        x, weight, out, n, k, weight.stride(0), NUM=num, BLOCK_K=block_k, TAIL1=tail[0], TAIL2=tail[1],
        TAIL3=tail[2], BLOCK_N=block_n, num_warps=num_warps, **pdl_gemm_options(x.device, k, weight.element_size()),
    )  # fmt: skip
    return out
