"""Softmax attention layer (Llama / Qwen3 / Qwen3.5 gated) over the static K/V cache.

One code path for prefill, decode and tree verify: the new tokens' K/V are written at their slots,
then every query attends to the slots its mask row allows (committed prefix + ancestors-or-self).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from weaver.kernels import gemv
from weaver.kernels.split_attention import attend_tree
from weaver.models.cache import AttentionCache
from weaver.models.config import ModelConfig
from weaver.models.norm import RMSNorm
from weaver.models.rope import apply_rope
from weaver.models.step import StepInputs


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        self.gated = cfg.attn_output_gate
        self.sliding = cfg.layer_types[layer_idx] == "sliding_attention"
        q_out = self.num_heads * self.head_dim * (2 if self.gated else 1)
        kv_out = self.num_kv_heads * self.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, q_out, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(cfg.hidden_size, kv_out, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(cfg.hidden_size, kv_out, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, cfg.hidden_size, bias=cfg.attention_bias)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps, offset=cfg.norm_offset)
            self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps, offset=cfg.norm_offset)
        else:
            self.q_norm = self.k_norm = None
        self.fused = None  # set by models.fuse.fuse_projections: one GEMM for q, k, v

    def forward(
        self,
        x: torch.Tensor,  # [B, T, hidden]
        cache: AttentionCache,
        step: StepInputs,
        rope: tuple[torch.Tensor, torch.Tensor],
        norm: gemv.RowNorm | None = None,  # attend over norm(x): the q/k/v projection may take the norm inside
        residual: torch.Tensor | None = None,  # added to the output (in o_proj's epilogue on the TMA route)
    ) -> torch.Tensor:
        b, t, _ = x.shape
        if self.fused is not None:
            q, k, v = self.fused(x, step.options, norm)
        else:
            x = x if norm is None else norm(x)
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q = q.view(b, t, self.num_heads, -1)
        gate = None
        if self.gated:  # per head: [query | gate]
            q, gate = q.split(self.head_dim, dim=-1)
        k = k.view(b, t, self.num_kv_heads, self.head_dim)
        v = v.view(b, t, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, heads, T, D]
        cos, sin = rope
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        cache.write(step.slots, k, v)
        if not self.sliding:  # the prefix-split kernel on CUDA: reads the committed slots, not the whole cache
            out = attend_tree(q, cache.k, cache.v, step.lengths, step.ancestors, gate, step.options)
            if out is not None:
                return gemv.project(self.o_proj, out, step.options, residual)
        mask = step.window_mask if self.sliding else step.attn_mask
        out = F.scaled_dot_product_attention(  # [B, heads, T, D]; one fused kernel on CUDA when compiled
            q, cache.k, cache.v, attn_mask=mask, enable_gqa=self.num_kv_heads != self.num_heads
        )
        out = out.transpose(1, 2).reshape(b, t, self.num_heads * self.head_dim)
        if gate is not None:
            out = out * torch.sigmoid(gate.reshape(b, t, -1))
        return gemv.project(self.o_proj, out, step.options, residual)
