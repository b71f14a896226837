"""The DDTree tree on CUDA in one Triton launch (weaver.kernels.triton.ddtree_select).

    tokens, parents, depth, valid, logq = fused_ddtree_tree(top_lq, top_ids, root, nodes, options)
                                        # = weaver.ops.ddtree_select.ddtree_tree

Exposed as the custom op `weaver::ddtree_tree` so the compiled build stage calls it as one opaque kernel (its fake
impl gives the static output shapes); eager calls launch it directly. Where `use_kernel(options, top_lq)` says
no, or the tree is larger than the kernel holds, the torch reference runs; the tests compare the two. This
module imports without triton: the kernel module loads on first use.
"""

from __future__ import annotations

import torch

from weaver.kernels.dispatch import launch, use_kernel
from weaver.ops.ddtree_select import ddtree_tree
from weaver.options import RuntimeOptions

__all__ = ["DDTREE_KERNEL_MAX_NODES", "ddtree_tree_op", "fused_ddtree_tree"]

DDTREE_KERNEL_MAX_NODES = 128  # a level's pick holds `nodes` values in registers, its pairs ~nodes * ln(nodes)

_Tree = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


@torch.library.custom_op("weaver::ddtree_tree", mutates_args=())
def ddtree_tree_op(top_lq: torch.Tensor, top_ids: torch.Tensor, root: torch.Tensor, nodes: int) -> _Tree:
    """`weaver.kernels.triton.ddtree_select.ddtree_tree` as a custom op."""
    from weaver.kernels.triton.ddtree_select import ddtree_tree as kernel

    return kernel(top_lq, top_ids, root, nodes)


@ddtree_tree_op.register_fake
def _ddtree_tree_fake(top_lq: torch.Tensor, top_ids: torch.Tensor, root: torch.Tensor, nodes: int) -> _Tree:
    b, n = top_lq.shape[0], nodes + 1
    long = [top_lq.new_empty(b, n, dtype=torch.int64) for _ in range(3)]
    return (*long, top_lq.new_empty(b, n, dtype=torch.bool), top_lq.new_empty(b, n, dtype=torch.float32))


def fused_ddtree_tree(
    top_lq: torch.Tensor, top_ids: torch.Tensor, root: torch.Tensor, nodes: int, options: RuntimeOptions
) -> _Tree:
    """`ddtree_tree(top_lq, top_ids, root, nodes)`: the one-launch kernel where `use_kernel` and nodes <= 128, else
    the reference."""
    fits = top_lq.dtype == torch.float64 and 1 <= nodes <= DDTREE_KERNEL_MAX_NODES and top_lq.numel() > 0
    if fits and use_kernel(options, top_lq):
        return launch(ddtree_tree_op, "weaver.kernels.triton.ddtree_select", "ddtree_tree", top_lq, top_ids, root,
                      nodes)  # fmt: skip
    return ddtree_tree(top_lq, top_ids, root, nodes)
