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

__all__ = ["FUSED_FINISH_MAX_BYTES", "adapter_finish_op", "fused_finish"]

# The three per-row GEMVs win where a step is launch-bound; each re-reads its weight tile once per node row, so
# at the paper's width 2048 (32 MB a step) cuBLAS, through the compiled torch reference, wins. H200, 4 node rows,
# us a step, fused / compiled torch: width 512 (2 MB) 6.1 / 14.4, 1024 (8 MB) 13.0 / 21.2, 2048 (32 MB) 95.0 / 25.2
# (benchmarks/results/scale/h200_session31/call3_after/adapter_build_ab.txt, scripts/gpu/adapter_build_ab.py).
FUSED_FINISH_MAX_BYTES = 16 << 20


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
    if use_kernel(options, x) and finish_bytes(args) <= FUSED_FINISH_MAX_BYTES:
        return launch(adapter_finish_op, "weaver.kernels.triton.adapter_finish", "adapter_finish", *args)
    return adapter_finish(*args)


def finish_bytes(args: tuple) -> int:
    """Bytes of the three weight matrices of `fused_finish`'s arguments (o_proj, the MLP's up and down)."""
    return sum(w.numel() * w.element_size() for w in (args[2], args[6], args[8]))
