"""Rotary position embedding, full or partial (the first `rotary_dim` dims of each head)."""

from __future__ import annotations

import math

import torch

from weaver.models.config import ModelConfig


def base_inv_freq(dim: int, theta: float) -> torch.Tensor:
    """theta^(-2i / dim) for i < dim // 2, float64 (the unscaled frequencies; callers cast)."""
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))


def rope_inv_freq(cfg: ModelConfig) -> torch.Tensor:
    """Inverse frequencies [rotary_dim // 2] in float32, with llama3 scaling when configured."""
    inv_freq = base_inv_freq(cfg.rotary_dim, cfg.rope_theta)
    scaling = cfg.rope_scaling
    if scaling:  # llama3: keep high frequencies, divide low ones by `factor`, blend in between
        factor = float(scaling["factor"])
        low = float(scaling.get("low_freq_factor", 1.0))
        high = float(scaling.get("high_freq_factor", 4.0))
        old_len = float(scaling["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv_freq
        smooth = (old_len / wavelen - low) / (high - low)
        blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
        inv_freq = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
        mid = (wavelen <= old_len / low) & (wavelen >= old_len / high)
        inv_freq = torch.where(mid, blended, inv_freq)
    return inv_freq.float()


def rope_cos_sin(
    positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [B, T, rotary_dim] for integer positions [B, T] (half-split layout, as HF)."""
    freqs = positions.float()[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE over all of x's last dim, cos / sin [..., D] broadcast against x (any layout).

    rotate_half(x) = [-x2, x1] is a flip of the halves and a sign, not a torch.cat: inductor realises a cat into
    a buffer of its own (two more passes over x), while this compiles to one pointwise pass. Same values."""
    d = x.shape[-1]
    swapped = x.unflatten(-1, (2, d // 2)).flip(-2).flatten(-2)  # [x2, x1]
    first = torch.arange(d, device=x.device) < d // 2
    return x * cos + torch.where(first, -swapped, swapped) * sin


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first cos.shape[-1] dims of x [B, heads, T, D]; cos/sin are [B, T, rot].

    Partial rotation (rot < D) selects the rotated and passed dims with a mask, not a torch.cat, for the same
    reason as `rotate`: compiled, one pointwise pass."""
    rot, d = cos.shape[-1], x.shape[-1]
    cos, sin = cos[:, None], sin[:, None]
    if rot == d:
        return rotate(x, cos, sin)
    dims = torch.arange(d, device=x.device)
    half = rot // 2
    partner = torch.where(dims < half, dims + half, dims - half)  # rotate-half's source dim (past rot: unused)
    swapped = x.index_select(-1, partner)
    inside = dims.clamp(max=rot - 1)  # dims past rot read any cos / sin: the mask below drops them
    rotated = x * cos.index_select(-1, inside) + torch.where(dims < half, -swapped, swapped) * sin.index_select(
        -1, inside
    )
    return torch.where(dims < rot, rotated, x)
