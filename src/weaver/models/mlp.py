"""SwiGLU feed-forward block (Llama, Qwen3, Qwen3.5)."""

from __future__ import annotations

import torch
from torch import nn

from weaver.kernels import gemv
from weaver.options import RuntimeOptions


class MLP(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int, bias: bool = False) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.fused = None  # set by models.fuse.fuse_projections: one GEMM for gate and up

    def forward(
        self,
        x: torch.Tensor,
        options: RuntimeOptions | None = None,
        norm: gemv.RowNorm | None = None,
        residual: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The block of x (of norm(x) where given), plus residual where given. With `options`, one row of large
        weights goes through weaver's GEMV (SwiGLU in its epilogue; the norm and the residual inside on the TMA
        route)."""
        if options is not None and self.fused is not None and self.fused.bias is None:
            h = gemv.linear(x, self.fused.weight, options, swiglu=True, norm=norm)
            return gemv.project(self.down_proj, h, options, residual)
        x = x if norm is None else norm(x)
        gate, up = self.fused(x) if self.fused is not None else (self.gate_proj(x), self.up_proj(x))
        out = self.down_proj(nn.functional.silu(gate) * up)
        return out if residual is None else out + residual
