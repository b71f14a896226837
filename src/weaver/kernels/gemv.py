"""One-row projections of large weights on CUDA through weaver's Triton GEMV (long weight tiles), not cuBLAS.

    y = linear(x, weight, options)                 # = F.linear(x, weight)
    h = linear(x, gate_up, options, swiglu=True)   # = silu(gate) * up of the [gate; up] rows

At one row a projection is a weight read. With whole input rows per tile (BLOCK_K up to 8,192) every program
has its loads in flight at once, and on an H100 that beat cuBLAS on every Qwen3.6-27B shape with K <= 8,192
(benchmarks/results/kernels/h100_session45_split_gemv: gate_up 114.7 against 129.1 us, out_proj 22.2 against
24.1). Longer rows (the down projection, K = 17,408) take `gemv_tiles`: unrolled 8,192-wide tiles and a tail of
at most three power-of-two pieces, all loads at once (59.1 against cuBLAS's 63.8 us on an H100,
kernels/h100_session52_gemv_tiles); rows no such tiles cover stay on F.linear. The SwiGLU runs in the GEMV's
epilogue (rows up to 8,192).
Small weights (under GEMV_MIN_BYTES) and short rows keep F.linear: the attention-only models' decode has its
own fused path (`models.fast_decode`), and the tuned small-shape GEMV rule is not this one. Under
torch.compile the kernel is the custom op `weaver::gemv`; this module imports without triton.
On an H200 cuBLAS reads every one of those shapes faster than the best swept GEMV tile configuration (1.03-1.21x,
kernels/h200_session57_gemv), so there `RuntimeOptions.gemv="auto"` keeps F.linear (`GEMV_BLAS_GPUS`).
`gemv="tma"` takes `gemv_tma` instead of the register-tiled kernels: the weight through TMA tiles in shared memory
(Hopper), which also takes the decoder layers' norms and residual adds around it (`norm_in_projection`,
`linear(norm=, residual=)`). On an H100 that makes the 27B AR step 1.1% faster than the Triton GEMV (18.44 against
18.65 ms, scale/h100_session60), so there "auto" takes it (`GEMV_TMA_GPUS`).
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F

from weaver.kernels.dispatch import launch, use_kernel
from weaver.options import RuntimeOptions

__all__ = [
    "GEMV_BLAS_GPUS", "GEMV_MAX_K", "GEMV_MIN_BYTES", "GEMV_MIN_K", "GEMV_TILE_K", "GEMV_TMA_GPUS", "RowNorm",
    "gemv_op", "linear", "long_row_tiles", "norm_in_projection", "project", "route",
]  # fmt: skip

GEMV_MIN_BYTES = 32 << 20  # weights from this size take the Triton GEMV at one row (and `gemv_config`'s long tiles)
GEMV_MIN_K = 4096  # shorter input rows keep F.linear (the regime measured: the 27B widths)
GEMV_MAX_K = 8192  # longer input rows take gemv_tiles where `long_row_tiles` covers them, else F.linear
GEMV_TILE_K = 8192  # gemv_tiles' full tile
# GPU name fragments where torch's BLAS reads one row faster than the Triton GEMV at every 27B shape:
# H200 (cuBLAS 18.5-615.9 us against 19.1-637.1 for the best tiles, kernels/h200_session57_gemv)
GEMV_BLAS_GPUS = ("H200",)
# GPU name fragments where gemv_tma (its norms and adds inside) makes the 27B AR step fastest: H100 (18.44 ms
# against 18.65 on the Triton GEMV and 19.29 on cuBLAS, three / two / one runs, scale/h100_session60)
GEMV_TMA_GPUS = ("H100",)


def long_row_tiles(k: int, block_k: int = GEMV_TILE_K, min_piece: int = 64) -> tuple[int, tuple[int, ...]] | None:
    """(full block_k tiles, tail pieces) covering a row of k exactly, the tail as at most three powers of two
    >= min_piece, largest first (17,408: 2 tiles + 1,024; 14,336: 1 + 4,096 + 2,048); None where none does."""
    num, rest = divmod(k, block_k)
    pieces = tuple(1 << b for b in reversed(range(rest.bit_length())) if rest >> b & 1)
    if (num == 0 and not pieces) or len(pieces) > 3 or (pieces and pieces[-1] < min_piece):
        return None
    return num, pieces


class RowNorm(Protocol):
    """What `linear` needs of a norm before a projection (models.norm.RMSNorm): its weight, eps, form, and itself."""

    weight: torch.Tensor
    eps: float
    offset: bool

    def __call__(self, x: torch.Tensor) -> torch.Tensor: ...


@torch.library.custom_op("weaver::gemv", mutates_args=())
def gemv_op(
    x: torch.Tensor,
    weight: torch.Tensor,
    swiglu: bool,
    tma: bool,
    norm_weight: torch.Tensor | None,
    eps: float,
    residual: torch.Tensor | None,
) -> torch.Tensor:
    """`weaver.kernels.triton.gemv_tiles.gemv` as a custom op: x [1, K] -> [1, N] ([1, N / 2] with swiglu); `tma`:
    the weight through TMA tiles (`gemv_tma`), which can take x's offset RMSNorm (`norm_weight`, eps) and add a
    residual [1, N]."""
    from weaver.kernels.triton.gemv_tiles import gemv

    return gemv(x, weight, swiglu, tma, norm_weight, eps, residual)


@gemv_op.register_fake
def _gemv_fake(x: torch.Tensor, weight: torch.Tensor, swiglu: bool, *_) -> torch.Tensor:  # *_: tma, norm, eps, res
    n = weight.shape[0]
    return x.new_empty(x.shape[0], n // 2 if swiglu else n)


def _takes_gemv(x: torch.Tensor, weight: torch.Tensor, min_bytes: int, swiglu: bool) -> bool:
    """One input row, a large 16-bit weight laid out as the kernels read it, of rows no longer than GEMV_MAX_K or
    (no SwiGLU) covered by `long_row_tiles`."""
    k = weight.shape[-1]
    return (
        x.numel() == k
        and x.dtype == weight.dtype
        and weight.dtype in (torch.bfloat16, torch.float16)
        and weight.dim() == 2
        and weight.is_contiguous()
        and GEMV_MIN_K <= k
        and (k <= GEMV_MAX_K or (not swiglu and long_row_tiles(k) is not None))
        and weight.numel() * weight.element_size() >= min_bytes
    )


_AUTO_ROUTE: dict[torch.device, str] = {}  # `_auto_route`'s answers, one a device


@torch.compiler.assume_constant_result  # a compiled step asks at trace time, eagerly: never part of a graph
def _auto_route(device: torch.device) -> str:
    """gemv="auto"'s path on CUDA `device` (index None: the current one), by its name: "blas" on GEMV_BLAS_GPUS,
    "tma" on GEMV_TMA_GPUS, else "triton" (asked once a device)."""
    if device not in _AUTO_ROUTE:
        name = torch.cuda.get_device_name(device)
        blas, tma = (any(fragment in name for fragment in gpus) for gpus in (GEMV_BLAS_GPUS, GEMV_TMA_GPUS))
        _AUTO_ROUTE[device] = "blas" if blas else "tma" if tma else "triton"
    return _AUTO_ROUTE[device]


def route(options: RuntimeOptions, device: torch.device) -> str:
    """Which path one row of a large weight takes on `device`: "blas", "tma" or "triton" (options.gemv; auto: by
    the GPU, `_auto_route`; a CPU tensor under auto takes no GPU route: "triton", which `use_kernel` then keeps off)."""
    if options.gemv != "auto":
        return options.gemv
    return _auto_route(device) if device.type == "cuda" else "triton"


def linear(
    x: torch.Tensor,  # [..., K]
    weight: torch.Tensor,  # [N, K]
    options: RuntimeOptions,
    swiglu: bool = False,  # weight is [gate; up]: return silu(gate) * up, [..., N / 2]
    min_bytes: int | None = None,  # None: GEMV_MIN_BYTES
    norm: RowNorm | None = None,  # project norm(x): the TMA GEMV takes an offset RMSNorm itself, else it runs first
    residual: torch.Tensor | None = None,  # [..., N]: added to the projection (the TMA GEMV in its epilogue)
) -> torch.Tensor:
    """x @ weight^T (no bias), or SwiGLU of it, of norm(x) where given, plus residual where given: for one row of a
    large weight the path `route` names (the Triton GEMV, its TMA variant, or BLAS), else F.linear."""
    min_bytes = GEMV_MIN_BYTES if min_bytes is None else min_bytes
    kernel = _takes_gemv(x, weight, min_bytes, swiglu) and use_kernel(options, x, weight)
    path = route(options, x.device) if kernel else "blas"
    if path != "blas":
        tma = path == "tma"
        inside = norm is not None and tma and norm.offset  # gemv_tma's norm is Qwen3.5's offset form
        rows = (x if inside or norm is None else norm(x)).reshape(1, -1)
        res = residual.reshape(1, -1) if residual is not None and tma else None
        out = launch(gemv_op, "weaver.kernels.triton.gemv_tiles", "gemv", rows, weight, swiglu, tma,
                     norm.weight if inside else None, norm.eps if inside else 0.0, res)  # fmt: skip
        out = out.view(*x.shape[:-1], out.shape[-1])
        return out + residual if residual is not None and res is None else out
    y = F.linear(x if norm is None else norm(x), weight)
    if swiglu:
        gate, up = y.chunk(2, dim=-1)
        y = F.silu(gate) * up
    return y if residual is None else y + residual


def norm_in_projection(options: RuntimeOptions, device: torch.device) -> bool:
    """Whether a decoder layer on `device` hands its norms to the projections after them (`linear(norm=)`) and its
    residual adds to the projections before them (`residual=`): on the TMA route, where a one-row GEMV takes both
    inside (the step then has no norm or add kernels of its own)."""
    return route(options, device) == "tma"


def project(
    layer: torch.nn.Linear, x: torch.Tensor, options: RuntimeOptions, residual: torch.Tensor | None = None
) -> torch.Tensor:
    """layer(x) (+ residual) for an nn.Linear, one row of a large bias-free weight through `linear`."""
    if layer.bias is None:
        return linear(x, layer.weight, options, residual=residual)
    y = layer(x)
    return y if residual is None else y + residual
