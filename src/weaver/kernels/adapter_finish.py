"""A Weaver block's output projection and MLP as one custom op on CUDA (three Triton GEMV launches).

    if fused_finish_ready(x): y = fused_finish(block, x, attn)

`weaver.speculative.weaver.WeaverAdapter` calls it in its fused step (WEAVER_FUSED_ADAPTER) and runs
`WeaverBlock.finish` elsewhere; the test compares the two. The op (`weaver::adapter_finish`, with a fake
impl for tracing) is what a torch.compile'd build stage sees; eager calls launch the kernels directly. This
module imports without triton: the kernels load on first use.
"""

from __future__ import annotations

import torch

from weaver.kernels.dispatch import launch, triton_ready

__all__ = ["adapter_finish_op", "fused_finish", "fused_finish_ready"]


@torch.library.custom_op("weaver::adapter_finish", mutates_args=())
def adapter_finish_op(
    x: torch.Tensor, attn: torch.Tensor, o_weight: torch.Tensor, norm_weight: torch.Tensor,
    norm_bias: torch.Tensor | None, eps: float, fc1_weight: torch.Tensor, fc1_bias: torch.Tensor,
    fc2_weight: torch.Tensor, fc2_bias: torch.Tensor,
) -> torch.Tensor:
    """`weaver.kernels.triton.adapter_finish.adapter_finish` as a custom op."""
    from weaver.kernels.triton.adapter_finish import adapter_finish

    return adapter_finish(x, attn, o_weight, norm_weight, norm_bias, eps, fc1_weight, fc1_bias, fc2_weight, fc2_bias)


@adapter_finish_op.register_fake
def _adapter_finish_fake(x, attn, o_weight, norm_weight, norm_bias, eps, fc1_weight, fc1_bias, fc2_weight, fc2_bias):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def fused_finish_ready(x: torch.Tensor) -> bool:
    """The fused block output applies: x on CUDA and triton importable."""
    return x.is_cuda and triton_ready()


def fused_finish(block: torch.nn.Module, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
    """`block.finish(x, attn)` for x [R, d] and attn [R, d] (heads concatenated) of a `WeaverBlock` -> [R, d]."""
    norm = block.norm_mlp
    args = (x, attn, block.o_proj.weight, norm.weight, norm.bias, norm.eps, block.fc1.weight, block.fc1.bias,
            block.fc2.weight, block.fc2.bias)  # fmt: skip
    return launch(adapter_finish_op, "weaver.kernels.triton.adapter_finish", "adapter_finish", *args)
