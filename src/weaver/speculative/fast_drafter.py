"""`DFlashDrafter.draft` in fused Triton launches: the block's Bk rows as the rows of small GEMMs.

`DFlashDrafter.draft` is the reference (torch.compile'd on GPU it is ~55 kernels for a 3-layer drafter at
Bk = 16). Here, per layer: (input norm + q) and (input norm + k|v) into one q|k|v buffer, (qk-norm + RoPE +
K/V write at the block's slots + block attention over context + block: one launch, as in the fast verify;
two with WEAVER_ROPE_ATTENTION=0), (o + residual), (post norm +
gate/up + SiLU*up), (down + residual); then one launch for the final norm + LM head of rows 1..Bk-1, which
also hands out the normed hidden. The block is a "tree" to the verify kernels: node j at depth j (position
start + j, slot start + j), every row sees the whole context, and inside the block every node
(bidirectional layers) or the nodes before it (causal layers).

On CUDA by default for drafters the kernels cover (`unsupported_reason`); WEAVER_FAST_DRAFT=0 keeps the
torch path. Tests: tests/spec/test_fast_drafter.py (interpreter on CPU, compiled with WEAVER_TRITON_FULL=1).
"""

from __future__ import annotations

import os
from functools import partial

import torch
from torch import nn

from weaver.models.fast_verify import ROPE_ATTENTION_MAX_NODES, rope_in_attention, tree_attend
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
    if any(layer.self_attn.fused_kv is None or layer.mlp.fused is None for layer in drafter.layers):
        return "projections not fused (call DFlashDrafter.fuse_projections first)"
    return None


class FastDrafter:
    """Callable `(ctx, root [B], embed_tokens, lm_head) -> DraftOutput`, as `DFlashDrafter.draft`."""

    def __init__(self, drafter: DFlashDrafter, lm_head: nn.Linear) -> None:
        reason = unsupported_reason(drafter, lm_head)
        if reason is not None:
            raise ValueError(f"fast draft does not support this drafter: {reason}")
        from weaver.kernels import triton as kernels  # here: the spec layer must load without triton

        self.kernels, self.drafter = kernels, drafter
        cfg = drafter.config
        self.eps = cfg.rms_norm_eps
        self.num_heads, self.num_kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        self.rope_attention = rope_in_attention()  # as the fast verify: RoPE + K/V write inside the attention
        bk = cfg.block_size
        device = drafter.device
        self.depth = torch.arange(bk, device=device)[None]  # [1, Bk]: node j of the block sits at start + j
        full = torch.ones(bk, bk, dtype=torch.bool, device=device)
        self.visible = [  # [1, Bk, Bk] per layer: which block slots a block row sees (besides the context)
            (torch.tril(full) if cfg.layer_causal(i) else full)[None] for i in range(len(drafter.layers))
        ]

    @torch.compiler.disable  # Triton launches, already few per layer: the stage runs them eagerly (then captured)
    def __call__(
        self, ctx: DrafterContext, root: torch.Tensor, embed_tokens: nn.Embedding, lm_head: nn.Linear
    ) -> DraftOutput:
        k, d = self.kernels, self.drafter
        b, bk = root.shape[0], d.config.block_size
        h, hkv, hd = self.num_heads, self.num_kv_heads, self.head_dim
        gemm = partial(k.fused_gemv, eps=self.eps, row_tiles=True)
        depth = self.depth.expand(b, bk)
        x = d.block_embeddings(root, embed_tokens).reshape(b * bk, -1)  # [B Bk, H]
        qkv = torch.empty(b * bk, (h + 2 * hkv) * hd, device=x.device, dtype=x.dtype)
        rope = None
        if self.rope_attention and bk <= ROPE_ATTENTION_MAX_NODES:
            rope = k.rope_table(ctx.lengths, depth, d.rope_inv_freq, x.dtype)
        for i, (layer, k_cache, v_cache) in enumerate(zip(d.layers, ctx.k, ctx.v, strict=True)):
            attn, mlp, ln = layer.self_attn, layer.mlp, layer.input_layernorm.weight
            gemm(x, attn.q_proj.weight, norm_weight=ln, out=qkv[:, : h * hd])
            gemm(x, attn.fused_kv.weight, norm_weight=ln, out=qkv[:, h * hd :])
            o = tree_attend(
                k, rope, qkv, k_cache, v_cache, ctx.lengths, depth, self.visible[i].expand(b, bk, bk),
                d.rope_inv_freq, h, hkv, attn.q_norm.weight, attn.k_norm.weight, self.eps,
            )
            x = gemm(o, attn.o_proj.weight, residual=x)
            act = gemm(x, mlp.fused.weight, norm_weight=layer.post_attention_layernorm.weight, swiglu=True)
            x = gemm(act, mlp.down_proj.weight, residual=x)
        rows = x.view(b, bk, -1)[:, 1:].reshape(b * (bk - 1), -1)  # the MASK rows: a view at batch 1
        hidden = torch.empty_like(rows)  # written by the LM-head launch: its RMSNorm prologue is the final norm
        logits = gemm(rows, lm_head.weight, norm_weight=d.norm.weight, out_dtype=torch.float32, norm_out=hidden)
        return DraftOutput(logits=logits.view(b, bk - 1, -1), hidden=hidden.view(b, bk - 1, -1))


def fast_drafter(drafter: DFlashDrafter, lm_head: nn.Linear) -> FastDrafter | None:
    """FastDrafter on CUDA when the drafter allows (WEAVER_FAST_DRAFT=0: the torch draft), else None."""
    if drafter.device.type != "cuda" or os.environ.get("WEAVER_FAST_DRAFT", "1") == "0":
        return None
    if unsupported_reason(drafter, lm_head) is not None:
        return None
    return FastDrafter(drafter, lm_head)
