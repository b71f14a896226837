"""The Weaver adapter's RMSNorm (DESIGN §7): float32, with an optional bias, cast back to the input's dtype.

    y = weaver_norm(x, weight, bias, eps)   # = weight * x / rms(x) (+ bias), x [..., d]

One definition for `WeaverNorm`, the torch references of the fused adapter kernels (`adapter_finish`,
`pool_top`) and their tests; the Triton kernels reproduce its single rounding point (the final cast).
"""

from __future__ import annotations

import torch

__all__ = ["weaver_norm"]


def weaver_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """RMSNorm over the last dim in float32: x [..., d], weight / bias [d] (bias may be None) -> x's dtype."""
    x32 = x.float()
    y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)
