"""Weaver: the small autoregressive adapter that re-scores the drafter's top-K pool along tree paths (DESIGN §7).

Per round and batch row the inputs are the target's final-norm hidden h_tgt at the position that
produced the root, the drafter's hidden states h_1..h_D and, per depth d, the top-K token ids of the
drafter's logits with their raw logits (the prior). With E the target's embedding table and W_lm its
LM head (`bind`):

    prefix rows   u_0 = proposal_in(output_norm(h_tgt))
                  u_d = proposal_in(output_norm(h_d)) (+ pos_emb[d-1])                d = 1..D
    tree node     e_n = token_in(embed_norm(E[x_n])) (+ pos_emb[min(t_n, max_depth-1)])   t_n = depth of n
    block         one (or `num_layers`) pre-norm transformer block(s) of width d_rank; the prefix rows
                  attend causally among themselves, a node attends to every prefix row, its ancestors
                  (root included) and itself; only the K/V of prefix rows and nodes are kept
    query         q_n = lm_head_query_in(out_norm(y_n))                           [Ht]
    pool score    logit_n(c) = prior_{t_n+1}(c) + <W_lm[c], q_n> = prior + R[c] . out_norm(y_n)
                  with R = W_lm @ lm_head_query_in.weight  [V, d_rank], precomputed once by `bind`;
                  a step gathers the K pool rows of R, never projects onto the full vocabulary; candidate
                  ids < 0 (padding) score -inf
    p_weaver(c | path to n) = softmax of logit_n over the K candidates of depth t_n + 1.

Two variants (`config.positions`, `config.mlp`; `weaver.speculative.weaver_layers` has both blocks):

- "learned" (the older one, trymirai/sglang's `dflash_tfm.py`): `pos_emb` is a learned table [max_depth,
  d_rank] added to the input rows; row j is the position of pool j+1 (depth j+1, 1-based). The drafter row h_d
  adds row d-1 and a node at depth t adds row t, the row of the pool its query scores (depth t+1): the root
  (t = 0) shares a position with h_1, a depth-1 node with h_2, and so on; u_0 has none.
- "rope" (the authors' released one, trymirai/weaver, with mlp="swiglu"; `RELEASED`): no pos_emb; RoPE on q and
  k in every block (rotate-half over the whole head_dim, base rope_base): prefix row j at position j (u_0 at 0,
  h_d at d) and a node at depth t at position min(t, D - 1) + 1, D = the round's drafter rows. So a node again
  shares h_{t+1}'s position, clamped by the round's D (not by max_depth as pos_emb is).

`from_released` reads the authors' `.pth` (either variant, told apart by its keys; `weaver.speculative.weaver_io`);
`from_pretrained` / `save_pretrained` are weaver's own directory format. Parameter names are the authors'.

Two paths share the weights: `begin_round` + `step` grow a tree (static shapes, one batched call per
expansion of w nodes; no autograd) and `forward` scores a teacher-forced chain (training, tests).

Candidate table. A tree node's input row e_n depends only on its token and depth, and a node at depth t+1
is always a candidate of pool t: so `begin_round(..., root=)` computes e_n and the first block's q/k/v for
the root and all D*K pool candidates at once (two GEMMs over D*K rows, off the step's critical path; with RoPE
q and k are stored rotated at the candidate's position), and a step given each node's candidate index (`cand`:
0 = the root, 1 + t*K + j = pool t's j-th candidate) gathers them instead of running embedding, norms and two
GEMMs per call; `step_top` hands back the children's candidate indices. The table is built where the adapter's
kernels run (`use_kernel(options, ...)` with the options given to `bind`; on a CPU the D*K rows cost more than
the steps they save), given `root` and within CANDIDATE_TABLE_MAX_BYTES; otherwise the step computes the rows.
Since e_n (without its position) and, with RoPE, the first block's unrotated q/k/v depend on the token alone,
`bind` computes them once for the whole vocabulary (`vocab_x`, `vocab_qkv`, within VOCAB_TABLE_MAX_BYTES). With
RoPE the round then builds no table at all: the vocabulary's rows are the table, a step reads its nodes' rows by
token and rotates their q / k at the nodes' positions (`WeaverRound.cand_rope`); the older variant's rows carry
pos_emb before the norm, so its table is a gather plus the first block's GEMM over the D*K rows.

Kernels. Where `use_kernel(options, ...)` says so, a tree step's attention, block output and scoring tail are
fused Triton launches (`weaver.kernels.node_attention`, `adapter_finish`, `pool_top`); elsewhere their torch
references in `weaver.ops` run. `kernels="torch"` gives the references everywhere. Both variants run in the
kernels: the attention takes q/k already rotated (from the table, or rotated by `apply_rope` for blocks after
the first), and the finish kernel has both MLP forms.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from weaver.kernels.adapter_finish import fused_finish
from weaver.kernels.dispatch import use_kernel
from weaver.kernels.node_attention import attend_nodes
from weaver.kernels.pool_top import fused_pool_top, fused_pool_top_push
from weaver.models.checkpoint import (
    WEIGHTS_NAME,
    check_complete,
    checkpoint_dir,
    copy_tensors,
    read_tensors,
    stored_dtype,
    write_checkpoint,
)
from weaver.models.config import ModelConfig
from weaver.ops.node_attention import masked_attention
from weaver.ops.pool_top import score_pool
from weaver.ops.weaver_frontier import node_inputs, node_visibility
from weaver.options import DEFAULT_OPTIONS, RuntimeOptions
from weaver.speculative.weaver_io import MODEL_TYPE, read_pretrained_config
from weaver.speculative.weaver_layers import RELEASED, Rope, WeaverBlock, WeaverConfig, WeaverNorm, rope_table
from weaver.speculative.weaver_round import WeaverRound

__all__ = ["RELEASED", "WeaverAdapter", "WeaverBlock", "WeaverConfig", "WeaverNorm", "WeaverRound"]

CANDIDATE_TABLE_MAX_BYTES = 1 << 28  # per round: B (1 + D K) rows of e_n and q/k/v (SmolLM2 shapes: 31 MB a row)
VOCAB_TABLE_MAX_BYTES = 8 << 30  # the vocabulary-wide rows the candidate table gathers (27B, paper shape: 4.1 GB)


class WeaverAdapter(nn.Module):
    """The Weaver adapter (see the module docstring). Call `bind` with the target's E and W_lm before use."""

    def __init__(self, config: WeaverConfig) -> None:
        super().__init__()
        self.config = cfg = config
        self.options = DEFAULT_OPTIONS  # how the tree steps run (module docstring); set by `bind`
        ht, d = cfg.target_hidden, cfg.d_rank
        self.output_norm = WeaverNorm(ht, cfg.rms_norm_eps, cfg.norm_bias)  # on h_tgt and h_1..h_D
        self.embed_norm = WeaverNorm(ht, cfg.rms_norm_eps, cfg.norm_bias)  # on target embedding rows
        self.proposal_in = nn.Linear(ht, d)
        self.token_in = nn.Linear(ht, d)
        if cfg.positions == "learned":
            self.pos_emb = nn.Parameter(torch.zeros(cfg.max_depth, d))
        else:  # cos / sin rows of positions 0..max_depth (not saved; cast with the module like its weights)
            cos, sin = rope_table(cfg)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        self.blocks = nn.ModuleList(WeaverBlock(cfg) for _ in range(cfg.num_layers))
        self.out_norm = WeaverNorm(d, cfg.rms_norm_eps, cfg.norm_bias)
        self.lm_head_query_in = nn.Linear(d, ht, bias=False)
        self._embed: torch.Tensor | None = None  # [V, Ht] the target's embedding table (a reference)
        self.register_buffer("residual_lm_head", None, persistent=False)  # R [V, d_rank], set by bind
        # every token's e_n without position and the first block's unrotated q/k/v, [V, d_rank] and [V, 3 d_rank]:
        # set by bind where the candidate table is built (module docstring), so a round gathers its rows
        self.register_buffer("vocab_x", None, persistent=False)
        self.register_buffer("vocab_qkv", None, persistent=False)

    # ------------------------------------------------------------ construction
    @classmethod
    @torch.no_grad()
    def random(
        cls,
        target_cfg: ModelConfig,
        d_rank: int = 512,
        num_heads: int = 8,
        mlp_dim: int = 1024,
        max_depth: int = 15,
        pool_size: int = 512,
        seed: int = 0,
        *,
        norm_bias: bool = True,
        num_layers: int = 1,
        positions: str = "learned",
        mlp: str = "gelu",
        rope_base: float = 10000.0,
    ) -> WeaverAdapter:
        """Deterministic random weights drawn on the CPU (same adapter on every device), fp32, on the CPU.

        Matrices ~ N(0, 1/fan_in), so activations stay O(1); norms 1 + N(0, 0.1^2), biases and pos_emb
        ~ N(0, 0.1^2) / N(0, 1): every part of the network changes the scores. `**RELEASED` gives the
        released variant (RoPE, SwiGLU).
        """
        cfg = WeaverConfig(
            target_hidden=target_cfg.hidden_size,
            d_rank=d_rank,
            num_heads=num_heads,
            mlp_dim=mlp_dim,
            max_depth=max_depth,
            pool_size=pool_size,
            norm_bias=norm_bias,
            rms_norm_eps=target_cfg.rms_norm_eps,
            num_layers=num_layers,
            positions=positions,
            mlp=mlp,
            rope_base=rope_base,
        )
        with torch.device("cpu"):
            model = cls(cfg)
        return model.init_random_weights(seed).eval()

    @torch.no_grad()
    def init_random_weights(self, seed: int = 0) -> WeaverAdapter:
        """`random`'s weights for this adapter's config, drawn on the CPU from `seed` (then copied in place)."""
        gen = torch.Generator().manual_seed(seed)
        norm_weights = {f"{n}.weight" for n, m in self.named_modules() if isinstance(m, WeaverNorm)}
        for name, param in self.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            if name == "pos_emb":
                param.copy_(noise)
            elif param.ndim == 2:  # [out, in]
                param.copy_(noise / math.sqrt(param.shape[1]))
            elif name in norm_weights:
                param.copy_(1.0 + 0.1 * noise)
            else:  # biases (linears and norms)
                param.copy_(0.1 * noise)
        return self

    @classmethod
    def from_pretrained(
        cls, path: str | Path, device: torch.device | str = "cpu", dtype: torch.dtype | None = None
    ) -> WeaverAdapter:
        """Load `save_pretrained`'s directory (config.json + model.safetensors); problems -> CheckpointError."""
        path = checkpoint_dir(path, "Weaver checkpoint")
        cfg = read_pretrained_config(path)
        tensors = read_tensors(path, "Weaver checkpoint")
        with torch.device("cpu"):
            model = cls(cfg)
        params = dict(model.named_parameters())
        check_complete(params, copy_tensors(params, tensors, path / WEIGHTS_NAME), path)
        return model.to(device=device, dtype=dtype).eval()

    @classmethod
    def from_released(
        cls,
        source: str | Path | Mapping[str, Any],
        target: ModelConfig | int | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype | None = None,
    ) -> WeaverAdapter:
        """The authors' checkpoint (a `.pth` path, or its loaded {"config", "state_dict"} dict), either variant.

        `target`: the target's config (or its hidden size) the adapter must fit (None: not checked). Weights keep
        the stored dtype unless `dtype` is given. Problems -> CheckpointError (`weaver.speculative.weaver_io`).
        """
        from weaver.speculative.weaver_io import check_keys, read_released

        hidden = target.hidden_size if isinstance(target, ModelConfig) else target
        cfg, state_dict, where = read_released(source, hidden)
        with torch.device("cpu"):
            model = cls(cfg)
        params = dict(model.named_parameters())
        check_keys(set(params), set(state_dict), where)
        copy_tensors(params, state_dict, where)  # shapes checked here
        return model.to(device=device, dtype=dtype or stored_dtype(state_dict)).eval()

    def save_pretrained(self, path: str | Path, max_shard_bytes: int | None = None) -> None:
        """Write config.json and model.safetensors into `path` (created if needed; sharded with an index past
        `max_shard_bytes`, so a grown adapter still fits git's file limit)."""
        write_checkpoint(path, {"model_type": MODEL_TYPE, **asdict(self.config)}, self, max_shard_bytes)

    @torch.no_grad()
    def bind(
        self, embed_weight: torch.Tensor, lm_head_weight: torch.Tensor, *, options: RuntimeOptions = DEFAULT_OPTIONS
    ) -> None:
        """Attach the target's embedding table E [V, Ht] (kept by reference), precompute
        R = W_lm @ lm_head_query_in.weight [V, d_rank] from its LM head W_lm [V, Ht] and keep `options`
        (whether the tree steps run their Triton kernels and build the candidate table).

        Where the candidate table is built (the kernels run), also fill the vocabulary-wide rows it gathers
        (`vocab_x`, `vocab_qkv`; within VOCAB_TABLE_MAX_BYTES). Call again after changing the adapter's or the
        target's weights, or moving the adapter.
        """
        ht = self.config.target_hidden
        for name, t in (("embed_weight", embed_weight), ("lm_head_weight", lm_head_weight)):
            if t.dim() != 2 or t.shape[1] != ht:
                raise ValueError(f"{name} must be [V, target_hidden={ht}], got shape {tuple(t.shape)}")
        if embed_weight.shape[0] != lm_head_weight.shape[0]:
            raise ValueError(
                f"embed_weight has {embed_weight.shape[0]} rows but lm_head_weight has {lm_head_weight.shape[0]}"
            )
        wq = self.lm_head_query_in.weight  # [Ht, d_rank]
        vocab = lm_head_weight.shape[0]
        r = torch.empty(vocab, self.config.d_rank, device=wq.device, dtype=wq.dtype)  # [V, d_rank]
        chunk = 16384  # bounds the float32 temporaries for large vocabularies
        for start in range(0, vocab, chunk):
            rows = lm_head_weight[start : start + chunk].to(device=wq.device, dtype=torch.float32)
            r[start : start + chunk] = (rows @ wq.float()).to(wq.dtype)
        self.residual_lm_head = r
        self._embed = embed_weight
        self.options = options
        self.vocab_x = self.vocab_qkv = None
        if use_kernel(options, wq) and vocab * 4 * self.config.d_rank * wq.element_size() <= VOCAB_TABLE_MAX_BYTES:
            self._fill_vocab_tables(chunk)

    @torch.no_grad()
    def _fill_vocab_tables(self, chunk: int) -> None:
        """vocab_x = token_in(embed_norm(E)) for every token and (RoPE: positions enter only q and k, rotated per
        round) vocab_qkv = the first block's projection of it: a round's candidate table is then a gather and one
        rotation, not two GEMMs over its 1 + D K rows (354 GFLOP a round at the 27B paper shape, ~0.44 ms)."""
        ref, first = self._ref, self.blocks[0]
        vocab, d = self._embed.shape[0], self.config.d_rank
        self.vocab_x = torch.empty(vocab, d, device=ref.device, dtype=ref.dtype)
        rope = not self._learned
        self.vocab_qkv = torch.empty(vocab, 3 * d, device=ref.device, dtype=ref.dtype) if rope else None
        for start in range(0, vocab, chunk):
            x = self._token_rows(torch.arange(start, min(start + chunk, vocab), device=self._embed.device))
            self.vocab_x[start : start + chunk] = x
            if rope:
                self.vocab_qkv[start : start + chunk] = first.qkv_rows(x)

    @property
    def is_bound(self) -> bool:
        return self._embed is not None and self.residual_lm_head is not None

    def _check_bound(self) -> None:
        if not self.is_bound:
            raise RuntimeError("WeaverAdapter is not bound to a target: call bind(embed_weight, lm_head_weight)")

    # ------------------------------------------------------------ pieces
    @property
    def _ref(self) -> torch.Tensor:
        """A weight whose device and dtype are the adapter's."""
        return self.proposal_in.weight

    @property
    def _learned(self) -> bool:
        return self.config.positions == "learned"

    def prefix_rows(self, target_hidden: torch.Tensor, draft_hidden: torch.Tensor) -> torch.Tensor:
        """u_0..u_D: target_hidden [B, Ht], draft_hidden [B, D, Ht] -> [B, 1 + D, d_rank]."""
        ref = self._ref
        depth = draft_hidden.shape[1]
        h = torch.cat([target_hidden[:, None], draft_hidden], dim=1).to(device=ref.device, dtype=ref.dtype)
        u = self.proposal_in(self.output_norm(h))  # [B, 1 + D, d_rank]
        if not self._learned:  # RoPE: the position goes into q/k instead (`_rope`)
            return u
        return u + torch.cat([torch.zeros_like(self.pos_emb[:1]), self.pos_emb[:depth]])  # + [1 + D, d_rank]

    def node_rows(self, tokens: torch.Tensor, depth: torch.Tensor) -> torch.Tensor:
        """e_n: tokens, depth [...] -> [..., d_rank] (token embedding, + position of the pool it scores if learned)."""
        self._check_bound()
        return self._with_position(self._token_rows(tokens), depth)

    def _token_rows(self, tokens: torch.Tensor) -> torch.Tensor:
        """token_in(embed_norm(E[tokens])): e_n without its position, [..., d_rank]."""
        ref = self._ref
        emb = F.embedding(tokens.to(self._embed.device), self._embed).to(device=ref.device, dtype=ref.dtype)
        return self.token_in(self.embed_norm(emb))

    def _with_position(self, e: torch.Tensor, depth: torch.Tensor) -> torch.Tensor:
        """e_n from its token rows: + the position row of the pool it scores (learned), as is (RoPE)."""
        if not self._learned:
            return e
        return e + self.pos_emb[depth.clamp(min=0, max=self.config.max_depth - 1)]

    @staticmethod
    def node_positions(depth: torch.Tensor, rows: int) -> torch.Tensor:
        """RoPE positions of nodes at `depth` in a round of D = `rows` drafter rows: min(t, D - 1) + 1 (the released
        rule; prefix row j sits at j)."""
        return depth.clamp(min=0, max=rows - 1) + 1

    def _rope(self, positions: torch.Tensor) -> Rope | None:
        """cos, sin [..., head_dim] of integer positions [...] (within 0..max_depth), or None without RoPE."""
        if self._learned:
            return None
        return self.rope_cos[positions], self.rope_sin[positions]

    def score_pool(self, y: torch.Tensor, pool_ids: torch.Tensor, pool_prior: torch.Tensor) -> torch.Tensor:
        """Pool logits prior(c) + <W_lm[c], lm_head_query_in(out_norm(y))> through R's K gathered rows.

        y [..., d_rank]; pool_ids, pool_prior [..., K] -> float32 [..., K]. No full-vocabulary projection.
        """
        self._check_bound()
        norm = self.out_norm
        return score_pool(y, norm.weight, norm.bias, norm.eps, self.residual_lm_head, pool_ids, pool_prior)

    def _check_round_inputs(
        self, target_hidden: torch.Tensor, draft_hidden: torch.Tensor, pool_ids: torch.Tensor, pool_prior: torch.Tensor
    ) -> None:
        ht, max_depth = self.config.target_hidden, self.config.max_depth
        if target_hidden.dim() != 2 or target_hidden.shape[1] != ht:
            raise ValueError(f"target_hidden must be [B, {ht}], got {tuple(target_hidden.shape)}")
        b = target_hidden.shape[0]
        if draft_hidden.dim() != 3 or draft_hidden.shape[0] != b or draft_hidden.shape[2] != ht:
            raise ValueError(f"draft_hidden must be [{b}, D, {ht}], got {tuple(draft_hidden.shape)}")
        depth = draft_hidden.shape[1]
        if not 1 <= depth <= max_depth:
            raise ValueError(f"draft_hidden has D={depth} rows; need 1 <= D <= max_depth={max_depth}")
        if pool_ids.dim() != 3 or pool_ids.shape[:2] != (b, depth) or pool_prior.shape != pool_ids.shape:
            raise ValueError(
                f"pool_ids and pool_prior must both be [{b}, {depth}, K], "
                f"got {tuple(pool_ids.shape)} and {tuple(pool_prior.shape)}"
            )

    # ------------------------------------------------------------ tree growth
    @torch.no_grad()
    def begin_round(
        self,
        target_hidden: torch.Tensor,  # [B, Ht] target final-norm hidden at the root's producer
        draft_hidden: torch.Tensor,  # [B, D, Ht] drafter hidden h_1..h_D (D <= max_depth)
        pool_ids: torch.Tensor,  # [B, D, K] long: top-K candidates per depth
        pool_prior: torch.Tensor,  # [B, D, K] their raw drafter logits
        capacity: int,  # S: node slots to preallocate (a builder: budget + 1 nodes + spare slots)
        root: torch.Tensor | None = None,  # [B] long: the roots' tokens, to build the candidate table
    ) -> WeaverRound:
        """Run the prefix through the block(s), allocate the round's static buffers and, given the roots
        (and within CANDIDATE_TABLE_MAX_BYTES), fill the candidate table."""
        self._check_bound()
        self._check_round_inputs(target_hidden, draft_hidden, pool_ids, pool_prior)
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        cfg, ref = self.config, self._ref
        b, p = target_hidden.shape[0], draft_hidden.shape[1] + 1
        shape = (cfg.num_layers, b, cfg.num_heads, p + capacity, cfg.head_dim)
        k_buf = torch.zeros(shape, device=ref.device, dtype=ref.dtype)
        v_buf = torch.zeros(shape, device=ref.device, dtype=ref.dtype)
        visible = torch.zeros(b, capacity, p + capacity, dtype=torch.bool, device=ref.device)
        visible[:, :, :p] = True
        causal = torch.ones(p, p, dtype=torch.bool, device=ref.device).tril()[None]  # [1, P, P]
        x = self.prefix_rows(target_hidden, draft_hidden)  # [B, P, d_rank]
        rope = self._rope(torch.arange(p, device=ref.device)[None])  # prefix row j at position j
        for layer, block in enumerate(self.blocks):
            q, k, v = block.qkv(x, rope)  # [B, H, P, hd]
            k_buf[layer, :, :, :p], v_buf[layer, :, :, :p] = k, v
            if layer + 1 < cfg.num_layers:  # the last layer's prefix outputs are never read
                x = block.finish(x, masked_attention(q, k, v, causal.expand(b, p, p)))
        state = WeaverRound(
            k_buf, v_buf, visible, pool_ids.to(ref.device).long(), pool_prior.to(ref.device, torch.float32)
        )
        if root is None or not use_kernel(self.options, ref):
            return state
        rows = 1 + pool_ids.shape[1] * pool_ids.shape[2]
        table_bytes = b * rows * 4 * cfg.d_rank * ref.element_size()
        if self.vocab_qkv is not None:
            # RoPE with the vocabulary's rows: a node reads its token's row and rotates its q / k itself, so the
            # round gathers nothing (the 27B table was 126 MB written and read again for ~64 nodes' rows)
            state.cand_x = self.vocab_x.expand(b, -1, -1)
            state.cand_qkv = self.vocab_qkv.expand(b, -1, -1)
            state.cand_rope = (self.rope_cos, self.rope_sin)
        elif table_bytes <= CANDIDATE_TABLE_MAX_BYTES:
            if root.shape != (b,):
                raise ValueError(f"root must be [{b}], got {tuple(root.shape)}")
            # [B, rows]; a padded candidate (id < 0, never a node: it scores -inf) takes token 0's row
            tokens = torch.cat([root.to(ref.device).long()[:, None], state.pool_ids.flatten(1).clamp(min=0)], dim=1)
            depth = torch.arange(rows, device=ref.device).sub(1).div(pool_ids.shape[2], rounding_mode="floor") + 1
            depth = depth.clamp(min=0)  # row 0 (the root): depth 0; a candidate of pool t: a node at depth t + 1
            rope = self._rope(self.node_positions(depth, state.depth)[None])  # q, k stored rotated
            first = self.blocks[0]
            e = self._token_rows(tokens) if self.vocab_x is None else self.vocab_x[tokens]
            state.cand_x = self._with_position(e, depth)
            state.cand_qkv = first.qkv_rows(state.cand_x, rope)
        return state

    @torch.no_grad()
    def step(
        self,
        state: WeaverRound,
        slot: torch.Tensor,  # [B, w] long: distinct node slots to write, per row
        token: torch.Tensor,  # [B, w] long: the nodes' tokens
        parent: torch.Tensor,  # [B, w] long: slot of each node's parent (already written), -1 for a root
        depth: torch.Tensor,  # [B, w] long: the nodes' depths (root 0)
        cand: torch.Tensor | None = None,  # [B, w] long: candidate-table rows of the nodes (module docstring)
    ) -> torch.Tensor:
        """Add w nodes per row and score their children: log p_weaver over the depth+1 pool, [B, w, K].

        Each node attends to the prefix, its ancestors (the chain of `parent` slots, written by earlier
        calls) and itself; its K/V are stored in its slot for its descendants. Nodes at depth >= D score
        pool D (meaningless; the caller ignores them). One batched call, no host sync. With `cand` and a
        candidate table the nodes' input rows and first q/k/v are gathered (same values, fewer kernels).
        """
        x, rows, pool = self._grow(state, slot, token, parent, depth, cand)
        return self._pool_logp(state, x, rows, pool)[0]

    @torch.no_grad()
    def step_top(
        self, state: WeaverRound, slot: torch.Tensor, token: torch.Tensor, parent: torch.Tensor,
        depth: torch.Tensor, c: int, cand: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`step`, keeping each node's best c children: log-probs [B, w, c] fp32 (descending), their token ids
        and their candidate-table rows [B, w, c]. The scoring tail is `weaver.kernels.pool_top.fused_pool_top`
        (two fused Triton launches where the kernels run)."""
        x, _, pool = self._grow(state, slot, token, parent, depth, cand)
        return self._top(state, x, pool, c)

    @torch.no_grad()
    def step_top_prepared(
        self, state: WeaverRound, step: torch.Tensor, c: int, inputs: tuple[torch.Tensor, ...],
        push: tuple[torch.Tensor, ...],
    ) -> None:
        """`step_top` for the device builder's Triton loop, its children pushed into the builder's frontier.

        step [6, B, w] = slot, token, parent, depth, candidate row, pool row (padded) and inputs = (x, q, mask),
        the nodes' input rows, first-block q and visibility rows, both from `frontier_pop_inputs` (which also
        wrote the nodes' visibility and first-block K/V); push = (f_score, f_item, f_logp, node ids, grow,
        score) of the frontier. Then the block(s), and the scoring tail with the push inside its second launch
        (`fused_pool_top_push`)."""
        slot, pool = step[0], step[5]
        b, w = slot.shape
        x, q, mask = inputs
        rows = torch.arange(b, device=slot.device)[:, None].expand(b, w)
        first = self.blocks[0]
        q = q.view(b, w, first.num_heads, first.head_dim).transpose(1, 2)  # [B, H, w, hd]
        x = self._blocks(state, x, rows, state.prefix_len + slot, mask, step[3], q)
        norm = self.out_norm
        fused_pool_top_push(x.reshape(b * w, -1), norm.weight, norm.bias, norm.eps, self.residual_lm_head,
                            state.pool_ids, state.pool_prior, pool.reshape(b * w), c, *push, step[3], self.options)

    def _top(
        self, state: WeaverRound, x: torch.Tensor, pool: torch.Tensor, c: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each node's best c children from its pool: log-probs, tokens and candidate-table rows [B, w, c]."""
        b, w = pool.shape
        norm = self.out_norm
        top_lp, top_tok, top_ix = (t.view(b, w, c) for t in fused_pool_top(
            x.reshape(b * w, -1), norm.weight, norm.bias, norm.eps, self.residual_lm_head, state.pool_ids,
            state.pool_prior, pool.reshape(b * w), c, self.options,
        ))  # fmt: skip
        return top_lp, top_tok, 1 + pool[..., None] * state.pool_ids.shape[2] + top_ix  # table rows

    def _pool_logp(
        self, state: WeaverRound, x: torch.Tensor, rows: torch.Tensor, pool: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """log p_weaver over each node's pool [B, w, K] (torch path) and the pool's token ids [B, w, K]."""
        ids = state.pool_ids[rows, pool]
        return torch.log_softmax(self.score_pool(x, ids, state.pool_prior[rows, pool]), dim=-1), ids

    def _grow(
        self, state: WeaverRound, slot: torch.Tensor, token: torch.Tensor, parent: torch.Tensor, depth: torch.Tensor,
        cand: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The block(s) over w new nodes per row (K/V written to their slots): outputs [B, w, d_rank], the
        batch-row index [B, w] and each node's pool row [B, w] (depth + 1, clamped to the last pool)."""
        self._check_bound()
        b, w = slot.shape
        p, dev = state.prefix_len, state.visible.device
        if token.shape != (b, w) or parent.shape != (b, w) or depth.shape != (b, w):
            raise ValueError(
                f"slot, token, parent, depth must all be [B, w] = {(b, w)}, got {tuple(token.shape)}, "
                f"{tuple(parent.shape)}, {tuple(depth.shape)}"
            )
        slot, token, parent, depth = (t.to(dev).long() for t in (slot, token, parent, depth))
        if cand is not None and cand.shape != (b, w):
            raise ValueError(f"cand must be [B, w] = {(b, w)}, got {tuple(cand.shape)}")
        rows = torch.arange(b, device=dev)[:, None].expand(b, w)  # [B, w]
        col = p + slot  # [B, w] buffer column of each node
        # 1) visibility (the parent's row, or the prefix alone, plus self) and the nodes' input rows: from the
        # candidate table (with the first block's q and K/V, written here), or computed
        q0 = None
        if cand is not None and state.cand_x is not None:
            first = self.blocks[0]
            if state.cand_rope is None:
                x, q0, seen = node_inputs(state.visible, state.cand_x, state.cand_qkv, state.k,
                                          state.v, slot, parent, cand.to(dev).long(), 0, p)  # fmt: skip
            else:  # the vocabulary's rows, by token, q / k rotated at the nodes' positions
                x, q0, seen = node_inputs(state.visible, state.cand_x, state.cand_qkv, state.k,
                                          state.v, slot, parent, token, 0, p, state.cand_rope,
                                          self.node_positions(depth, state.depth))  # fmt: skip
            q0 = q0.view(b, w, first.num_heads, first.head_dim).transpose(1, 2)  # [B, H, w, hd]
        else:
            seen = node_visibility(state.visible, slot, parent, p)  # [B, w, P+S]
            x = self.node_rows(token, depth)  # [B, w, d_rank]
        # 2) the block(s): write each node's K/V into its slot, then attend
        x = self._blocks(state, x, rows, col, seen, depth, q0)
        # 3) children come from the pool of depth + 1
        return x, rows, depth.clamp(max=state.depth - 1)

    def _blocks(
        self, state: WeaverRound, x: torch.Tensor, rows: torch.Tensor, col: torch.Tensor, seen: torch.Tensor,
        depth: torch.Tensor, q0: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The block(s) over the step's nodes: x [B, w, d_rank], their K/V columns col [B, w], visibility rows
        seen [B, w, P+S] and depths [B, w] (their RoPE positions). q0: the first block's q when its q/k/v came
        from the candidate table (rotated, its K/V already written); else every block projects x and writes its
        K/V."""
        b, w = col.shape
        computed = q0 is None or len(self.blocks) > 1  # some block projects (and rotates) q/k here
        rope = self._rope(self.node_positions(depth, state.depth)) if computed else None
        for layer, block in enumerate(self.blocks):
            if layer == 0 and q0 is not None:
                q = q0
            else:
                q, k, v = block.qkv(x, rope)  # [B, H, w, hd]
                state.k[layer][rows, :, col] = k.transpose(1, 2)  # [B, w, H, hd] into column P + slot
                state.v[layer][rows, :, col] = v.transpose(1, 2)
            attn = attend_nodes(q, state.k[layer], state.v[layer], seen, self.options)  # [B, H, w, hd]
            # the kernel's token-major attention output makes the reshape free
            attn = attn.transpose(1, 2).reshape(b * w, -1)
            x = fused_finish(block, x.reshape(b * w, -1), attn, self.options).view(b, w, -1)
        return x

    # ------------------------------------------------------------ teacher-forced chain
    def forward(
        self,
        target_hidden: torch.Tensor,  # [B, Ht]
        draft_hidden: torch.Tensor,  # [B, D, Ht]
        tokens: torch.Tensor,  # [B, T] long: root, x_1, ..., x_{T-1}  (T <= D)
        pool_ids: torch.Tensor,  # [B, D, K]
        pool_prior: torch.Tensor,  # [B, D, K]
    ) -> torch.Tensor:
        """Pool logits along one path, teacher-forced: out[:, t] scores the depth-(t+1) pool given
        root..x_t, float32 [B, T, K]. Differentiable (training); equals `step` along a chain."""
        self._check_bound()
        self._check_round_inputs(target_hidden, draft_hidden, pool_ids, pool_prior)
        b, t = tokens.shape
        depth = draft_hidden.shape[1]
        if not 1 <= t <= depth:
            raise ValueError(f"tokens must be [B, T] with 1 <= T <= D={depth}, got {tuple(tokens.shape)}")
        ref = self._ref
        node_depth = torch.arange(t, device=ref.device)
        x = torch.cat([self.prefix_rows(target_hidden, draft_hidden), self.node_rows(tokens, node_depth.expand(b, t))],
                      dim=1)  # fmt: skip
        n = x.shape[1]  # P + T: a causal sequence (prefix causal; a chain node sees the prefix and its past)
        causal = torch.ones(n, n, dtype=torch.bool, device=ref.device).tril()[None].expand(b, n, n)
        positions = torch.cat([torch.arange(depth + 1, device=ref.device), self.node_positions(node_depth, depth)])
        rope = self._rope(positions[None])  # [1, P + T, hd] each, or None
        for block in self.blocks:
            q, k, v = block.qkv(x, rope)
            x = block.finish(x, masked_attention(q, k, v, causal))
        ids, prior = pool_ids[:, :t].to(ref.device), pool_prior[:, :t].to(ref.device)
        return self.score_pool(x[:, n - t :], ids, prior)
