"""Static, preallocated caches: attention K/V and GDN (recurrent state, conv window).

Shapes never change after `allocate`, so the decode step and the tree verify can be captured in CUDA
graphs. Verify writes tree K/V after the committed length and never touches the GDN state; `commit`
compacts the accepted path. Nothing is ever rolled back (stale slots past the length are masked).
Every layer of a kind lives in one stacked tensor (the layers hold views), so a commit is a few launches for
all layers instead of a few per layer: attention K/V [L_attn, ...], GDN states and conv windows [L_gdn, ...],
and the per-node factors a tree verify leaves for the GDN commit (`GDNTreeScratch`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from weaver.kernels.slots import move_slots, write_slots
from weaver.models.config import ModelConfig
from weaver.ops.gdn import GDNTreeAux


@dataclass
class AttentionCache:
    """K/V of one attention layer: [B, Hkv, S, D], slot s holds the token at absolute position s."""

    k: torch.Tensor
    v: torch.Tensor

    def write(self, slots: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor) -> None:
        """Write k_new/v_new [B, Hkv, T, D] at slots [B, T] (device indices: graph-capturable; in place when
        compiled: `weaver.kernels.slots`)."""
        write_slots(self.k, self.v, slots, k_new, v_new)


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
    index: int = 0  # this layer's slot in ModelCache.stacked_gdn and GDNTreeScratch


@dataclass
class GDNTreeScratch:
    """What a tree verify of N nodes leaves for the commit, every GDN layer stacked so one launch folds them all."""

    k: torch.Tensor  # [L_gdn, B, N, H, K] float32 (GDNTreeAux.k of each layer)
    delta: torch.Tensor  # [L_gdn, B, N, HV, V] float32
    G: torch.Tensor  # [L_gdn, B, N, HV] float32
    x: torch.Tensor  # [L_gdn, B, N, C] the layers' pre-conv inputs

    def layer(self, index: int) -> tuple[GDNTreeAux, torch.Tensor]:
        """GDN layer `index`'s slots: (aux, pre-conv inputs), views that its tree forward writes."""
        return GDNTreeAux(k=self.k[index], delta=self.delta[index], G=self.G[index]), self.x[index]


def allocate_tree_scratch(
    cfg: ModelConfig, batch_size: int, nodes: int, device: torch.device | str, dtype: torch.dtype
) -> GDNTreeScratch:
    """Uninitialised slots for one verify (torch.empty: static memory inside a captured graph)."""
    n = sum(kind == "linear_attention" for kind in cfg.layer_types)
    h, hv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    f32 = dict(device=device, dtype=torch.float32)
    return GDNTreeScratch(
        k=torch.empty(n, batch_size, nodes, h, cfg.linear_key_head_dim, **f32),
        delta=torch.empty(n, batch_size, nodes, hv, cfg.linear_value_head_dim, **f32),
        G=torch.empty(n, batch_size, nodes, hv, **f32),
        x=torch.empty(n, batch_size, nodes, cfg.gdn_conv_dim, device=device, dtype=dtype),
    )


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
    # every GDN layer's state [L_gdn, B, HV, K, V] fp32 and conv window [L_gdn, B, C, W-1] (the layers hold
    # views): a commit folds all layers with one launch each. None: per-layer tensors (commit layer by layer)
    stacked_gdn: tuple[torch.Tensor, torch.Tensor] | None = None
    gdn_tree: GDNTreeScratch | None = None  # what the last tree verify left for the commit (stacked)

    def compact_attention(self, src_slots: torch.Tensor, dst_slots: torch.Tensor) -> None:
        """Copy slots src [B, P] to dst [B, P] in every attention layer (gathers first: overlaps are safe)."""
        move_slots(*self.stacked_kv, src_slots, dst_slots)

    @property
    def batch_size(self) -> int:
        return int(self.lengths.shape[0])

    def reset(self) -> None:
        """Forget every committed token (states to zero); buffers keep their addresses."""
        self.lengths.zero_()
        self.gdn_tree = None
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
    num_gdn = len(cfg.layer_types) - num_attn
    state_shape = (num_gdn, batch_size, cfg.linear_num_value_heads, cfg.linear_key_head_dim,
                   cfg.linear_value_head_dim)  # fmt: skip
    states = torch.zeros(state_shape, device=device, dtype=torch.float32)
    convs = torch.zeros(num_gdn, batch_size, cfg.gdn_conv_dim, cfg.linear_conv_kernel_dim - 1, device=device,
                        dtype=dtype)  # fmt: skip
    attn_index = gdn_index = 0
    for kind in cfg.layer_types:
        if kind == "linear_attention":
            layers.append(GDNCache(state=states[gdn_index], conv=convs[gdn_index], index=gdn_index))
            gdn_index += 1
        else:
            layers.append(AttentionCache(k=big_k[attn_index], v=big_v[attn_index]))
            attn_index += 1
    lengths = torch.zeros(batch_size, dtype=torch.long, device=device)
    return ModelCache(lengths=lengths, layers=layers, capacity=capacity, stacked_kv=(big_k, big_v),
                      stacked_gdn=(states, convs))  # fmt: skip
