"""Fuse sibling projections into one GEMM for inference, without changing parameter names.

q/k/v (attention), gate/up (MLP) and qkv/z/b/a (GDN) read the same input, so one matmul over the
concatenated weight replaces 3-4 small ones; at batch 1 a decode step is launch-bound, so fewer,
larger kernels are faster. The original parameters become views into the fused weight: the state
dict, loading and parity tests see the HF names, while forward uses the fused tensor.
"""

from __future__ import annotations

import torch
from torch import nn

from weaver.kernels import gemv
from weaver.options import RuntimeOptions


class FusedLinear:
    """The concatenated weight (and bias) of several nn.Linear over one input, with the split sizes.

    share=True (inference) makes the linears' parameters views of the fused tensors (no longer trainable);
    share=False leaves them alone and holds a copy.
    """

    def __init__(self, linears: list[nn.Linear], share: bool = True) -> None:
        self.sizes = [lin.out_features for lin in linears]
        self.weight = torch.cat([lin.weight.data for lin in linears], dim=0)
        has_bias = [lin.bias is not None for lin in linears]
        self.bias = torch.cat([lin.bias.data for lin in linears]) if all(has_bias) else None
        if any(has_bias) and not all(has_bias):
            raise ValueError("cannot fuse linears where only some have a bias")
        start = 0
        for lin, size in zip(linears, self.sizes) if share else ():
            lin.weight = nn.Parameter(self.weight[start : start + size], requires_grad=False)
            if self.bias is not None:
                lin.bias = nn.Parameter(self.bias[start : start + size], requires_grad=False)
            start += size

    def __call__(
        self, x: torch.Tensor, options: RuntimeOptions | None = None, norm: gemv.RowNorm | None = None
    ) -> list[torch.Tensor]:
        return list(self.linear(x, options, norm).split(self.sizes, dim=-1))

    def linear(
        self, x: torch.Tensor, options: RuntimeOptions | None = None, norm: gemv.RowNorm | None = None
    ) -> torch.Tensor:
        """Every projection of x (of norm(x) where given), concatenated along the last dim (one GEMM; with
        `options`, one row of a large weight through weaver's GEMV: `weaver.kernels.gemv`, which may take the
        norm inside)."""
        if options is not None and self.bias is None:
            return gemv.linear(x, self.weight, options, norm=norm)
        return torch.nn.functional.linear(x if norm is None else norm(x), self.weight, self.bias)

    def part(self, first: int, count: int) -> FusedLinear:
        """The fused projection of linears first .. first + count - 1 alone (views of this one's tensors)."""
        part = object.__new__(FusedLinear)
        start = sum(self.sizes[:first])
        part.sizes = self.sizes[first : first + count]
        rows = slice(start, start + sum(part.sizes))
        part.weight = self.weight[rows]
        part.bias = None if self.bias is None else self.bias[rows]
        return part


def fuse_projections(model: nn.Module) -> nn.Module:
    """Give every attention, GDN and MLP block a `fused` projection (idempotent)."""
    from weaver.models.attention import Attention
    from weaver.models.gdn import GatedDeltaNet
    from weaver.models.mlp import MLP

    for module in model.modules():
        if getattr(module, "fused", None) is not None:
            continue
        if isinstance(module, Attention):
            module.fused = FusedLinear([module.q_proj, module.k_proj, module.v_proj])
        elif isinstance(module, MLP):
            module.fused = FusedLinear([module.gate_proj, module.up_proj])
        elif isinstance(module, GatedDeltaNet):
            module.fused = FusedLinear([module.in_proj_qkv, module.in_proj_z, module.in_proj_b, module.in_proj_a])
    return model
