"""`DFlashDrafter.draft` as `FusedLayers.layer` over the block's Bk rows.

`DFlashDrafter.draft` is the reference. The block is a "tree" to the verify kernels: node j at depth j
(position and slot start + j, start = the context length), every row sees the whole context, and inside the
block every row (bidirectional layers) or the rows up to itself (causal layers). Per layer: (input norm + q)
and (input norm + k|v) into one q|k|v buffer (the drafter's k|v weights are slices of one weight over all
layers, for the context pass, so q stays a weight of its own), (qk-norm + RoPE + K/V write at the block's
slots + block attention over context + block: one launch for blocks of at most ROPE_ATTENTION_MAX_NODES
rows, else two), (o + residual), (post norm + gate/up + SiLU*up), (down + residual); then one launch for the
final norm + LM head of rows 1..Bk-1, which also hands out the normed hidden.

Whether a round drafts through it is the caller's choice (`fast_drafter`, from `RuntimeOptions.kernels`).
Tests: tests/speculative/test_fast_drafter.py (interpreter on CPU, compiled on a GPU).
"""

from __future__ import annotations

import torch
from torch import nn

from weaver.kernels.dispatch import use_kernel
from weaver.models.fused_layer import FusedLayers, LayerWeights, too_large_for_fused
from weaver.options import DEFAULT_OPTIONS, RuntimeOptions
from weaver.speculative.drafter import DFlashDrafter, DrafterContext, DraftOutput


def unsupported_reason(drafter: DFlashDrafter, lm_head: nn.Linear) -> str | None:
    """Why the fused draft cannot run this drafter (None when it can)."""
    cfg = drafter.config
    if any(cfg.layer_window(i) is not None for i in range(len(drafter.layers))):
        return "sliding-window layers"
    if cfg.attention_bias:
        return "projection biases"
    if lm_head.bias is not None or lm_head.weight.dtype != drafter.dtype:
        return "an LM head with a bias or another dtype than the drafter"
    too_large = too_large_for_fused(drafter.layers[0])
    if too_large is not None:
        return too_large
    if any(layer.self_attn.fused_kv is None or layer.mlp.fused is None for layer in drafter.layers):
        return "projections not fused (call DFlashDrafter.fuse_projections first)"
    return None


class FastDrafter(FusedLayers):
    """Callable `(ctx, root [B], embed_tokens, lm_head) -> DraftOutput`, as `DFlashDrafter.draft`."""

    def __init__(self, drafter: DFlashDrafter, lm_head: nn.Linear) -> None:
        reason = unsupported_reason(drafter, lm_head)
        if reason is not None:
            raise ValueError(f"fast draft does not support this drafter: {reason}")
        cfg = drafter.config
        super().__init__(cfg.rms_norm_eps, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim)
        self.drafter = drafter
        bk = cfg.block_size
        device = drafter.device
        self.depth = torch.arange(bk, device=device)[None]  # [1, Bk]: node j of the block sits at start + j
        full = torch.ones(bk, bk, dtype=torch.bool, device=device)
        self.visible = [  # [1, Bk, Bk] per layer: which block slots a block row sees (besides the context)
            (torch.tril(full) if cfg.layer_causal(i) else full)[None] for i in range(len(drafter.layers))
        ]

    def weights(self) -> list[LayerWeights]:
        """Every layer's weights (q and k|v apart), read at each call."""
        out = []
        for layer in self.drafter.layers:
            attn, mlp = layer.self_attn, layer.mlp
            out.append(LayerWeights(
                layer.input_layernorm.weight, (attn.q_proj.weight, attn.fused_kv.weight), attn.q_norm.weight,
                attn.k_norm.weight, attn.o_proj.weight, layer.post_attention_layernorm.weight, mlp.fused.weight,
                mlp.down_proj.weight,
            ))  # fmt: skip
        return out

    @torch.compiler.disable  # Triton launches, already few per layer: the stage runs them eagerly (then captured)
    def __call__(
        self, ctx: DrafterContext, root: torch.Tensor, embed_tokens: nn.Embedding, lm_head: nn.Linear
    ) -> DraftOutput:
        d = self.drafter
        b, bk = root.shape[0], d.config.block_size
        x = d.block_embeddings(root, embed_tokens).reshape(b * bk, -1)  # [B Bk, H]
        visible = [v.expand(b, bk, bk) for v in self.visible]
        rows = self.tree_rows(ctx.lengths, self.depth.expand(b, bk), d.rope_inv_freq, visible, x.dtype)
        x, _ = self.run_layers(x, self.weights(), list(zip(ctx.k, ctx.v, strict=True)), rows)
        last = x.view(b, bk, -1)[:, 1:].reshape(b * (bk - 1), -1)  # the MASK rows: a view at batch 1
        logits, hidden = self.head(last, d.norm.weight, d.head_weight(lm_head), rows)
        logits = d.full_vocab(logits.view(b, bk - 1, -1), lm_head.weight.shape[0])
        return DraftOutput(logits=logits, hidden=hidden.view(b, bk - 1, -1))


def fast_drafter(
    drafter: DFlashDrafter, lm_head: nn.Linear, options: RuntimeOptions | None = None
) -> FastDrafter | None:
    """FastDrafter where `options.kernels` runs the Triton kernels on the drafter's tensors (default options:
    on CUDA with triton) and the drafter allows it, else None (the torch draft)."""
    if not use_kernel(options or DEFAULT_OPTIONS, drafter.fc.weight):
        return None
    if unsupported_reason(drafter, lm_head) is not None:
        return None
    return FastDrafter(drafter, lm_head)
