"""Static, preallocated caches: attention K/V and GDN (recurrent state, conv window).

Shapes never change after `allocate`, so the decode step and the tree verify can be captured in CUDA
graphs. Verify writes tree K/V after the committed length and never touches the GDN state; `commit`
compacts the accepted path. Nothing is ever rolled back (stale slots past the length are masked).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from weaver.models.config import ModelConfig


@dataclass
class AttentionCache:
    """K/V of one attention layer: [B, Hkv, S, D], slot s holds the token at absolute position s."""

    k: torch.Tensor
    v: torch.Tensor

    def write(self, slots: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor) -> None:
        """Write k_new/v_new [B, Hkv, T, D] at slots [B, T] (device indices: graph-capturable)."""
        index = slots[:, None, :, None].expand_as(k_new)
        self.k.scatter_(2, index, k_new.to(self.k.dtype))
        self.v.scatter_(2, index, v_new.to(self.v.dtype))


@dataclass
class GDNCache:
    """Committed GDN state [B, HV, K, V] (fp32) and conv window [B, C, W-1] (raw pre-conv inputs).

    During a tree verify the layer stashes what the commit needs: the per-node factors of the tree
    solve (`aux`: k, delta, G) and the nodes' pre-conv inputs `tree_x` [B, N, C].
    """

    state: torch.Tensor
    conv: torch.Tensor
    aux: object | None = None
    tree_x: torch.Tensor | None = None


@dataclass
class ModelCache:
    """All layers' caches plus the committed length per batch row (a device tensor)."""

    lengths: torch.Tensor  # [B] committed tokens per row
    layers: list[AttentionCache | GDNCache]
    capacity: int  # S: slots per row, including room for the largest tree
    # every attention layer's K and V as one [L_attn, B, Hkv, S, D] tensor each (the layers hold views):
    # a commit compacts all layers with one gather + one scatter instead of four ops per layer
    stacked_kv: tuple[torch.Tensor, torch.Tensor]
    extras: dict[str, torch.Tensor] = field(default_factory=dict)

    def compact_attention(self, src_slots: torch.Tensor, dst_slots: torch.Tensor) -> None:
        """Copy slots src [B, P] to dst [B, P] in every attention layer (gathers first: overlaps are safe)."""
        for big in self.stacked_kv:
            n, b, h, _, d = big.shape
            shape = (n, b, h, src_slots.shape[1], d)
            src = src_slots[None, :, None, :, None].expand(shape)
            big.scatter_(3, dst_slots[None, :, None, :, None].expand(shape), big.gather(3, src))

    @property
    def batch_size(self) -> int:
        return int(self.lengths.shape[0])

    def reset(self) -> None:
        """Forget every committed token (states to zero); buffers keep their addresses."""
        self.lengths.zero_()
        for layer in self.layers:
            if isinstance(layer, GDNCache):
                layer.state.zero_()
                layer.conv.zero_()
                layer.aux = None
                layer.tree_x = None


def allocate_cache(
    cfg: ModelConfig,
    batch_size: int,
    capacity: int,
    device: torch.device | str,
    dtype: torch.dtype,
) -> ModelCache:
    """Preallocate every layer's cache once, at full capacity."""
    layers: list[AttentionCache | GDNCache] = []
    num_attn = sum(kind != "linear_attention" for kind in cfg.layer_types)
    kv_shape = (num_attn, batch_size, cfg.num_key_value_heads, capacity, cfg.head_dim)
    big_k = torch.zeros(kv_shape, device=device, dtype=dtype)
    big_v = torch.zeros(kv_shape, device=device, dtype=dtype)
    attn_index = 0
    for kind in cfg.layer_types:
        if kind == "linear_attention":
            state = torch.zeros(
                batch_size,
                cfg.linear_num_value_heads,
                cfg.linear_key_head_dim,
                cfg.linear_value_head_dim,
                device=device,
                dtype=torch.float32,
            )
            conv = torch.zeros(
                batch_size, cfg.gdn_conv_dim, cfg.linear_conv_kernel_dim - 1, device=device, dtype=dtype
            )
            layers.append(GDNCache(state=state, conv=conv))
        else:
            layers.append(AttentionCache(k=big_k[attn_index], v=big_v[attn_index]))
            attn_index += 1
    lengths = torch.zeros(batch_size, dtype=torch.long, device=device)
    return ModelCache(lengths=lengths, layers=layers, capacity=capacity, stacked_kv=(big_k, big_v))
