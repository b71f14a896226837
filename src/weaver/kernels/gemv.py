"""One-row projections of large weights on CUDA through weaver's Triton GEMV (long weight tiles), not cuBLAS.

    y = linear(x, weight, options)                 # = F.linear(x, weight)
    h = linear(x, gate_up, options, swiglu=True)   # = silu(gate) * up of the [gate; up] rows
    y = linear(x, weight, options, norm=n, residual=r)   # = r + F.linear(n(x), weight)

At one row a projection is a weight read. With whole input rows per tile (BLOCK_K up to 8,192) every program
has its loads in flight at once, and on an H100 that beat cuBLAS on every Qwen3.6-27B shape with K <= 8,192
(benchmarks/results/kernels/h100_session45_split_gemv: gate_up 114.7 against 129.1 us, out_proj 22.2 against
24.1) and came within 3% of it for the down projection (K = 17,408), which takes its residual add along. The
SwiGLU runs in the GEMV's epilogue, and so does a decoder layer's residual add. A decoder layer's RMSNorm whose
weight `models.fold` moved into the projection costs the GEMV only a sum of squares of the row it loads anyway
(1 / rms(x) scales the accumulators at the end), so a one-row step launches no norm or add kernels; an RMSNorm
with its weight still in it runs in torch first (the weight in the kernel's prologue cost more registers than
the launch it saves: docs/performance.md, session 46).
Small weights (under GEMV_MIN_BYTES) and short rows keep F.linear: the attention-only models' decode has its
own fused path (`models.fast_decode`), and the tuned small-shape GEMV rule is not this one. Under
torch.compile the kernel is the custom op `weaver::gemv`; this module imports without triton.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F

from weaver.kernels.dispatch import launch, use_kernel
from weaver.options import RuntimeOptions

__all__ = ["GEMV_MAX_K", "GEMV_MIN_BYTES", "GEMV_MIN_K", "GEMV_TILE_K", "RowNorm", "gemv_op", "linear", "project",
           "takes_weight"]  # fmt: skip

GEMV_MIN_BYTES = 32 << 20  # weights from this size take the Triton GEMV at one row (and `gemv_config`'s long tiles)
GEMV_MIN_K = 4096  # shorter input rows keep F.linear (the regime measured: the 27B widths)
GEMV_TILE_K = 8192  # the longest weight tile a program loads at once (longer rows loop over such tiles)
GEMV_MAX_K = 32768  # longer input rows stay on cuBLAS (measured up to the 27B down projection's 17,408)


class RowNorm(Protocol):
    """An RMSNorm module as `linear` reads it (`weaver.models.norm.RMSNorm`): called, it is the reference."""

    eps: float
    folded: bool  # its weight lives in the projections after it (`models.fold`): it only divides by rms(x)

    def __call__(self, x: torch.Tensor) -> torch.Tensor: ...


@torch.library.custom_op("weaver::gemv", mutates_args=())
def gemv_op(
    x: torch.Tensor, weight: torch.Tensor, swiglu: bool, rms: bool, eps: float, residual: torch.Tensor | None
) -> torch.Tensor:
    """`weaver.kernels.triton.decode.gemv` as a custom op: x [1, K] -> [1, N] ([1, N / 2] with swiglu)."""
    from weaver.kernels.triton.decode import gemv

    return gemv(x, weight, swiglu, rms, eps, residual)


@gemv_op.register_fake
def _gemv_fake(
    x: torch.Tensor, weight: torch.Tensor, swiglu: bool, rms: bool, eps: float, residual: torch.Tensor | None
) -> torch.Tensor:
    n = weight.shape[0]
    return x.new_empty(x.shape[0], n // 2 if swiglu else n)


def takes_weight(weight: torch.Tensor, min_bytes: int | None = None) -> bool:
    """A large 16-bit weight (from `min_bytes`, default GEMV_MIN_BYTES) of rows no longer than GEMV_MAX_K, laid out
    as the kernel reads it."""
    k = weight.shape[-1]
    min_bytes = GEMV_MIN_BYTES if min_bytes is None else min_bytes
    return (
        weight.dtype in (torch.bfloat16, torch.float16)
        and weight.dim() == 2
        and weight.is_contiguous()
        and GEMV_MIN_K <= k <= GEMV_MAX_K
        and weight.numel() * weight.element_size() >= min_bytes
    )


def _takes_gemv(x: torch.Tensor, weight: torch.Tensor, min_bytes: int | None) -> bool:
    """One input row of a weight that `takes_weight`."""
    return x.numel() == weight.shape[-1] and x.dtype == weight.dtype and takes_weight(weight, min_bytes)


def linear(
    x: torch.Tensor,  # [..., K]
    weight: torch.Tensor,  # [N, K]
    options: RuntimeOptions,
    swiglu: bool = False,  # weight is [gate; up]: return silu(gate) * up, [..., N / 2]
    min_bytes: int | None = None,  # default GEMV_MIN_BYTES
    norm: RowNorm | None = None,  # applied to x first
    residual: torch.Tensor | None = None,  # [..., N]: added to the output
) -> torch.Tensor:
    """[residual +] norm(x) @ weight^T (no bias) [SwiGLU'd]: the Triton GEMV for one row of a large weight (a folded
    norm's 1 / rms(x) and the residual add inside it), else the same ops in torch."""
    if _takes_gemv(x, weight, min_bytes) and use_kernel(options, x, weight):
        rms = norm is not None and norm.folded
        if norm is not None and not rms:
            x = norm(x)
        fused_res = residual is not None and residual.dtype == x.dtype and residual.numel() * (2 if swiglu else 1) \
            == weight.shape[0]  # fmt: skip
        res = residual.reshape(1, -1).contiguous() if fused_res else None
        out = launch(gemv_op, "weaver.kernels.triton.decode", "gemv", x.reshape(1, -1), weight, swiglu, rms,
                     norm.eps if rms else 1e-6, res)  # fmt: skip
        out = out.view(*x.shape[:-1], out.shape[-1])
        return out if residual is None or fused_res else residual + out
    y = F.linear(x if norm is None else norm(x), weight)
    if swiglu:
        gate, up = y.chunk(2, dim=-1)
        y = F.silu(gate) * up
    return y if residual is None else residual + y


def project(
    layer: torch.nn.Linear, x: torch.Tensor, options: RuntimeOptions, residual: torch.Tensor | None = None
) -> torch.Tensor:
    """[residual +] layer(x) for an nn.Linear, one row of a large bias-free weight through `linear`."""
    if layer.bias is not None:
        y = layer(x)
        return y if residual is None else residual + y
    return linear(x, layer.weight, options, residual=residual)
