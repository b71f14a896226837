"""The rest of a Weaver block after its attention, in three GEMV launches (`fused_gemv` with the adapter's
options) instead of ~7 kernels (two cuBLAS GEMMs with bias, one without, the norm, the activation, two adds):

    x1 = x + attn @ W_o^T                              (residual epilogue)
    h  = gelu(norm_mlp(x1) @ W_1^T + b_1)              (WeaverNorm prologue, bias + GELU epilogue)      GELU
    h  = silu(g) * u,  [g; u] = norm_mlp(x1) @ W_gu^T + b_gu   (WeaverNorm prologue; each program reads the
                                                       gate and the up row of its outputs)              SwiGLU
    y  = x1 + (h @ W_2^T + b_2)                        (bias + residual epilogue)

with the rounding points of its torch reference, `weaver.ops.adapter_finish` (= `WeaverBlock.finish`), in the
model dtype. A step has a few node rows, so each launch is the per-row decode GEMV (one program per output tile
and its node rows, up to 8: each weight tile is read once for all of them, which matters at the paper's width,
whose 32 MB a step pass L2).
"""

from __future__ import annotations

import torch
import triton

from weaver.kernels.triton.decode import fused_gemv

__all__ = ["adapter_finish"]


def adapter_finish(
    x: torch.Tensor,  # [R, d] the block's input rows
    attn: torch.Tensor,  # [R, d] attention output, heads concatenated
    o_weight: torch.Tensor,  # [d, d]
    norm_weight: torch.Tensor,  # [d] norm_mlp
    norm_bias: torch.Tensor | None,  # [d] or None
    eps: float,
    up_weight: torch.Tensor,  # [mlp, d] fc1, or [2 mlp, d] gate_up_proj (gate rows first)
    up_bias: torch.Tensor | None,  # [mlp] or [2 mlp]
    down_weight: torch.Tensor,  # [d, mlp]
    down_bias: torch.Tensor | None,  # [d]
    swiglu: bool = False,
    block_m: int | None = None,  # rows a GEMV program takes; None: all R rows, up to 8
) -> torch.Tensor:
    """`weaver.ops.adapter_finish.adapter_finish` on [R, d] rows (attention concatenated over heads) -> [R, d]."""
    gemv = dict(row_tiles=False, block_m=block_m or min(8, triton.next_power_of_2(x.shape[0])))
    x1 = fused_gemv(attn, o_weight, residual=x, **gemv)
    h = fused_gemv(x1, up_weight, norm_weight, eps, norm_fp32=True, norm_bias=norm_bias, bias=up_bias,
                   gelu=not swiglu, swiglu=swiglu, **gemv)  # fmt: skip
    return fused_gemv(h, down_weight, residual=x1, bias=down_bias, **gemv)
