"""Gated DeltaNet token mixer (Qwen3.5 / Qwen3.6 linear-attention layers), DESIGN §4.1.

Chain forward (prefill, decode) advances the committed state in place; tree verify runs the tree conv
and the tree delta rule from the committed state without writing it, stashing (k, delta, G) and the
pre-conv inputs (in this layer's slots of the model's stacked `GDNTreeScratch` when the verify gives one, so
`Decoder.commit` folds every layer at once); `commit` folds the accepted path into this layer's state (no
replay of the layer).
"""

from __future__ import annotations

import torch
from torch import nn

from weaver.kernels import gdn as backend
from weaver.kernels import gemv
from weaver.models.cache import GDNCache
from weaver.models.config import ModelConfig
from weaver.models.norm import GatedRMSNorm
from weaver.models.step import StepInputs
from weaver.ops.gdn import gdn_gates
from weaver.options import RuntimeOptions


class ConvWeight(nn.Module):
    """Holds the depthwise conv weight under HF's name and shape: conv1d.weight [C, 1, W]."""

    def __init__(self, channels: int, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(channels, 1, width))


class GatedDeltaNet(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_k_heads = cfg.linear_num_key_heads
        self.num_v_heads = cfg.linear_num_value_heads
        self.head_k_dim = cfg.linear_key_head_dim
        self.head_v_dim = cfg.linear_value_head_dim
        self.key_dim = self.num_k_heads * self.head_k_dim
        self.value_dim = self.num_v_heads * self.head_v_dim
        conv_dim = cfg.gdn_conv_dim
        self.in_proj_qkv = nn.Linear(cfg.hidden_size, conv_dim, bias=False)
        self.in_proj_z = nn.Linear(cfg.hidden_size, self.value_dim, bias=False)
        self.in_proj_b = nn.Linear(cfg.hidden_size, self.num_v_heads, bias=False)
        self.in_proj_a = nn.Linear(cfg.hidden_size, self.num_v_heads, bias=False)
        self.conv1d = ConvWeight(conv_dim, cfg.linear_conv_kernel_dim)
        self.dt_bias = nn.Parameter(torch.ones(self.num_v_heads))
        self.A_log = nn.Parameter(torch.zeros(self.num_v_heads))
        self.norm = GatedRMSNorm(self.head_v_dim, cfg.rms_norm_eps)
        self.out_proj = nn.Linear(self.value_dim, cfg.hidden_size, bias=False)
        self.fused = None  # set by models.fuse.fuse_projections: one GEMM for qkv, z, b, a

    def forward(
        self,
        x: torch.Tensor,
        cache: GDNCache,
        step: StepInputs,
        norm: gemv.RowNorm | None = None,
        residual: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The mixer's output for x, or for norm(x) where given (the in-projection may take the norm inside), plus
        residual where given (in out_proj's epilogue on the TMA route)."""
        b, t, _ = x.shape
        if self.fused is not None:
            mixed, z, b_raw, a_raw = self.fused(x, step.options, norm)
        else:
            x = x if norm is None else norm(x)
            mixed, z = self.in_proj_qkv(x), self.in_proj_z(x)
            b_raw, a_raw = self.in_proj_b(x), self.in_proj_a(x)
        # mixed: [B, T, C] raw pre-conv inputs
        weight = self.conv1d.weight[:, 0, :]  # [C, W]
        # a verify of the whole model hands each layer its slots of the stacked commit inputs
        slots = step.gdn_scratch.layer(cache.index) if step.is_tree and step.gdn_scratch is not None else None
        if step.is_tree:
            conv_out = backend.tree_conv1d(mixed, weight, step.parents, cache.conv, step.tree_structure, step.options,
                                           x_out=None if slots is None else slots[1])  # fmt: skip
        else:
            conv_out, new_conv = backend.causal_conv1d(mixed, weight, cache.conv)
            cache.conv.copy_(new_conv)
            if t == 1 and backend.fused_decode(step.options, x):  # one kernel from here to out_proj's input
                o = backend.gdn_decode(conv_out, b_raw, a_raw, z, self.A_log, self.dt_bias, self.norm.weight,
                                       self.norm.eps, cache.state, self.num_k_heads)
                return gemv.project(self.out_proj, o, step.options, residual)
        q, k, v = conv_out.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q = q.reshape(b, t, self.num_k_heads, self.head_k_dim)
        k = k.reshape(b, t, self.num_k_heads, self.head_k_dim)
        v = v.reshape(b, t, self.num_v_heads, self.head_v_dim)
        if step.is_tree:  # the gates from a and b inside the tree kernels (no launch of their own)
            aux_out = None if slots is None else slots[0]
            o, aux = backend.gdn_tree(q, k, v, a_raw, b_raw, self.A_log, self.dt_bias, step.parents, cache.state,
                                      step.tree_structure, step.options, aux_out=aux_out)  # fmt: skip
            cache.aux, cache.tree_x = aux, mixed if slots is None else slots[1]
        else:
            g, beta = gdn_gates(a_raw, b_raw, self.A_log, self.dt_bias)
            o, new_state = backend.gdn_chain(q, k, v, g, beta, cache.state, step.options)
            cache.state.copy_(new_state)
        z = z.reshape(b, t, self.num_v_heads, self.head_v_dim)
        o = self.norm(o.to(x.dtype), z)
        return gemv.project(self.out_proj, o.reshape(b, t, self.value_dim), step.options, residual)

    def commit(self, cache: GDNCache, path: torch.Tensor, options: RuntimeOptions) -> None:
        """Fold the accepted path (node ids [B, P], -1 padded) into the state and the conv window."""
        if cache.aux is None or cache.tree_x is None:
            raise RuntimeError("GDN commit called without a preceding tree verify")
        cache.state.copy_(backend.gdn_tree_commit(cache.aux, path, cache.state, options))
        cache.conv.copy_(backend.conv_state_commit(cache.tree_x, path, cache.conv, options))
