"""The DFlash block drafter (DESIGN §6; z-lab `DFlashDraftModel`, arXiv 2602.06036).

A few Qwen3 decoder layers at the target's hidden size H, with no embedding or LM head of their own: the
target's `embed_tokens` and `lm_head` are passed in (frozen). Letters as in DESIGN §1; Bk = block size.

Context. For each committed token the target's hidden states at `target_layer_ids` (outputs of those
decoder layers, HF `hidden_states[i + 1]`) are concatenated, `c = hidden_norm(fc(features))` [H]. In every
drafter layer the token contributes K = rope(k_norm(k_proj(c))), V = v_proj(c) at its absolute position
(no input norm, no residual stream: the same c feeds every layer). These depend only on the committed
token, so they are cached once per token: `append_context`.

Block. `[root, MASK x (Bk-1)]` at positions start..start+Bk-1, start = context tokens held (the root is the
first token the target has not processed). Queries come only from the block; keys are context + block.
Full-attention layers: the whole context, bidirectional inside the block. Sliding-attention layers (z-lab's
PyPI code, Qwen3.6 drafters): a query at position p sees key position s iff s <= p and p - s < window
(causal inside the block). The config's `is_causal`, when set, overrides causality for every layer (a
non-causal window is then two-sided: |p - s| < window). Output row k = 1..Bk-1 is the marginal of the token
at start + k: `logits = lm_head(norm(h_k))`.

Cache layout. Per layer K/V [B, Hkv, S, D] with S = capacity + Bk; slot s holds position s. `draft` writes
the block's K/V at slots start..start+Bk-1 (scratch past the context, overwritten by the next append) and
attends over the whole buffer with a mask, so nothing is concatenated and every shape is static.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

from weaver.kernels.slots import write_slots
from weaver.kernels.split_attention import attend_tree
from weaver.models.checkpoint import stored_dtype, write_checkpoint
from weaver.models.config import ModelConfig
from weaver.models.fuse import FusedLinear, fuse_projections
from weaver.models.mlp import MLP
from weaver.models.norm import RMSNorm
from weaver.models.rope import apply_rope, rope_cos_sin, rope_inv_freq
from weaver.ops.decode import rms_norm_ref
from weaver.options import RuntimeOptions
from weaver.speculative import drafter_io
from weaver.speculative.draft_vocab import check_token_ids, expand_logits
from weaver.speculative.drafter_io import DrafterConfig, build_target_layer_ids

__all__ = ["DFlashDrafter", "DraftOutput", "DrafterConfig", "DrafterContext", "build_target_layer_ids"]


@dataclass
class DrafterContext:
    """Cached context K/V of every drafter layer plus the context length of each batch row."""

    # every layer's K and V as one [B, L, Hkv, S, D] tensor each, S = capacity + block_size; slot s holds
    # position s. `append_context` writes all layers with one scatter per tensor
    stacked: tuple[torch.Tensor, torch.Tensor]
    lengths: torch.Tensor  # [B] long: context tokens held = position of the next root
    capacity: int  # context tokens a row can hold; S adds block_size slots so a full row still fits its block

    @property
    def k(self) -> list[torch.Tensor]:
        """Per layer [B, Hkv, S, D] (views of `stacked[0]`, taken fresh: autograd-safe after in-place writes)."""
        return [self.stacked[0][:, i] for i in range(self.stacked[0].shape[1])]

    @property
    def v(self) -> list[torch.Tensor]:
        """Per layer [B, Hkv, S, D] (views of `stacked[1]`)."""
        return [self.stacked[1][:, i] for i in range(self.stacked[1].shape[1])]

    @property
    def batch_size(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def num_slots(self) -> int:
        return int(self.stacked[0].shape[3])

    def reset(self) -> None:
        """Forget the context; buffers keep their addresses (stale slots are masked by `lengths`)."""
        self.lengths.zero_()


@dataclass
class DraftOutput:
    logits: torch.Tensor  # [B, Bk-1, V] float32: row k-1 = marginal of the token at root position + k
    hidden: torch.Tensor  # [B, Bk-1, H] final-normed drafter hidden of block rows 1..Bk-1


class DrafterAttention(nn.Module):
    """Qwen3 attention whose keys are the cached context plus the block; queries only from the block."""

    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        q_out, kv_out = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, q_out, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(cfg.hidden_size, kv_out, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(cfg.hidden_size, kv_out, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(q_out, cfg.hidden_size, bias=cfg.attention_bias)
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.fused_kv: FusedLinear | None = None  # set by DFlashDrafter.fuse_projections: k and v in one GEMM

    def key_value(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V [B, Hkv, T, D] of rows x [B, T, H] (context features or normed block rows)."""
        b, t, _ = x.shape
        k, v = self.fused_kv(x) if self.fused_kv is not None else (self.k_proj(x), self.v_proj(x))
        k = self.k_norm(k.view(b, t, self.num_kv_heads, self.head_dim)).transpose(1, 2)
        v = v.view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        return apply_rope(k, *rope), v

    def forward(
        self,
        x: torch.Tensor,  # [B, Bk, H] block rows after input_layernorm
        k_cache: torch.Tensor,  # [B, Hkv, S, D]
        v_cache: torch.Tensor,  # [B, Hkv, S, D]
        slots: torch.Tensor,  # [B, Bk] block slots (= positions)
        mask: torch.Tensor,  # [B, 1, Bk, S] bool
        rope: tuple[torch.Tensor, torch.Tensor],
        block: BlockKernel | None = None,  # the prefix-split kernel's view of the mask, where it may run
    ) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, t, self.num_heads, self.head_dim)).transpose(1, 2)
        q = apply_rope(q, *rope)
        k, v = self.key_value(x, rope)
        write_slots(k_cache, v_cache, slots, k, v)
        if block is not None:  # reads the context's slots, not the whole buffer (SDPA's mask covers every slot)
            out = attend_tree(q, k_cache, v_cache, block.lengths, block.anc, None, block.options, block.window)
            if out is not None:
                return self.o_proj(out)
        out = F.scaled_dot_product_attention(  # [B, heads, Bk, D]
            q, k_cache, v_cache, attn_mask=mask, enable_gqa=self.num_kv_heads != self.num_heads
        )
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.num_heads * self.head_dim))


class DrafterLayer(nn.Module):
    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        self.self_attn = DrafterAttention(cfg)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(
        self,
        x: torch.Tensor,  # [B, Bk, H]
        k_cache: torch.Tensor,  # [B, Hkv, S, D]
        v_cache: torch.Tensor,  # [B, Hkv, S, D]
        slots: torch.Tensor,  # [B, Bk]
        mask: torch.Tensor,  # [B, 1, Bk, S]
        rope: tuple[torch.Tensor, torch.Tensor],
        block: BlockKernel | None = None,
    ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), k_cache, v_cache, slots, mask, rope, block)
        return x + self.mlp(self.post_attention_layernorm(x))


class BlockKernel(NamedTuple):
    """`block_mask` as the prefix-split attention kernel reads it: the context lengths, the block's own mask
    (all ones, or the lower triangle for a causal layer) and the window (0: none)."""

    lengths: torch.Tensor  # [B]
    anc: torch.Tensor  # [B, Bk, Bk] bool
    window: int
    options: RuntimeOptions


def block_kernel(
    lengths: torch.Tensor, block_size: int, causal: bool, window: int | None, options: RuntimeOptions
) -> BlockKernel:
    """The kernel's form of `block_mask(lengths, block_size, S, causal, window)` (a two-sided window only
    changes the block's own slots when it is shorter than the block, where `attend_tree` declines)."""
    anc = torch.ones(block_size, block_size, dtype=torch.bool, device=lengths.device)
    anc = (anc.tril() if causal else anc).expand(lengths.shape[0], block_size, block_size)
    return BlockKernel(lengths, anc, window or 0, options)


def block_mask(
    lengths: torch.Tensor, block_size: int, num_slots: int, causal: bool, window: int | None
) -> torch.Tensor:
    """[B, 1, Bk, S] bool: block query i (position p = length + i) may see slot s (position s)."""
    device = lengths.device
    pos = lengths[:, None, None] + torch.arange(block_size, device=device)[None, :, None]  # [B, Bk, 1]
    slot = torch.arange(num_slots, device=device)[None, None, :]  # [1, 1, S]
    visible = slot < lengths[:, None, None] + block_size  # the context and the block, not stale slots
    if causal:
        visible = visible & (slot <= pos)
    if window is not None:
        visible = visible & (pos - slot < window)
        if not causal:
            visible = visible & (slot - pos < window)
    return visible[:, None]


class DFlashDrafter(nn.Module):
    """z-lab's DFlashDraftModel with a static context cache; parameter names equal z-lab's."""

    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        self.config = cfg
        self.layers = nn.ModuleList(DrafterLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.fc = nn.Linear(cfg.num_target_features * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if cfg.mask_token_id is None:
            self.mask_embedding = nn.Parameter(torch.zeros(cfg.hidden_size))
        else:
            self.mask_embedding = None
        self.register_buffer("rope_inv_freq", rope_inv_freq(cfg.rope_config()), persistent=False)
        self.context_kv: FusedLinear | None = None  # set by fuse_projections: every layer's k, v in one GEMM
        self.context_k_norm: torch.Tensor | None = None  # set by fuse_projections: [L, 1, D] k-norm weights
        # set by restrict_vocab (draft_vocab module): the drafted token ids [N] and their rows of the target's head
        self.register_buffer("vocab_ids", None, persistent=False)
        self.register_buffer("vocab_head", None, persistent=False)

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> DFlashDrafter:
        """After .to()/.cuda()/.half(): RoPE frequencies stay float32, recomputed on the new device.

        Fused projections are dropped (the parameters moved one by one; call fuse_projections again)."""
        super()._apply(fn, recurse)
        self.rope_inv_freq = rope_inv_freq(self.config.rope_config()).to(self.device)
        self.context_kv = self.context_k_norm = None
        for layer in self.layers:
            layer.self_attn.fused_kv = layer.mlp.fused = None
        return self

    def fuse_projections(self) -> DFlashDrafter:
        """For inference: every layer's k/v projections in one weight (the context pass is one GEMM; a
        layer's block k, v one more) and gate/up in one; the parameters become views of the fused weights
        (not trainable). Moving the drafter afterwards drops the fusion."""
        attns = [layer.self_attn for layer in self.layers]
        self.context_kv = FusedLinear([lin for a in attns for lin in (a.k_proj, a.v_proj)])
        self.context_k_norm = torch.stack([a.k_norm.weight.data for a in attns])[:, None]  # [L, 1, D]
        for i, attn in enumerate(attns):
            attn.fused_kv = self.context_kv.part(2 * i, 2)
            attn.k_norm.weight = nn.Parameter(self.context_k_norm[i, 0], requires_grad=False)
        fuse_projections(self)  # the MLPs' gate/up
        return self

    def restrict_vocab(self, token_ids: torch.Tensor | None, lm_head: nn.Linear) -> DFlashDrafter:
        """Draft over `token_ids` only (None: the whole vocabulary again). The head's rows are copied once here,
        so a draft reads N rows, not V (`weaver.speculative.draft_vocab`); call it after moving the drafter."""
        if token_ids is None:
            self.vocab_ids = self.vocab_head = None
            return self
        if lm_head.bias is not None:
            raise ValueError("a draft vocabulary needs a bias-free LM head")
        ids = check_token_ids(token_ids, lm_head.out_features, "draft vocabulary").to(lm_head.weight.device)
        self.vocab_ids = ids
        self.vocab_head = lm_head.weight.detach().index_select(0, ids).contiguous()
        return self

    def head_weight(self, lm_head: nn.Linear) -> torch.Tensor:
        """The rows a draft scores: the draft vocabulary's, else the target's whole head."""
        return lm_head.weight if self.vocab_head is None else self.vocab_head

    def full_vocab(self, logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """Draft logits over the draft vocabulary -> over the whole vocabulary (-inf outside); else unchanged."""
        return logits if self.vocab_ids is None else expand_logits(logits, self.vocab_ids, vocab_size)

    @property
    def device(self) -> torch.device:
        return self.fc.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    # ---------------------------------------------------------------- construction and checkpoints

    @classmethod
    def random(
        cls,
        target_cfg: ModelConfig,
        num_layers: int = 1,
        num_target_features: int = 5,
        block_size: int = 16,
        seed: int = 0,
        mask_token_id: int | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> DFlashDrafter:
        """A drafter shaped for `target_cfg` with deterministic weights drawn on the CPU (std 0.02, norms 1).

        Heads, head_dim, MLP width, RoPE theta/scaling and vocabulary are the target's; the number of
        target features is capped by the target's depth (see `build_target_layer_ids` for tiny targets).
        """
        n = min(num_target_features, target_cfg.num_hidden_layers)
        cfg = DrafterConfig(
            hidden_size=target_cfg.hidden_size,
            num_hidden_layers=num_layers,
            num_attention_heads=target_cfg.num_attention_heads,
            num_key_value_heads=target_cfg.num_key_value_heads,
            head_dim=target_cfg.head_dim,
            intermediate_size=target_cfg.intermediate_size,
            rms_norm_eps=target_cfg.rms_norm_eps,
            rope_theta=target_cfg.rope_theta,
            max_position_embeddings=target_cfg.max_position_embeddings,
            block_size=block_size,
            target_layer_ids=build_target_layer_ids(target_cfg.num_hidden_layers, n),
            mask_token_id=mask_token_id,
            vocab_size=target_cfg.vocab_size,
            num_target_layers=target_cfg.num_hidden_layers,
            rope_scaling=target_cfg.rope_scaling,
        )
        drafter = cls(cfg).init_random_weights(seed)
        return drafter.to(device=device, dtype=dtype).eval()

    @torch.no_grad()
    def init_random_weights(self, seed: int = 0) -> DFlashDrafter:
        """Normal(0, 0.02) matrices and mask embedding, unit norms, zero biases; drawn on the CPU."""
        gen = torch.Generator(device="cpu").manual_seed(seed)
        for name, param in self.named_parameters():
            if param.ndim > 1 or name == "mask_embedding":
                param.copy_(torch.empty(param.shape).normal_(0.0, 0.02, generator=gen))
            elif name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.zero_()
        return self

    @classmethod
    def from_pretrained(
        cls, path: str | Path, device: torch.device | str = "cpu", dtype: torch.dtype | None = None
    ) -> DFlashDrafter:
        """Load a z-lab-format directory (config.json + safetensors); dtype None keeps the stored one."""
        cfg = DrafterConfig.from_hf(drafter_io.read_hf_config(path))
        tensors = drafter_io.read_tensors(path)
        with torch.device("meta"):
            drafter = cls(cfg)
        drafter = drafter.to_empty(device=device).to(dtype or stored_dtype(tensors))
        drafter_io.copy_tensors_into(drafter, tensors, path)
        return drafter.eval()

    def save_pretrained(self, path: str | Path, max_shard_bytes: int | None = None) -> None:
        """Write config.json (z-lab fields, plus `dtype`) and model.safetensors (z-lab names; sharded with an
        index past `max_shard_bytes`)."""
        hf = self.config.to_hf()
        hf["dtype"] = str(self.dtype).removeprefix("torch.")
        write_checkpoint(path, hf, self, max_shard_bytes)

    # ---------------------------------------------------------------- context cache and drafting

    def new_context(self, batch_size: int, capacity: int) -> DrafterContext:
        """Preallocated, empty context for `capacity` tokens per row (plus Bk scratch slots for the block).

        Nothing checks the lengths on the device (that would sync): the caller keeps every row <= capacity.
        """
        cfg = self.config
        shape = (batch_size, len(self.layers), cfg.num_key_value_heads, capacity + cfg.block_size, cfg.head_dim)
        stacked = tuple(torch.zeros(shape, device=self.device, dtype=self.dtype) for _ in range(2))
        lengths = torch.zeros(batch_size, dtype=torch.long, device=self.device)
        return DrafterContext(stacked=stacked, lengths=lengths, capacity=capacity)

    def fuse_features(self, features: torch.Tensor) -> torch.Tensor:
        """Target features [B, T, n*H] -> one context vector per token [B, T, H]."""
        return self.hidden_norm(self.fc(features.to(self.dtype)))

    def append_context(self, ctx: DrafterContext, features: torch.Tensor, counts: torch.Tensor | None = None) -> None:
        """Append newly committed tokens: features [B, T, n*H] in order; row b takes its first counts[b] (default T).

        Token j of row b lands at position ctx.lengths[b] + j. Rows' unused entries (j >= counts[b]) are
        written to the last scratch slot, which no context query reads. No host sync: graph-capturable.
        """
        t = features.shape[1]
        if t == 0:
            return
        j = torch.arange(t, device=ctx.lengths.device)
        positions = ctx.lengths[:, None] + j[None, :]  # [B, T]
        slots = positions
        if counts is not None:
            slots = torch.where(j[None, :] < counts[:, None], positions, ctx.num_slots - 1)
        c = self.fuse_features(features)  # [B, T, H]
        rope = rope_cos_sin(positions, self.rope_inv_freq, c.dtype)
        write_slots(*ctx.stacked, slots, *self.context_key_value(c, rope))  # [B, L, Hkv, T, D]: all layers at once
        ctx.lengths.add_(t if counts is None else counts.to(ctx.lengths.dtype))

    def context_key_value(self, c: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """Every layer's `key_value` of context vectors c [B, T, H] at once: K, V [B, L, Hkv, T, D].

        One GEMM (the fused weight, else the layers' weights concatenated here), one k-norm, one RoPE."""
        cfg, num_layers = self.config, len(self.layers)
        attns = [layer.self_attn for layer in self.layers]
        fused = self.context_kv or FusedLinear([lin for a in attns for lin in (a.k_proj, a.v_proj)], share=False)
        b, t, _ = c.shape
        kv = fused.linear(c).view(b, t, num_layers, 2, cfg.num_key_value_heads, cfg.head_dim)
        k_norm = self.context_k_norm
        if k_norm is None:
            k_norm = torch.stack([a.k_norm.weight for a in attns])[:, None]  # [L, 1, D]
        k = rms_norm_ref(kv[:, :, :, 0], k_norm, cfg.rms_norm_eps).flatten(2, 3).transpose(1, 2)  # [B, L Hkv, T, D]
        v = kv[:, :, :, 1].permute(0, 2, 3, 1, 4)  # [B, L, Hkv, T, D]
        return apply_rope(k, *rope).unflatten(1, (num_layers, cfg.num_key_value_heads)), v

    def block_embeddings(self, root: torch.Tensor, embed_tokens: nn.Embedding) -> torch.Tensor:
        """[B, Bk, H]: embed(root), then the MASK row Bk-1 times (the token's embedding or the learned one)."""
        bk = self.config.block_size
        if self.mask_embedding is None:
            mask_ids = torch.full((root.shape[0], bk - 1), self.config.mask_token_id, device=root.device)
            ids = torch.cat([root[:, None], mask_ids.to(root.dtype)], dim=1)
            return embed_tokens(ids).to(self.dtype)
        head = embed_tokens(root[:, None]).to(self.dtype)
        return torch.cat([head, self.mask_embedding.expand(root.shape[0], bk - 1, -1)], dim=1)

    def draft(
        self, ctx: DrafterContext, root: torch.Tensor, embed_tokens: nn.Embedding, lm_head: nn.Linear,
        options: RuntimeOptions | None = None,
    ) -> DraftOutput:
        """One drafter pass over `[root, MASK x (Bk-1)]` (root [B]) after each row's context.

        Writes the block's K/V into the scratch slots after the context (the context itself is untouched).
        With `options`, the attention runs the prefix-split kernel where it may (`weaver.kernels.split_attention`).
        """
        cfg = self.config
        bk, slots_total = cfg.block_size, ctx.num_slots
        slots = ctx.lengths[:, None] + torch.arange(bk, device=ctx.lengths.device)[None, :]  # [B, Bk] = positions
        x = self.block_embeddings(root, embed_tokens)  # [B, Bk, H]
        rope = rope_cos_sin(slots, self.rope_inv_freq, x.dtype)
        masks: dict[tuple[bool, int | None], torch.Tensor] = {}
        blocks: dict[tuple[bool, int | None], BlockKernel] = {}
        for i, layer in enumerate(self.layers):
            kind = (cfg.layer_causal(i), cfg.layer_window(i))
            if kind not in masks:
                masks[kind] = block_mask(ctx.lengths, bk, slots_total, *kind)
                if options is not None:
                    blocks[kind] = block_kernel(ctx.lengths, bk, *kind, options)
            x = layer(x, ctx.k[i], ctx.v[i], slots, masks[kind], rope, blocks.get(kind))
        hidden = self.norm(x[:, 1:])  # [B, Bk-1, H]
        if self.vocab_head is None:
            logits = lm_head(hidden.to(lm_head.weight.dtype)).float()
        else:
            logits = F.linear(hidden.to(self.vocab_head.dtype), self.vocab_head).float()
        return DraftOutput(logits=self.full_vocab(logits, lm_head.out_features), hidden=hidden)
