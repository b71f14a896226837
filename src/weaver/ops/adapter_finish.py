"""The rest of a Weaver block after its attention: the output projection and the GELU MLP, both residual.

    y = adapter_finish(x, attn, o_weight, norm_weight, norm_bias, eps, fc1_weight, fc1_bias, fc2_weight, fc2_bias)

    x1 = x + attn @ W_o^T
    y  = x1 + fc2(gelu(fc1(weaver_norm(x1))))          (GELU: erf form)

x, attn [..., d] (attn: the heads concatenated), W_o [d, d], fc1 [mlp, d], fc2 [d, mlp]. `WeaverBlock.finish`
is this function; `weaver.kernels.triton.adapter_finish` is its three-GEMV fast path, with these rounding
points in the model dtype.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from weaver.ops.weaver_norm import weaver_norm

__all__ = ["adapter_finish"]


def adapter_finish(
    x: torch.Tensor,  # [..., d] the block's input rows
    attn: torch.Tensor,  # [..., d] attention output, heads concatenated
    o_weight: torch.Tensor,  # [d, d]
    norm_weight: torch.Tensor,  # [d] norm_mlp
    norm_bias: torch.Tensor | None,  # [d] or None
    eps: float,
    fc1_weight: torch.Tensor,  # [mlp, d]
    fc1_bias: torch.Tensor | None,  # [mlp]
    fc2_weight: torch.Tensor,  # [d, mlp]
    fc2_bias: torch.Tensor | None,  # [d]
) -> torch.Tensor:
    """The block's output rows [..., d] (differentiable: the teacher-forced training path runs it)."""
    x = x + F.linear(attn, o_weight)
    h = F.gelu(F.linear(weaver_norm(x, norm_weight, norm_bias, eps), fc1_weight, fc1_bias))
    return x + F.linear(h, fc2_weight, fc2_bias)
