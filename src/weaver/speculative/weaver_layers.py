"""The Weaver adapter's building blocks (DESIGN §7): its config, its float32 RMSNorm with bias and the pre-norm
transformer block. `weaver.speculative.weaver` assembles them.

Norms are RMSNorm computed in float32, `weight * x / rms(x) + bias` (the bias is `config.norm_bias`, as in the
paper's checkpoint; `weaver.ops.weaver_norm`). q/k/v and o projections have no bias. Two variants exist
(`reference/checkpoint-formats.md` §3), told apart by two config fields:

    positions="learned", mlp="gelu"    the older one: a learned pos_emb added to the input rows; MLP
                                       fc1 -> GELU (erf) -> fc2, with biases
    positions="rope",    mlp="swiglu"  the authors' released one (RELEASED): RoPE on q and k (rotate-half over the
                                       whole head_dim, base rope_base); MLP down_proj(silu(gate) * up) with
                                       [gate; up] = gate_up_proj(x) (gate rows first), with biases

The math after the attention is `weaver.ops.adapter_finish`, the reference of the fused kernel the tree steps
run; the rotation is `weaver.models.rope.apply_rope` with the adapter's cos / sin rows (`rope_table`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from weaver.models.rope import apply_rope, base_inv_freq, rotate
from weaver.ops.adapter_finish import adapter_finish
from weaver.ops.weaver_norm import weaver_norm

__all__ = ["MLPS", "POSITIONS", "RELEASED", "WeaverBlock", "WeaverConfig", "WeaverNorm", "rope_table"]

POSITIONS = ("learned", "rope")
MLPS = ("gelu", "swiglu")
RELEASED = {"positions": "rope", "mlp": "swiglu"}  # the authors' released variant: what new trainings use

Rope = tuple[torch.Tensor, torch.Tensor]  # cos, sin [B, T, head_dim] of the rows' positions


@dataclass
class WeaverConfig:
    """Shapes of a Weaver adapter (paper checkpoint: d_rank 2048, 16 heads, MLP 2048, depth 15, pool 512)."""

    target_hidden: int  # Ht: width of the target's hidden states, embedding rows and LM-head rows
    d_rank: int = 512  # width of the adapter's transformer block
    num_heads: int = 8  # attention heads (head_dim = d_rank // num_heads)
    mlp_dim: int = 1024  # inner width of the MLP
    max_depth: int = 15  # deepest pool the adapter scores; rows of pos_emb ("learned")
    pool_size: int = 512  # K: candidates per depth (top-K of the drafter's logits)
    norm_bias: bool = True  # RMSNorms carry a learned bias (paper checkpoint)
    rms_norm_eps: float = 1e-6
    num_layers: int = 1  # transformer blocks (the paper uses one)
    positions: str = "learned"  # "learned": pos_emb rows added to the inputs; "rope": RoPE on q/k (released)
    mlp: str = "gelu"  # "gelu": fc1 -> GELU -> fc2; "swiglu": gate_up_proj -> silu(gate) * up -> down_proj
    rope_base: float = 10000.0  # RoPE base ("rope" only)

    def __post_init__(self) -> None:
        for name in ("target_hidden", "d_rank", "num_heads", "mlp_dim", "max_depth", "pool_size", "num_layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"WeaverConfig.{name} must be a positive int, got {value!r}")
        if self.d_rank % self.num_heads:
            raise ValueError(f"d_rank={self.d_rank} is not a multiple of num_heads={self.num_heads}")
        if self.positions not in POSITIONS:
            raise ValueError(f"WeaverConfig.positions must be one of {list(POSITIONS)}, got {self.positions!r}")
        if self.mlp not in MLPS:
            raise ValueError(f"WeaverConfig.mlp must be one of {list(MLPS)}, got {self.mlp!r}")
        if isinstance(self.rope_base, bool) or not isinstance(self.rope_base, (int, float)) or not self.rope_base > 0:
            raise ValueError(f"WeaverConfig.rope_base must be a positive number, got {self.rope_base!r}")
        self.rope_base = float(self.rope_base)
        if self.positions == "rope" and self.head_dim % 2:
            raise ValueError(f"positions='rope' needs an even head_dim, got d_rank={self.d_rank} / "
                             f"num_heads={self.num_heads} = {self.head_dim}")  # fmt: skip

    @property
    def head_dim(self) -> int:
        return self.d_rank // self.num_heads


def rope_table(cfg: WeaverConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [max_depth + 1, head_dim] float32 of positions 0..max_depth (every position a round uses)."""
    inv_freq = base_inv_freq(cfg.head_dim, cfg.rope_base).float()
    freqs = torch.arange(cfg.max_depth + 1, dtype=torch.float32)[:, None] * inv_freq  # [P, hd / 2]
    emb = torch.cat((freqs, freqs), dim=-1)  # half-split layout, as `weaver.models.rope.rope_cos_sin`
    return emb.cos(), emb.sin()


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
        self.swiglu = cfg.mlp == "swiglu"
        self.norm_attn = WeaverNorm(d, cfg.rms_norm_eps, cfg.norm_bias)
        self.qkv_proj = nn.Linear(d, 3 * d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)
        self.norm_mlp = WeaverNorm(d, cfg.rms_norm_eps, cfg.norm_bias)
        if self.swiglu:
            self.gate_up_proj = nn.Linear(d, 2 * cfg.mlp_dim)  # rows [gate; up]
            self.down_proj = nn.Linear(cfg.mlp_dim, d)
        else:
            self.fc1 = nn.Linear(d, cfg.mlp_dim)
            self.fc2 = nn.Linear(cfg.mlp_dim, d)

    @property
    def mlp_up(self) -> nn.Linear:
        """The MLP's input projection: fc1, or gate_up_proj (rows [gate; up])."""
        return self.gate_up_proj if self.swiglu else self.fc1

    @property
    def mlp_down(self) -> nn.Linear:
        """The MLP's output projection: fc2 or down_proj."""
        return self.down_proj if self.swiglu else self.fc2

    def qkv(self, x: torch.Tensor, rope: Rope | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [B, T, d_rank] -> q, k, v, each [B, H, T, head_dim]; q and k rotated with rope (cos, sin [B, T, hd])."""
        q, k, v = self.split_heads(self.qkv_proj(self.norm_attn(x)))
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        return q, k, v

    def split_heads(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """qkv_proj's output [B, T, 3 d_rank] -> q, k, v, each [B, H, T, head_dim] (views)."""
        b, t, _ = qkv.shape
        q, k, v = qkv.view(b, t, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        return q, k, v

    def qkv_rows(self, x: torch.Tensor, rope: Rope | None = None) -> torch.Tensor:
        """`qkv` with the heads concatenated again: [B, T, 3 d_rank] rows q | k | v (the candidate table's form)."""
        return self.rotate_rows(self.qkv_proj(self.norm_attn(x)), rope)

    def rotate_rows(self, qkv: torch.Tensor, rope: Rope | None) -> torch.Tensor:
        """Rows q | k | v [B, T, 3 d_rank] of the projection with q and k rotated (cos, sin [B or 1, T, hd]).

        In the projection's own row layout, with no concatenation, so that it compiles to one pointwise pass:
        through `qkv`'s [B, H, T, hd] views and two torch.cat (realised as buffers), the 27B build spent
        4 x ~110 us in copy kernels on its 7,681-row table (scale/h200_session32)."""
        if rope is None:
            return qkv
        b, t, _ = qkv.shape
        parts = qkv.view(b, t, 3, self.num_heads, self.head_dim)
        cos, sin = (c[:, :, None, None] for c in rope)  # [B, T, 1, 1, hd]
        is_qk = torch.arange(3, device=qkv.device)[:, None, None] < 2  # parts q and k rotate, v does not
        return torch.where(is_qk, rotate(parts, cos, sin), parts).view(b, t, -1)

    def finish(self, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        """Residual attention output and MLP. x [B, T, d_rank]; attn [B, H, T, head_dim] -> [B, T, d_rank]."""
        b, t, d = x.shape
        return adapter_finish(x, attn.transpose(1, 2).reshape(b, t, d), *self.finish_weights())

    def finish_weights(self) -> tuple:
        """`adapter_finish`'s arguments after x and attn: o_proj, norm_mlp, the MLP's two linears, the variant."""
        norm, up, down = self.norm_mlp, self.mlp_up, self.mlp_down
        return (self.o_proj.weight, norm.weight, norm.bias, norm.eps, up.weight, up.bias, down.weight, down.bias,
                self.swiglu)  # fmt: skip
