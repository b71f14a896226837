"""The Weaver adapter's building blocks (DESIGN §7): its config, its float32 RMSNorm with bias and the pre-norm
transformer block. `weaver.speculative.weaver` assembles them.

Norms are RMSNorm computed in float32, `weight * x / rms(x) + bias` (the bias is `config.norm_bias`, as in the
paper's checkpoint; `weaver.ops.weaver_norm`). The MLP is fc1 -> GELU (erf) -> fc2 with biases; q/k/v and o
projections have none. The math after the attention is `weaver.ops.adapter_finish`, the reference of the fused
kernel the tree steps run.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from weaver.ops.adapter_finish import adapter_finish
from weaver.ops.weaver_norm import weaver_norm

__all__ = ["WeaverBlock", "WeaverConfig", "WeaverNorm"]


@dataclass
class WeaverConfig:
    """Shapes of a Weaver adapter (paper checkpoint: d_rank 2048, 16 heads, MLP 2048, depth 15, pool 512)."""

    target_hidden: int  # Ht: width of the target's hidden states, embedding rows and LM-head rows
    d_rank: int = 512  # width of the adapter's transformer block
    num_heads: int = 8  # attention heads (head_dim = d_rank // num_heads)
    mlp_dim: int = 1024  # inner width of the GELU MLP
    max_depth: int = 15  # deepest pool the adapter scores; rows of pos_emb
    pool_size: int = 512  # K: candidates per depth (top-K of the drafter's logits)
    norm_bias: bool = True  # RMSNorms carry a learned bias (paper checkpoint)
    rms_norm_eps: float = 1e-6
    num_layers: int = 1  # transformer blocks (the paper uses one)

    def __post_init__(self) -> None:
        for name in ("target_hidden", "d_rank", "num_heads", "mlp_dim", "max_depth", "pool_size", "num_layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"WeaverConfig.{name} must be a positive int, got {value!r}")
        if self.d_rank % self.num_heads:
            raise ValueError(f"d_rank={self.d_rank} is not a multiple of num_heads={self.num_heads}")

    @property
    def head_dim(self) -> int:
        return self.d_rank // self.num_heads


class WeaverNorm(nn.Module):
    """RMSNorm in float32 with an optional bias: weight * x / rms(x) (+ bias), cast back to x's dtype."""

    def __init__(self, dim: int, eps: float = 1e-6, bias: bool = True) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return weaver_norm(x, self.weight, self.bias, self.eps)


class WeaverBlock(nn.Module):
    """Pre-norm transformer block; the caller owns the K/V (prefix rows and tree nodes live in one buffer)."""

    def __init__(self, cfg: WeaverConfig) -> None:
        super().__init__()
        d = cfg.d_rank
        self.num_heads, self.head_dim = cfg.num_heads, cfg.head_dim
        self.norm_attn = WeaverNorm(d, cfg.rms_norm_eps, cfg.norm_bias)
        self.qkv_proj = nn.Linear(d, 3 * d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)
        self.norm_mlp = WeaverNorm(d, cfg.rms_norm_eps, cfg.norm_bias)
        self.fc1 = nn.Linear(d, cfg.mlp_dim)
        self.fc2 = nn.Linear(cfg.mlp_dim, d)

    def qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [B, T, d_rank] -> q, k, v, each [B, H, T, head_dim]."""
        return self.split_heads(self.qkv_proj(self.norm_attn(x)))

    def split_heads(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """qkv_proj's output [B, T, 3 d_rank] -> q, k, v, each [B, H, T, head_dim] (views)."""
        b, t, _ = qkv.shape
        q, k, v = qkv.view(b, t, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        return q, k, v

    def finish(self, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        """Residual attention output and MLP. x [B, T, d_rank]; attn [B, H, T, head_dim] -> [B, T, d_rank]."""
        b, t, d = x.shape
        norm = self.norm_mlp
        return adapter_finish(x, attn.transpose(1, 2).reshape(b, t, d), self.o_proj.weight, norm.weight, norm.bias,
                              norm.eps, self.fc1.weight, self.fc1.bias, self.fc2.weight, self.fc2.bias)  # fmt: skip
