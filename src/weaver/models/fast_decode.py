"""Single-token decode of attention-only models: `FusedLayers.layer` at M = B rows, five launches a layer.

`Decoder.forward` is the reference for every shape; this is the batch-decode fast path the engine captures
in a CUDA graph on GPU. Each batch row holds one new token at position = slot = `cache.lengths`, so the
qk-norm, RoPE and K/V write need no other row and run inside the attention launch. Per layer: (input norm +
qkv GEMV), (qk-norm + RoPE + K/V write + attention), (o GEMV + residual), (post norm + gate/up GEMV +
SiLU*up), (down GEMV + residual); then (final norm + LM head). It reads the fused projection weights of
`models.fuse`, so no weight is copied.
"""

from __future__ import annotations

import torch

from weaver.models.cache import ModelCache
from weaver.models.decoder import Decoder
from weaver.models.fused_layer import FusedLayers, LayerWeights, Rows, too_large_for_fused


def unsupported_reason(model: Decoder) -> str | None:
    """Why the fused decode and verify cannot run this model (None when they can)."""
    cfg = model.config
    if cfg.has_gdn:
        return "GDN layers"
    if any(kind != "full_attention" for kind in cfg.layer_types):
        return "sliding-window layers"
    if cfg.attention_bias or cfg.mlp_bias:
        return "projection biases"
    if cfg.attn_output_gate or cfg.norm_offset:
        return "gated attention / offset norms"
    layer = model.model.layers[0]
    too_large = too_large_for_fused(layer)
    if too_large is not None:
        return too_large
    if layer.self_attn.fused is None or layer.mlp.fused is None:
        return "projections not fused (call models.fuse.fuse_projections first)"
    return None


class TargetLayers(FusedLayers):
    """FusedLayers over a Decoder's layers: what the fused decode and verify share (support check, weights)."""

    what = "fused path"

    def __init__(self, model: Decoder) -> None:
        reason = unsupported_reason(model)
        if reason is not None:
            raise ValueError(f"{self.what} does not support this model: {reason}")
        cfg = model.config
        super().__init__(cfg.rms_norm_eps, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim)
        self.model = model

    def weights(self) -> list[LayerWeights]:
        """Every layer's fused weights, read at each call (as the model holds them now)."""
        out = []
        for layer in self.model.model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            q_norm, k_norm = (None, None) if attn.q_norm is None else (attn.q_norm.weight, attn.k_norm.weight)
            out.append(LayerWeights(
                layer.input_layernorm.weight, (attn.fused.weight,), q_norm, k_norm, attn.o_proj.weight,
                layer.post_attention_layernorm.weight, mlp.fused.weight, mlp.down_proj.weight,
            ))  # fmt: skip
        return out


class FastDecoder(TargetLayers):
    """Callable `(tokens [B, 1], cache) -> logits [B, V] fp32` that also advances `cache.lengths`."""

    what = "fast decode"

    def __call__(self, tokens: torch.Tensor, cache: ModelCache) -> torch.Tensor:
        m = self.model
        x = m.model.embed_tokens(tokens[:, 0])  # [B, hidden]
        rows = Rows(cache.lengths, m.rope_inv_freq)
        x, _ = self.run_layers(x, self.weights(), [(c.k, c.v) for c in cache.layers], rows)
        cache.lengths.add_(1)
        return self.head(x, m.model.norm.weight, m.lm_head.weight, rows)[0]
