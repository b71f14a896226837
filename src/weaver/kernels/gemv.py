"""One-row projections of large weights on CUDA through weaver's Triton GEMV (long weight tiles), not cuBLAS.

    y = linear(x, weight, options)                 # = F.linear(x, weight)
    h = linear(x, gate_up, options, swiglu=True)   # = silu(gate) * up of the [gate; up] rows

At one row a projection is a weight read. With whole input rows per tile (BLOCK_K up to 8,192) every program
has its loads in flight at once, and on an H100 that beat cuBLAS on every Qwen3.6-27B shape with K <= 8,192
(benchmarks/results/kernels/h100_session45_split_gemv: gate_up 114.7 against 129.1 us, out_proj 22.2 against
24.1); the down projection (K = 17,408) stays on cuBLAS, which won there. The SwiGLU runs in the GEMV's epilogue.
Small weights (under GEMV_MIN_BYTES) and short rows keep F.linear: the attention-only models' decode has its
own fused path (`models.fast_decode`), and the tuned small-shape GEMV rule is not this one. Under
torch.compile the kernel is the custom op `weaver::gemv`; this module imports without triton.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from weaver.kernels.dispatch import launch, use_kernel
from weaver.options import RuntimeOptions

__all__ = ["GEMV_MAX_K", "GEMV_MIN_BYTES", "GEMV_MIN_K", "gemv_op", "linear", "project"]

GEMV_MIN_BYTES = 32 << 20  # weights from this size take the Triton GEMV at one row (and `gemv_config`'s long tiles)
GEMV_MIN_K = 4096  # shorter input rows keep F.linear (the regime measured: the 27B widths)
GEMV_MAX_K = 8192  # longer input rows stay on cuBLAS (the 27B down projection, K = 17,408: cuBLAS 1.03x faster)


@torch.library.custom_op("weaver::gemv", mutates_args=())
def gemv_op(x: torch.Tensor, weight: torch.Tensor, swiglu: bool) -> torch.Tensor:
    """`weaver.kernels.triton.decode.gemv` as a custom op: x [1, K] -> [1, N] ([1, N / 2] with swiglu)."""
    from weaver.kernels.triton.decode import gemv

    return gemv(x, weight, swiglu)


@gemv_op.register_fake
def _gemv_fake(x: torch.Tensor, weight: torch.Tensor, swiglu: bool) -> torch.Tensor:
    n = weight.shape[0]
    return x.new_empty(x.shape[0], n // 2 if swiglu else n)


def _takes_gemv(x: torch.Tensor, weight: torch.Tensor, min_bytes: int) -> bool:
    """One input row, a large 16-bit weight of rows no longer than GEMV_MAX_K, laid out as the kernel reads it."""
    k = weight.shape[-1]
    return (
        x.numel() == k
        and x.dtype == weight.dtype
        and weight.dtype in (torch.bfloat16, torch.float16)
        and weight.dim() == 2
        and weight.is_contiguous()
        and GEMV_MIN_K <= k <= GEMV_MAX_K
        and weight.numel() * weight.element_size() >= min_bytes
    )


def linear(
    x: torch.Tensor,  # [..., K]
    weight: torch.Tensor,  # [N, K]
    options: RuntimeOptions,
    swiglu: bool = False,  # weight is [gate; up]: return silu(gate) * up, [..., N / 2]
    min_bytes: int = GEMV_MIN_BYTES,
) -> torch.Tensor:
    """x @ weight^T (no bias), or SwiGLU of it: the Triton GEMV for one row of a large weight, else F.linear."""
    if _takes_gemv(x, weight, min_bytes) and use_kernel(options, x, weight):
        rows = x.reshape(1, -1)
        out = launch(gemv_op, "weaver.kernels.triton.decode", "gemv", rows, weight, swiglu)
        return out.view(*x.shape[:-1], out.shape[-1])
    y = F.linear(x, weight)
    if not swiglu:
        return y
    gate, up = y.chunk(2, dim=-1)
    return F.silu(gate) * up


def project(layer: torch.nn.Linear, x: torch.Tensor, options: RuntimeOptions) -> torch.Tensor:
    """layer(x) for an nn.Linear, one row of a large bias-free weight through `linear`."""
    return layer(x) if layer.bias is not None else linear(x, layer.weight, options)
