"""The target decoder: embeddings, a stack of (attention | GDN) + MLP blocks, final norm, LM head.

`forward(tokens, cache)` is the single entry point: a chain (prefill or decode; commits as it goes)
when `parents` is None, a tree verify otherwise (writes only scratch; follow with `commit(path)`).
Parameter names equal HF's, so HF safetensors load with `load_state_dict`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from weaver.kernels import gdn as backend
from weaver.kernels import gemv
from weaver.models.attention import Attention
from weaver.models.cache import GDNCache, ModelCache, allocate_cache, allocate_tree_scratch
from weaver.models.config import ModelConfig
from weaver.models.gdn import GatedDeltaNet
from weaver.models.mlp import MLP
from weaver.models.norm import RMSNorm
from weaver.models.rope import rope_cos_sin, rope_inv_freq
from weaver.models.step import StepInputs, build_step
from weaver.options import DEFAULT_OPTIONS, RuntimeOptions


@dataclass
class ForwardOutput:
    logits: torch.Tensor  # [B, T', V] float32 (T' = T, or 1 with last_only)
    hidden: torch.Tensor  # [B, T', hidden] after the final norm
    captured: torch.Tensor | None  # [B, T, len(capture_layers) * hidden]: outputs of chosen layers


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.kind = cfg.layer_types[layer_idx]
        if self.kind == "linear_attention":
            self.linear_attn = GatedDeltaNet(cfg, layer_idx)
        else:
            self.self_attn = Attention(cfg, layer_idx)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size, bias=cfg.mlp_bias)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, offset=cfg.norm_offset)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, offset=cfg.norm_offset)

    def forward(self, x, cache, step: StepInputs, rope) -> torch.Tensor:
        if gemv.norm_in_projection(step.options, x.device):  # the projections take the norms and residual adds
            x = self._mix(x, cache, step, rope, self.input_layernorm, residual=x)
            return self.mlp(x, step.options, self.post_attention_layernorm, residual=x)
        x = x + self._mix(self.input_layernorm(x), cache, step, rope)
        return x + self.mlp(self.post_attention_layernorm(x), step.options)

    def _mix(self, x, cache, step: StepInputs, rope, norm=None, residual=None) -> torch.Tensor:
        """The layer's token mixer (GDN or attention) on x, with the norm and residual it may take inside."""
        if self.kind == "linear_attention":
            return self.linear_attn(x, cache, step, norm, residual)
        return self.self_attn(x, cache, step, rope, norm, residual)


class DecoderBody(nn.Module):
    """HF's `model.*` submodule (embed_tokens, layers, norm)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, offset=cfg.norm_offset)


class Decoder(nn.Module):
    """Causal LM with static caches and tree verification."""

    def __init__(self, cfg: ModelConfig, options: RuntimeOptions | None = None) -> None:
        super().__init__()
        self.config = cfg
        self.options = options or DEFAULT_OPTIONS  # the GDN / conv paths of every forward
        self.model = DecoderBody(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.register_buffer("rope_inv_freq", rope_inv_freq(cfg), persistent=False)

    @property
    def device(self) -> torch.device:
        return self.model.embed_tokens.weight.device

    def _apply(self, fn, recurse: bool = True):
        # RoPE frequencies stay float32 whatever dtype the weights are cast to: in bf16 the angle
        # error at position ~1000 reaches ~1 radian on the high frequencies.
        super()._apply(fn, recurse)
        self.rope_inv_freq = rope_inv_freq(self.config).to(self.rope_inv_freq.device)
        return self

    @property
    def dtype(self) -> torch.dtype:
        return self.model.embed_tokens.weight.dtype

    def allocate_cache(self, batch_size: int, capacity: int) -> ModelCache:
        return allocate_cache(self.config, batch_size, capacity, self.device, self.dtype)

    def forward(
        self,
        tokens: torch.Tensor,  # [B, T]
        cache: ModelCache,
        parents: torch.Tensor | None = None,  # [B, T] tree verify when given
        depth: torch.Tensor | None = None,  # [B, T] node depths (tree verify)
        last_only: bool = False,  # logits of the last position only (prefill)
        select: torch.Tensor | None = None,  # [B, K] positions whose logits are wanted (device tensor)
        capture_layers: tuple[int, ...] = (),
        ancestors: torch.Tensor | None = None,  # [B, T, T] the tree's ancestor-or-self mask, if already built
    ) -> ForwardOutput:
        b, t = tokens.shape
        step = build_step(
            cache.lengths, t, cache.capacity, parents, depth, sliding_window=self._sliding_window(),
            ancestors=ancestors, options=self.options,
        )
        x = self.model.embed_tokens(tokens)
        if step.is_tree and self.config.has_gdn:
            step.tree_structure = backend.build_tree_structure(parents, self.options)
            if cache.stacked_gdn is not None:  # every GDN layer leaves its commit inputs in one stacked buffer
                step.gdn_scratch = allocate_tree_scratch(self.config, b, t, x.device, x.dtype)
            cache.gdn_tree = step.gdn_scratch
        rope = rope_cos_sin(step.positions, self.rope_inv_freq, x.dtype)
        captured = []
        for i, layer in enumerate(self.model.layers):
            x = layer(x, cache.layers[i], step, rope)
            if i in capture_layers:
                captured.append(x)
        if not step.is_tree:
            cache.lengths.add_(t)
        if last_only:
            x = x[:, -1:]
        elif select is not None:
            x = x.gather(1, select[:, :, None].expand(-1, -1, x.shape[-1]))
        hidden = self.model.norm(x)
        logits = gemv.project(self.lm_head, hidden, self.options).float()
        cap = torch.cat(captured, dim=-1) if captured else None
        return ForwardOutput(logits=logits, hidden=hidden, captured=cap)

    def commit(self, cache: ModelCache, path: torch.Tensor, num_accepted: torch.Tensor) -> None:
        """Keep the accepted tree path (node ids [B, P] root..leaf, -1 padded; counts [B] incl. root).

        K/V of path node j moves from slot length+path[j] to slot length+j; GDN states and conv windows fold the
        path, every layer at once from the stacked inputs the verify left (layer by layer without them).
        """
        base = cache.lengths[:, None]
        offsets = torch.arange(path.shape[1], device=path.device)[None, :]
        src = base + path.clamp(min=0)
        dst = torch.where(path >= 0, base + offsets, src)  # padded entries copy a slot onto itself
        cache.compact_attention(src, dst)  # every attention layer at once
        scratch = cache.gdn_tree  # set by a tree verify only where the cache has stacked GDN buffers
        if scratch is not None:  # every GDN layer at once, in place
            backend.commit_stacked(scratch.k, scratch.delta, scratch.G, scratch.x, path, *cache.stacked_gdn,
                                   self.options)  # fmt: skip
        else:
            for layer, layer_cache in zip(self.model.layers, cache.layers, strict=True):
                if isinstance(layer_cache, GDNCache):
                    layer.linear_attn.commit(layer_cache, path, self.options)
        cache.lengths.add_(num_accepted)

    def _sliding_window(self) -> int | None:
        if "sliding_attention" in self.config.layer_types:
            return self.config.sliding_window
        return None
