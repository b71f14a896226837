"""The rest of a Weaver block after its attention: the output projection and the MLP, both residual.

    y = adapter_finish(x, attn, o_weight, norm_weight, norm_bias, eps, up_weight, up_bias, down_weight, down_bias,
                       swiglu=False)

    x1 = x + attn @ W_o^T
    y  = x1 + fc2(gelu(fc1(weaver_norm(x1))))                      swiglu=False (GELU: erf form)
    y  = x1 + down(silu(gate) * up),  [gate; up] = gate_up(weaver_norm(x1))      swiglu=True

x, attn [..., d] (attn: the heads concatenated), W_o [d, d]; GELU: up = fc1 [mlp, d], down = fc2 [d, mlp];
SwiGLU: up = gate_up_proj [2 mlp, d] (gate rows first), down = down_proj [d, mlp]. `WeaverBlock.finish` is this
function; `weaver.kernels.triton.adapter_finish` is its three-GEMV fast path, with these rounding points in the
model dtype.
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
    up_weight: torch.Tensor,  # [mlp, d] fc1, or [2 mlp, d] gate_up_proj
    up_bias: torch.Tensor | None,  # [mlp] or [2 mlp]
    down_weight: torch.Tensor,  # [d, mlp] fc2 or down_proj
    down_bias: torch.Tensor | None,  # [d]
    swiglu: bool = False,  # the MLP's form: GELU (fc1/fc2) or SwiGLU (gate_up_proj/down_proj)
) -> torch.Tensor:
    """The block's output rows [..., d] (differentiable: the teacher-forced training path runs it)."""
    x = x + F.linear(attn, o_weight)
    h = F.linear(weaver_norm(x, norm_weight, norm_bias, eps), up_weight, up_bias)
    if swiglu:
        gate, up = h.chunk(2, dim=-1)
        h = F.silu(gate) * up
    else:
        h = F.gelu(h)
    return x + F.linear(h, down_weight, down_bias)
