"""Top-k along the last dim, on CUDA through one Triton program per row (weaver.kernels.triton.topk).

    values, indices = topk_last(x, k, options)      # = torch.topk(x, k, dim=-1), sorted, for small selections

For the device tree builders' few-hundred-entry rows, torch.topk on CUDA is a radix select plus a sort
(12-15 us on the H200); the Triton kernel takes 2.2-3.1 us. It is exposed as the custom op
`weaver::small_topk` so code compiled with torch.compile (the round stages, before CUDA-graph capture)
calls it as one opaque kernel; its fake impl gives the output shapes. Eager calls skip the op's dispatch
and launch the kernel directly (host time a call, H200 box: torch.topk 27 us, topk_last 42 us; it only
matters where nothing is captured). This module imports without triton: the kernel module is loaded on
first use, and `topk_last` runs it where `use_kernel(options, x)` says so (kernels="auto": CUDA and triton),
torch.topk elsewhere.
"""

from __future__ import annotations

import torch

from weaver.kernels.dispatch import launch, use_kernel
from weaver.options import RuntimeOptions

__all__ = ["TOPK_MAX_K", "TOPK_MAX_N", "small_topk_op", "topk_last"]

TOPK_MAX_K = 64  # k rounds of a block reduction: at N = 8192, k = 64 the two are about even (45 vs 53 us)
TOPK_MAX_N = 8192  # the row lives in registers: BLOCK_N / (32 * num_warps) keys per thread


@torch.library.custom_op("weaver::small_topk", mutates_args=())
def small_topk_op(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`weaver.kernels.triton.topk.small_topk` as a custom op: x [R, N] -> (values [R, k], indices [R, k] int64)."""
    from weaver.kernels.triton.topk import small_topk

    return small_topk(x, k)


@small_topk_op.register_fake
def _small_topk_fake(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    return x.new_empty(x.shape[0], k), x.new_empty(x.shape[0], k, dtype=torch.int64)


def topk_last(x: torch.Tensor, k: int, options: RuntimeOptions) -> tuple[torch.Tensor, torch.Tensor]:
    """`torch.topk(x, k, dim=-1)` (largest, sorted): the Triton kernel for float32/float64 rows of at most
    TOPK_MAX_N entries and k <= TOPK_MAX_K where `use_kernel(options, x)`, else torch.topk itself.

    The two agree exactly where torch.topk's order is defined; among equal values the kernel puts the
    lowest index first (torch.topk on CUDA does not promise an order), and -0.0 comes back as +0.0.
    """
    n = x.shape[-1] if x.dim() else 0
    fits = x.dtype in (torch.float32, torch.float64) and 1 <= k <= min(n, TOPK_MAX_K) and n <= TOPK_MAX_N
    if fits and use_kernel(options, x):
        values, indices = launch(small_topk_op, "weaver.kernels.triton.topk", "small_topk", x.reshape(-1, n), k)
        return values.view(*x.shape[:-1], k), indices.view(*x.shape[:-1], k)
    values, indices = torch.topk(x, k, dim=-1)
    return values, indices
