"""Random attention-cache inputs shared by the tree-attention and qkv-RoPE kernel tests."""

from __future__ import annotations

import torch

HEADS = [(9, 3), (4, 4), (8, 2), (4, 1)]


def cache_inputs(gen, parents, heads, d, prefix, dtype, extra_slots=3):
    """Random lengths [B] <= prefix, caches with room for the tree plus stale slots, inv_freq, qk norms."""
    b, t = parents.shape
    h, hkv = heads
    s = prefix + t + extra_slots
    lengths = torch.randint(0, prefix + 1, (b,), generator=gen)
    ck = torch.randn(b, hkv, s, d, generator=gen).to(dtype)
    cv = torch.randn(b, hkv, s, d, generator=gen).to(dtype)
    return lengths, ck, cv


def rope_inv_freq(d: int, rot_frac: float) -> torch.Tensor:
    rot = max(2, int(d * rot_frac) // 2 * 2)
    return 1.0 / (10000 ** (torch.arange(0, rot, 2).float() / rot))

