"""A Weaver block's output projection and MLP as one custom op (three Triton GEMV launches).

    y = fused_finish(block, x, attn, options)   # = weaver.ops.adapter_finish.adapter_finish on the block's weights

Both MLP forms run in the kernels (GELU fc1/fc2 and the released SwiGLU gate_up_proj/down_proj).
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

# The three GEMVs take all of a step's node rows in one program each, so every weight tile is read once: they beat
# the torch reference compiled on cuBLAS (5 launches) at every width. H100, 4 node rows, us a step, fused / compiled
# torch: width 512 (2 MB) 6.6 / 13.6, 1024 (8 MB) 10.0 / 16.3, 2048 (32 MB) 24.6 / 29.2; at the 27B shape the weaver-64
# build fell 1.157 -> 1.083 ms (benchmarks/results/scale/h100_session44_finish/, scripts/gpu/adapter_build_ab.py).


@torch.library.custom_op("weaver::adapter_finish", mutates_args=())
def adapter_finish_op(
    x: torch.Tensor, attn: torch.Tensor, o_weight: torch.Tensor, norm_weight: torch.Tensor,
    norm_bias: torch.Tensor | None, eps: float, up_weight: torch.Tensor, up_bias: torch.Tensor,
    down_weight: torch.Tensor, down_bias: torch.Tensor, swiglu: bool = False,
) -> torch.Tensor:
    """`weaver.kernels.triton.adapter_finish.adapter_finish` as a custom op (swiglu: the MLP's form, GELU by default
    as before the released variant)."""
    from weaver.kernels.triton.adapter_finish import adapter_finish as kernel

    return kernel(x, attn, o_weight, norm_weight, norm_bias, eps, up_weight, up_bias, down_weight, down_bias, swiglu)


@adapter_finish_op.register_fake
def _adapter_finish_fake(x, attn, o_weight, norm_weight, norm_bias, eps, up_weight, up_bias, down_weight, down_bias,
                         swiglu=False):  # fmt: skip
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def fused_finish(block: torch.nn.Module, x: torch.Tensor, attn: torch.Tensor, options: RuntimeOptions) -> torch.Tensor:
    """`block.finish` of a `WeaverBlock` on rows: x [R, d] and attn [R, d] (heads concatenated) -> [R, d]."""
    args = (x, attn, *block.finish_weights())
    if use_kernel(options, x):
        return launch(adapter_finish_op, "weaver.kernels.triton.adapter_finish", "adapter_finish", *args)
    return adapter_finish(*args)
