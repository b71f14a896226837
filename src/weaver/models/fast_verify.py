"""Tree verify of attention-only models in six fused Triton kernels per layer.

`Decoder.forward(tokens, cache, parents=..., depth=...)` is the reference; this is the same pass with
the B T tree nodes as the rows of small GEMMs. Per layer: (input norm + qkv), (qk-norm + RoPE + K/V
write at slots lengths + j), (tree attention), (o + residual), (post norm + gate/up + SiLU*up),
(down + residual); then one launch for the final norm + LM head, which also hands out the normed
hidden rows. Like the reference it writes only the tree's slots and leaves `cache.lengths` alone;
`Decoder.commit` keeps the accepted path afterwards.

WEAVER_VERIFY_QKV_ROPE=1 (opt-in until timed on the H200: scripts/gpu/chain_levers_check.sh) merges the
first two launches of a layer (`weaver.ops.triton.verify_qkv`: the qkv activations stay in registers) when
RoPE spans the whole head.
"""

from __future__ import annotations

import os
from functools import partial

import torch

from weaver.models.cache import ModelCache
from weaver.models.decoder import Decoder, ForwardOutput
from weaver.models.fast_decode import FusedPath
from weaver.ops.tree import ancestor_mask, node_depth


class FastVerifier(FusedPath):
    """Callable `(tokens [B, T], cache, parents, depth, capture_layers) -> ForwardOutput`, as `Decoder.forward`."""

    what = "fast verify"

    def __init__(self, model: Decoder) -> None:
        super().__init__(model)
        head_dim = model.config.head_dim  # resolved by ModelConfig
        self.qkv_rope = (
            os.environ.get("WEAVER_VERIFY_QKV_ROPE", "0") == "1"
            and 2 * model.rope_inv_freq.shape[0] == head_dim
            and head_dim % 32 == 0
        )

    def __call__(
        self,
        tokens: torch.Tensor,  # [B, T]
        cache: ModelCache,
        parents: torch.Tensor,  # [B, T]: -1 for the root and pad nodes
        depth: torch.Tensor | None = None,  # [B, T]; None: node_depth(parents)
        capture_layers: tuple[int, ...] = (),
        ancestors: torch.Tensor | None = None,  # [B, T, T] ancestor-or-self mask; None: built here
    ) -> ForwardOutput:
        """Verify one batch of trees: logits [B, T, V] fp32, final-norm hidden, captured layer outputs."""
        k, m = self.kernels, self.model
        b, t = tokens.shape
        if parents.shape != (b, t):
            raise ValueError(f"parents must be [{b}, {t}] like tokens, got {tuple(parents.shape)}")
        depth = node_depth(parents) if depth is None else depth
        anc = ancestor_mask(parents) if ancestors is None else ancestors  # [B, T, T], shared by every layer
        gemm = partial(k.fused_gemv, eps=self.eps, row_tiles=True)  # B T rows: one weight read per row tile
        x = m.model.embed_tokens(tokens.reshape(b * t))  # [B T, hidden]: one row per node
        captured = []
        for i, (layer, layer_cache) in enumerate(zip(m.model.layers, cache.layers, strict=True)):
            attn, mlp = layer.self_attn, layer.mlp
            q_norm, k_norm = self.qk_norms(attn)
            if self.qkv_rope:
                q = k.qkv_rope_write(
                    x, attn.fused.weight, layer.input_layernorm.weight, self.eps, layer_cache.k, layer_cache.v,
                    cache.lengths, depth, m.rope_inv_freq, self.num_heads, self.num_kv_heads, q_norm, k_norm,
                    qk_eps=self.eps,
                )
            else:
                qkv = gemm(x, attn.fused.weight, norm_weight=layer.input_layernorm.weight)
                q = k.tree_rope_kv_write(
                    qkv, layer_cache.k, layer_cache.v, cache.lengths, depth, m.rope_inv_freq,
                    self.num_heads, self.num_kv_heads, q_norm, k_norm, eps=self.eps,
                )
            o = k.tree_attention(q, layer_cache.k, layer_cache.v, cache.lengths, anc, self.num_heads, self.num_kv_heads)
            x = gemm(o, attn.o_proj.weight, residual=x)
            act = gemm(x, mlp.fused.weight, norm_weight=layer.post_attention_layernorm.weight, swiglu=True)
            x = gemm(act, mlp.down_proj.weight, residual=x)
            if i in capture_layers:
                captured.append(x.view(b, t, -1))
        hidden = torch.empty_like(x)  # written by the LM-head launch: its RMSNorm prologue is the final norm
        logits = gemm(x, m.lm_head.weight, norm_weight=m.model.norm.weight, out_dtype=torch.float32, norm_out=hidden)
        cap = torch.cat(captured, dim=-1) if captured else None
        return ForwardOutput(logits=logits.view(b, t, -1), hidden=hidden.view(b, t, -1), captured=cap)
