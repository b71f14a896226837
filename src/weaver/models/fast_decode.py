"""Single-token decode of attention-only models in five fused Triton kernels per layer.

`Decoder.forward` is the reference for every shape; this is the batch-decode fast path the engine
captures in a CUDA graph on GPU. Per layer: (input norm + qkv GEMV), (qk-norm + RoPE + K/V write +
attention), (o GEMV + residual), (post norm + gate/up GEMV + SiLU*up), (down GEMV + residual); then
(final norm + LM head). It reads the fused projection weights of `models.fuse`, so no weight is copied.
"""

from __future__ import annotations

import torch

from weaver.models.cache import ModelCache
from weaver.models.decoder import Decoder


def unsupported_reason(model: Decoder) -> str | None:
    """Why the fast decode cannot run this model (None when it can)."""
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
    if layer.self_attn.fused is None or layer.mlp.fused is None:
        return "projections not fused (call models.fuse.fuse_projections first)"
    return None


class FusedPath:
    """What the fused decode and verify paths share: the support check, the kernels and model constants."""

    what = "fused path"

    def __init__(self, model: Decoder) -> None:
        reason = unsupported_reason(model)
        if reason is not None:
            raise ValueError(f"{self.what} does not support this model: {reason}")
        from weaver.kernels import triton as kernels  # imported here: the models layer must load without triton

        self.kernels = kernels
        self.model = model
        cfg = model.config
        self.eps = cfg.rms_norm_eps
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads

    @staticmethod
    def qk_norms(attn) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """The per-head q/k RMSNorm weights (qwen3), or None (llama)."""
        if attn.q_norm is None:
            return None, None
        return attn.q_norm.weight, attn.k_norm.weight


class FastDecoder(FusedPath):
    """Callable `(tokens [B, 1], cache) -> logits [B, V] fp32` that also advances `cache.lengths`."""

    what = "fast decode"

    def __call__(self, tokens: torch.Tensor, cache: ModelCache) -> torch.Tensor:
        k, m = self.kernels, self.model
        x = m.model.embed_tokens(tokens[:, 0])  # [B, hidden]
        for layer, layer_cache in zip(m.model.layers, cache.layers, strict=True):
            attn, mlp = layer.self_attn, layer.mlp
            qkv = k.fused_gemv(x, attn.fused.weight, norm_weight=layer.input_layernorm.weight, eps=self.eps)
            q_norm, k_norm = self.qk_norms(attn)
            o = k.decode_attention(
                qkv, layer_cache.k, layer_cache.v, cache.lengths, m.rope_inv_freq,
                self.num_heads, self.num_kv_heads, q_norm, k_norm, eps=self.eps,
            )
            x = k.fused_gemv(o, attn.o_proj.weight, residual=x)
            act = k.fused_gemv(
                x, mlp.fused.weight, norm_weight=layer.post_attention_layernorm.weight, eps=self.eps, swiglu=True
            )
            x = k.fused_gemv(act, mlp.down_proj.weight, residual=x)
        cache.lengths.add_(1)
        return k.fused_gemv(
            x, m.lm_head.weight, norm_weight=m.model.norm.weight, eps=self.eps, out_dtype=torch.float32
        )
