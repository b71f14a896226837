"""The rest of a Weaver block after its attention, in three GEMV launches (`fused_gemv` with the adapter's
options) instead of ~7 kernels (two cuBLAS GEMMs with bias, one without, the norm, GELU, two adds):

    x1 = x + attn @ W_o^T                          (residual epilogue)
    h  = gelu(norm_mlp(x1) @ W_1^T + b_1)          (WeaverNorm prologue, bias + GELU epilogue)
    y  = x1 + (h @ W_2^T + b_2)                    (bias + residual epilogue)

with the rounding points of its torch reference, `weaver.ops.adapter_finish` (= `WeaverBlock.finish`), in the
model dtype. A step has a few node rows, so each launch is the per-row decode GEMV (one program per output tile
and row; the rows re-read the tile from L2).
"""

from __future__ import annotations

import torch

from weaver.kernels.triton.decode import fused_gemv

__all__ = ["adapter_finish"]


def adapter_finish(
    x: torch.Tensor,  # [R, d] the block's input rows
    attn: torch.Tensor,  # [R, d] attention output, heads concatenated
    o_weight: torch.Tensor,  # [d, d]
    norm_weight: torch.Tensor,  # [d] norm_mlp
    norm_bias: torch.Tensor | None,  # [d] or None
    eps: float,
    fc1_weight: torch.Tensor,  # [mlp, d]
    fc1_bias: torch.Tensor,  # [mlp]
    fc2_weight: torch.Tensor,  # [d, mlp]
    fc2_bias: torch.Tensor,  # [d]
) -> torch.Tensor:
    """`weaver.ops.adapter_finish.adapter_finish` on [R, d] rows (attention concatenated over heads) -> [R, d]."""
    gemv = dict(row_tiles=False)
    x1 = fused_gemv(attn, o_weight, residual=x, **gemv)
    h = fused_gemv(x1, fc1_weight, norm_weight, eps, norm_fp32=True, norm_bias=norm_bias, bias=fc1_bias, gelu=True,
                   **gemv)  # fmt: skip
    return fused_gemv(h, fc2_weight, residual=x1, bias=fc2_bias, **gemv)
