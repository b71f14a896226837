"""A Weaver block's output projection and MLP as one custom op (three Triton GEMV launches).

    y = fused_finish(block, x, attn, options)   # = weaver.ops.adapter_finish.adapter_finish on the block's weights

`weaver.speculative.weaver.WeaverAdapter` calls it in each tree step; where `use_kernel(options, x)` says no it
runs the torch reference (`weaver.ops.adapter_finish`, which is `WeaverBlock.finish`); the test compares the
two. The op (`weaver::adapter_finish`, with a fake impl for tracing) is what a torch.compile'd build stage sees;
eager calls launch the kernels directly. This module imports without triton: the kernels load on first use.
"""

from __future__ import annotations

import torch

from weaver.kernels.dispatch import launch, use_kernel
from weaver.ops.adapter_finish import adapter_finish
from weaver.options import RuntimeOptions

__all__ = ["adapter_finish_op", "fused_finish"]


@torch.library.custom_op("weaver::adapter_finish", mutates_args=())
def adapter_finish_op(
    x: torch.Tensor, attn: torch.Tensor, o_weight: torch.Tensor, norm_weight: torch.Tensor,
    norm_bias: torch.Tensor | None, eps: float, fc1_weight: torch.Tensor, fc1_bias: torch.Tensor,
    fc2_weight: torch.Tensor, fc2_bias: torch.Tensor,
) -> torch.Tensor:
    """`weaver.kernels.triton.adapter_finish.adapter_finish` as a custom op."""
    from weaver.kernels.triton.adapter_finish import adapter_finish as kernel

    return kernel(x, attn, o_weight, norm_weight, norm_bias, eps, fc1_weight, fc1_bias, fc2_weight, fc2_bias)


@adapter_finish_op.register_fake
def _adapter_finish_fake(x, attn, o_weight, norm_weight, norm_bias, eps, fc1_weight, fc1_bias, fc2_weight, fc2_bias):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def fused_finish(block: torch.nn.Module, x: torch.Tensor, attn: torch.Tensor, options: RuntimeOptions) -> torch.Tensor:
    """`block.finish` of a `WeaverBlock` on rows: x [R, d] and attn [R, d] (heads concatenated) -> [R, d]."""
    norm = block.norm_mlp
    args = (x, attn, block.o_proj.weight, norm.weight, norm.bias, norm.eps, block.fc1.weight, block.fc1.bias,
            block.fc2.weight, block.fc2.bias)  # fmt: skip
    if use_kernel(options, x):
        return launch(adapter_finish_op, "weaver.kernels.triton.adapter_finish", "adapter_finish", *args)
    return adapter_finish(*args)
