"""Torch references of the fused single-token decode ops (the Triton versions: `weaver.kernels.triton.decode`).

A batch-1 decode step of a small model is launch-bound, so the fast path runs each layer as five
kernels: (norm + qkv GEMV), (qk-norm + rope + K/V write + attention), (o GEMV + residual),
(norm + gate/up GEMV + SiLU*up), (down GEMV + residual). These references define what each fused
kernel computes, with the rounding points of the unfused model code (`weaver.models`).
The tree verify (`weaver.kernels.triton.tree_attention`) splits the attention kernel in two: K/V write, then
tree attention (`tree_rope_kv_write_ref`, `tree_attention_ref`), and runs the GEMVs over B T rows.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama RMSNorm: normalise in fp32, cast to x's dtype, then scale by the weight."""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


def fused_gemv_ref(
    x: torch.Tensor,  # [M, K]
    weight: torch.Tensor,  # [N, K]
    norm_weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    residual: torch.Tensor | None = None,  # [M, N]
    swiglu: bool = False,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """[norm ->] x @ W^T [-> silu(gate) * up over the two halves of N] [-> + residual]."""
    h = rms_norm_ref(x, norm_weight, eps) if norm_weight is not None else x
    y = F.linear(h, weight)
    if swiglu:
        gate, up = y.chunk(2, dim=-1)
        y = F.silu(gate) * up
    if residual is not None:
        y = residual + y
    return y.to(out_dtype) if out_dtype is not None else y


def rope_ref(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """Half-split RoPE on the first 2*len(inv_freq) dims of x [B, heads, D] at positions [B]."""
    rot = 2 * inv_freq.shape[0]
    freqs = positions.float()[:, None] * inv_freq  # [B, rot/2]
    emb = torch.cat((freqs, freqs), dim=-1)[:, None]  # [B, 1, rot]
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    half = rot // 2
    rotated = torch.cat((-x_rot[..., half:], x_rot[..., :half]), dim=-1)
    return torch.cat((x_rot * cos + rotated * sin, x_pass), dim=-1)


def decode_attention_ref(
    qkv: torch.Tensor,  # [B, (H + 2 Hkv) D]: the fused q | k | v projection of one token per row
    cache_k: torch.Tensor,  # [B, Hkv, S, D]
    cache_v: torch.Tensor,
    lengths: torch.Tensor,  # [B] committed tokens; the new token goes to slot lengths[b]
    inv_freq: torch.Tensor,  # [rot/2] fp32
    num_heads: int,
    num_kv_heads: int,
    q_norm: torch.Tensor | None = None,  # [D] per-head RMSNorm weights (qwen3)
    k_norm: torch.Tensor | None = None,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Write the new token's K/V at its slot, attend over slots 0..length; returns o [B, H D]."""
    b = qkv.shape[0]
    d = cache_k.shape[-1]
    q, k, v = qkv.split([num_heads * d, num_kv_heads * d, num_kv_heads * d], dim=-1)
    q, k, v = q.view(b, num_heads, d), k.view(b, num_kv_heads, d), v.view(b, num_kv_heads, d)
    if q_norm is not None:
        q, k = rms_norm_ref(q, q_norm, eps), rms_norm_ref(k, k_norm, eps)
    q, k = rope_ref(q, lengths, inv_freq), rope_ref(k, lengths, inv_freq)
    rows = torch.arange(b, device=qkv.device)
    cache_k[rows, :, lengths] = k.to(cache_k.dtype)
    cache_v[rows, :, lengths] = v.to(cache_v.dtype)
    slots = torch.arange(cache_k.shape[2], device=qkv.device)
    mask = (slots[None, :] <= lengths[:, None])[:, None, None, :]  # [B, 1, 1, S]
    out = F.scaled_dot_product_attention(
        q[:, :, None], cache_k, cache_v, attn_mask=mask, enable_gqa=num_heads != num_kv_heads
    )
    return out.reshape(b, num_heads * d)


def tree_rope_kv_write_ref(
    qkv: torch.Tensor,  # [B T, (H + 2 Hkv) D]: the fused projection of T tree nodes per row, node-major
    cache_k: torch.Tensor,  # [B, Hkv, S, D]
    cache_v: torch.Tensor,
    lengths: torch.Tensor,  # [B] committed tokens
    depth: torch.Tensor,  # [B, T] node depths
    inv_freq: torch.Tensor,  # [rot/2] fp32
    num_heads: int,
    num_kv_heads: int,
    q_norm: torch.Tensor | None = None,  # [D] (qwen3)
    k_norm: torch.Tensor | None = None,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Tree verify's K/V write: node j at position lengths + depth[j], slot lengths + j; returns q [B T, H D]."""
    b, t = depth.shape
    d = cache_k.shape[-1]
    q, k, v = qkv.split([num_heads * d, num_kv_heads * d, num_kv_heads * d], dim=-1)
    q, k, v = q.view(b * t, num_heads, d), k.view(b * t, num_kv_heads, d), v.view(b, t, num_kv_heads, d)
    if q_norm is not None:
        q, k = rms_norm_ref(q, q_norm, eps), rms_norm_ref(k, k_norm, eps)
    positions = (lengths[:, None] + depth).reshape(b * t)
    q, k = rope_ref(q, positions, inv_freq), rope_ref(k, positions, inv_freq)
    slots = lengths[:, None] + torch.arange(t, device=qkv.device)  # [B, T]
    index = slots[:, None, :, None].expand(b, num_kv_heads, t, d)
    cache_k.scatter_(2, index, k.view(b, t, num_kv_heads, d).transpose(1, 2).to(cache_k.dtype))
    cache_v.scatter_(2, index, v.transpose(1, 2).to(cache_v.dtype))
    return q.reshape(b * t, num_heads * d)


def tree_attention_ref(
    q: torch.Tensor,  # [B T, H D] roped queries
    cache_k: torch.Tensor,  # [B, Hkv, S, D] with the tree's K/V at slots lengths + j
    cache_v: torch.Tensor,
    lengths: torch.Tensor,  # [B]
    anc: torch.Tensor,  # [B, T, T] bool ancestor-or-self
    num_heads: int,
    num_kv_heads: int,
) -> torch.Tensor:
    """Node i attends to slots < lengths and to slots lengths + j of its ancestors-or-self j; o [B T, H D]."""
    b, t, _ = anc.shape
    s, d = cache_k.shape[2], cache_k.shape[3]
    slots = lengths[:, None] + torch.arange(t, device=q.device)  # [B, T]
    committed = torch.arange(s, device=q.device)[None, None, :] < lengths[:, None, None]  # [B, 1, S]
    tree = torch.zeros(b, t, s, dtype=torch.bool, device=q.device)
    tree.scatter_(2, slots[:, None, :].expand(b, t, t), anc)
    mask = (committed | tree)[:, None]  # [B, 1, T, S]
    out = F.scaled_dot_product_attention(
        q.view(b, t, num_heads, d).transpose(1, 2), cache_k, cache_v, attn_mask=mask,
        enable_gqa=num_heads != num_kv_heads,
    )
    return out.transpose(1, 2).reshape(b * t, num_heads * d)
