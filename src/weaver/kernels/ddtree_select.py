"""The DDTree selection on CUDA in one Triton launch (weaver.kernels.triton.ddtree_select).

    score, flat, order = fused_ddtree_select(top_lq, nodes, options)   # = weaver.ops.ddtree_select.ddtree_select

Exposed as the custom op `weaver::ddtree_select` so the compiled build stage calls it as one opaque kernel (its
fake impl gives the static output shapes); eager calls launch it directly. Where `use_kernel(options, top_lq)`
says no, or the tree is larger than the kernel holds, the torch reference runs; the tests compare the two.
This module imports without triton: the kernel module loads on first use.
"""

from __future__ import annotations

import torch

from weaver.kernels.dispatch import launch, use_kernel
from weaver.ops.ddtree_select import ddtree_select, level_sizes
from weaver.options import RuntimeOptions

__all__ = ["DDTREE_KERNEL_MAX_NODES", "ddtree_select_op", "fused_ddtree_select"]

DDTREE_KERNEL_MAX_NODES = 128  # a level's pick holds `nodes` values in registers, its pairs ~nodes * ln(nodes)


@torch.library.custom_op("weaver::ddtree_select", mutates_args=())
def ddtree_select_op(top_lq: torch.Tensor, nodes: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`weaver.kernels.triton.ddtree_select.ddtree_select` as a custom op."""
    from weaver.kernels.triton.ddtree_select import ddtree_select as kernel

    return kernel(top_lq, nodes)


@ddtree_select_op.register_fake
def _ddtree_select_fake(top_lq: torch.Tensor, nodes: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    b, depth, k = top_lq.shape
    m = sum(level_sizes(depth, k, nodes))
    return (top_lq.new_empty(b, m), top_lq.new_empty(b, m, dtype=torch.int64),
            top_lq.new_empty(b, nodes, dtype=torch.int64))  # fmt: skip


def fused_ddtree_select(
    top_lq: torch.Tensor, nodes: int, options: RuntimeOptions
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`ddtree_select(top_lq, nodes)`: the one-launch kernel where `use_kernel` and nodes <= 128, else the reference."""
    fits = top_lq.dtype == torch.float64 and 1 <= nodes <= DDTREE_KERNEL_MAX_NODES and top_lq.numel() > 0
    if fits and use_kernel(options, top_lq):
        return launch(ddtree_select_op, "weaver.kernels.triton.ddtree_select", "ddtree_select", top_lq, nodes)
    return ddtree_select(top_lq, nodes)
