"""Tree verify of attention-only models in five or six fused Triton kernels per layer.

`Decoder.forward(tokens, cache, parents=..., depth=...)` is the reference; this is the same pass with
the B T tree nodes as the rows of small GEMMs. Per layer: (input norm + qkv), (qk-norm + RoPE + K/V
write at slots lengths + j), (tree attention), (o + residual), (post norm + gate/up + SiLU*up),
(down + residual); then one launch for the final norm + LM head, which also hands out the normed
hidden rows. Like the reference it writes only the tree's slots and leaves `cache.lengths` alone;
`Decoder.commit` keeps the accepted path afterwards.

Trees of at most ROPE_ATTENTION_MAX_NODES nodes merge the second and third launches (`tree_attention_rope`:
each attention program ropes the tree's K itself, from a cos/sin table computed once a verify) unless
WEAVER_ROPE_ATTENTION=0; larger trees merge the first two (`qkv_rope_kv`: the qkv GEMM's programs rope
their own head tiles and write the K/V) unless WEAVER_QKV_ROPE=0.
"""

from __future__ import annotations

import os
from functools import partial

import torch

from weaver.models.cache import ModelCache
from weaver.models.decoder import Decoder, ForwardOutput
from weaver.models.fast_decode import FusedPath
from weaver.ops.tree import ancestor_mask, node_depth

# H200, SmolLM2 shapes (benchmarks/results/rounds/h200_v15): 16 nodes, 4.3 us fused against 4.0 + 2.5 us in
# two launches; 65 nodes, 9.3 against 5.6 + 2.6 (every program of a kv head ropes all 65 nodes' K).
# WEAVER_ROPE_ATTENTION_MAX_NODES overrides it (read at import) for A/B runs in a whole round.
ROPE_ATTENTION_MAX_NODES = int(os.environ.get("WEAVER_ROPE_ATTENTION_MAX_NODES", "32"))


class FastVerifier(FusedPath):
    """Callable `(tokens [B, T], cache, parents, depth, capture_layers) -> ForwardOutput`, as `Decoder.forward`."""

    what = "fast verify"

    def __init__(self, model: Decoder) -> None:
        super().__init__(model)
        self.rope_attention = rope_in_attention()  # read once: a captured graph keeps what it launched
        from weaver.kernels.triton.qkv_rope import head_dim_fits  # here, as FusedPath's kernels: triton-free imports

        self.qkv_rope = os.environ.get("WEAVER_QKV_ROPE", "1") != "0" and head_dim_fits(model.config.head_dim)

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
        rope = None
        if self.rope_attention and t <= ROPE_ATTENTION_MAX_NODES:
            rope = k.rope_table(cache.lengths, depth, m.rope_inv_freq, x.dtype)
        captured = []
        for i, (layer, layer_cache) in enumerate(zip(m.model.layers, cache.layers, strict=True)):
            attn, mlp = layer.self_attn, layer.mlp
            q_norm, k_norm = self.qk_norms(attn)
            if rope is None and self.qkv_rope:  # qkv + RoPE + K/V write in one launch, then the attention
                q = k.qkv_rope_kv(x, attn.fused.weight, layer.input_layernorm.weight, self.eps, layer_cache.k,
                                  layer_cache.v, cache.lengths, depth, m.rope_inv_freq, self.num_heads,
                                  self.num_kv_heads, q_norm, k_norm)[1]  # fmt: skip
                o = k.tree_attention(q, layer_cache.k, layer_cache.v, cache.lengths, anc, self.num_heads,
                                     self.num_kv_heads)  # fmt: skip
            else:
                qkv = gemm(x, attn.fused.weight, norm_weight=layer.input_layernorm.weight)
                o = tree_attend(
                    k, rope, qkv, layer_cache.k, layer_cache.v, cache.lengths, depth, anc,
                    m.rope_inv_freq, self.num_heads, self.num_kv_heads, q_norm, k_norm, self.eps,
                )
            x = gemm(o, attn.o_proj.weight, residual=x)
            act = gemm(x, mlp.fused.weight, norm_weight=layer.post_attention_layernorm.weight, swiglu=True)
            x = gemm(act, mlp.down_proj.weight, residual=x)
            if i in capture_layers:
                captured.append(x.view(b, t, -1))
        hidden = torch.empty_like(x)  # written by the LM-head launch: its RMSNorm prologue is the final norm
        logits = gemm(x, m.lm_head.weight, norm_weight=m.model.norm.weight, out_dtype=torch.float32, norm_out=hidden)
        cap = torch.cat(captured, dim=-1) if captured else None
        return ForwardOutput(logits=logits.view(b, t, -1), hidden=hidden.view(b, t, -1), captured=cap)


def rope_in_attention() -> bool:
    """WEAVER_ROPE_ATTENTION (default 1): qk-norm + RoPE + K/V write inside the tree-attention launch."""
    return os.environ.get("WEAVER_ROPE_ATTENTION", "1") != "0"


def tree_attend(
    kernels, rope: tuple[torch.Tensor, torch.Tensor] | None, qkv: torch.Tensor, cache_k: torch.Tensor,
    cache_v: torch.Tensor, lengths: torch.Tensor, depth: torch.Tensor, anc: torch.Tensor, inv_freq: torch.Tensor,
    num_heads: int, num_kv_heads: int, q_norm: torch.Tensor | None, k_norm: torch.Tensor | None, eps: float,
) -> torch.Tensor:
    """Tree attention of the B T rows of a fused q | k | v projection, their K/V written at slots lengths + j:
    one launch (`tree_attention_rope`) given the nodes' `rope_table` (cos, sin), else `tree_rope_kv_write`
    then `tree_attention`."""
    if rope is not None:
        return kernels.tree_attention_rope(qkv, cache_k, cache_v, lengths, anc, *rope, num_heads, num_kv_heads,
                                           q_norm, k_norm, eps=eps)  # fmt: skip
    q = kernels.tree_rope_kv_write(qkv, cache_k, cache_v, lengths, depth, inv_freq, num_heads, num_kv_heads,
                                   q_norm, k_norm, eps=eps)  # fmt: skip
    return kernels.tree_attention(q, cache_k, cache_v, lengths, anc, num_heads, num_kv_heads)
