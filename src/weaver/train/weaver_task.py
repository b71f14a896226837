"""`weaver train weaver`: the adapter learns the target's conditional over the drafter's top-K pool (DESIGN §7).

Target and drafter are frozen. Per anchor a of a regenerated sequence: the drafter's block at a gives its hidden
rows h_1..h_D and, per depth d, the pool = its top-K tokens with their raw logits (the prior); the adapter is
teacher-forced along the target's own continuation x_a, x_{a+1}, ... (`WeaverAdapter.forward`) and at depth d
scores the pool; the teacher is the target's next-token distribution at position a+d-1 restricted to that
pool (one target forward over the sequence gives every depth). Loss: KL(teacher || adapter), or "lk", which
adds the total-variation distance: 1 - TV is a sampled node's acceptance probability, so it targets acceptance.
`greedy_weight` adds a cross-entropy on the target's greedy token along chains that follow the greedy path: greedy
verification accepts a node only when its path is the target's argmax path, so a tree ranks nodes best by
P(token = argmax | ancestors), which that term estimates and the soft teacher does not (a 0.6 / 0.4 split
whose argmax never changes is worth 1.0 / 0.0 to a greedy tree).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from weaver.llm import resolve_dtype
from weaver.models.checkpoint import GIT_SHARD_BYTES
from weaver.models.decoder import Decoder
from weaver.options import RuntimeOptions
from weaver.speculative.drafter import DFlashDrafter
from weaver.speculative.weaver import WeaverAdapter
from weaver.speculative.weaver_layers import RELEASED
from weaver.train.anchors import anchored_batch, draft_at_anchors, target_features
from weaver.train.shards import Batch, SequenceStore

__all__ = ["WeaverTask", "WeaverTaskConfig", "WeaverTrainer", "greedy_path_loss", "pool_loss"]


@dataclass
class WeaverTaskConfig:
    """The adapter's shape (released variant) and the recipe's knobs."""

    d_rank: int = 512
    num_heads: int = 8
    mlp_dim: int = 1024
    num_layers: int = 1
    pool_size: int = 512  # K
    variant: str = "released"  # "released" (RoPE + SwiGLU) or "learned" (pos_emb + GELU)
    loss: str = "kl"  # "kl" or "lk" (KL + tv_weight * TV)
    tv_weight: float = 1.0
    greedy_weight: float = 0.0  # + this x greedy_path_loss (0: the soft teacher alone)
    anchors: int = 16  # per sequence and step
    batch_size: int = 16
    grad_accum: int = 1
    max_len: int = 1024
    init_from: str | None = None  # a trained checkpoint the weights start from (weaver.train.warm_start)
    seed: int = 0
    save_dtype: str = "bf16"


def pool_loss(student: torch.Tensor, teacher_logits: torch.Tensor, valid: torch.Tensor, kind: str,
              tv_weight: float = 1.0) -> torch.Tensor:
    """Mean over valid (chain, depth) of KL(teacher || student) (+ tv_weight * TV for "lk"); both [.., K] logits."""
    log_q = torch.log_softmax(student.float(), dim=-1)
    log_p = torch.log_softmax(teacher_logits.float(), dim=-1)
    p = log_p.exp()
    per = (p * (log_p - log_q)).sum(-1)
    if kind == "lk":
        per = per + tv_weight * 0.5 * (p - log_q.exp()).abs().sum(-1)
    elif kind != "kl":
        raise ValueError(f"loss must be 'kl' or 'lk', got {kind!r}")
    w = valid.float()
    return (per * w).sum() / w.sum().clamp(min=1.0)


def greedy_path_loss(student: torch.Tensor, pool_ids: torch.Tensor, greedy: torch.Tensor, chain: torch.Tensor,
                     valid: torch.Tensor) -> torch.Tensor:
    """Mean CE of the target's greedy token where every ancestor is greedy and the token is in the pool.

    student, pool_ids: [C, D, K]; greedy: [C, D] (depth d's argmax); chain: [C, D] (x_a, then depth d's parent);
    the chain is teacher-forced along the regenerated reply, which a sampled reply leaves after its first
    non-greedy token: depths past it are not on the path a greedy tree must find, so they do not count."""
    match = chain[:, 1:] == greedy[:, :-1]  # depth d+1's parent is depth d's greedy token
    on_path = torch.cat([torch.ones_like(match[:, :1]), match.long().cumprod(-1).bool()], dim=1)
    hit = pool_ids == greedy[..., None]
    label = hit.long().argmax(-1, keepdim=True)
    ce = -torch.log_softmax(student.float(), dim=-1).gather(-1, label).squeeze(-1)
    w = (valid & on_path & hit.any(-1)).float()
    return (ce * w).sum() / w.sum().clamp(min=1.0)


class WeaverTrainer(nn.Module):
    """The module DDP wraps: forward = the pool loss of teacher-forced chains and per-depth top-1 agreement."""

    def __init__(self, adapter: WeaverAdapter, cfg: WeaverTaskConfig) -> None:
        super().__init__()
        self.adapter, self.cfg = adapter, cfg

    def forward(self, target_hidden: torch.Tensor, draft_hidden: torch.Tensor, chain: torch.Tensor,
                pool_ids: torch.Tensor, pool_prior: torch.Tensor, teacher: torch.Tensor, greedy: torch.Tensor,
                valid: torch.Tensor, lm_head_weight: torch.Tensor) -> tuple[torch.Tensor, dict]:
        a = self.adapter
        # R = W_lm @ lm_head_query_in, with its gradient (bind precomputes it without one for decoding)
        a.residual_lm_head = lm_head_weight.to(a.lm_head_query_in.weight.dtype) @ a.lm_head_query_in.weight
        student = a(target_hidden, draft_hidden, chain, pool_ids, pool_prior)  # [C, D, K] float32
        loss = pool_loss(student, teacher, valid, self.cfg.loss, self.cfg.tv_weight)
        if self.cfg.greedy_weight:
            loss = loss + self.cfg.greedy_weight * greedy_path_loss(student, pool_ids, greedy, chain, valid)
        with torch.no_grad():
            pick = pool_ids.gather(-1, student.argmax(-1, keepdim=True)).squeeze(-1)  # adapter's top token
            prior_pick = pool_ids.gather(-1, pool_prior.argmax(-1, keepdim=True)).squeeze(-1)
            count = valid.sum(0).float()
            top1 = ((pick == greedy) & valid).sum(0).float() / count.clamp(min=1.0)
            drafter_top1 = ((prior_pick == greedy) & valid).sum(0).float() / count.clamp(min=1.0)
        return loss, {"top1": top1, "drafter_top1": drafter_top1, "count": count}


class WeaverTask:
    """`weaver.train.loop.TrainTask` for the adapter: frozen target and drafter run online each step."""

    name = "weaver"

    def __init__(self, target: Decoder, drafter: DFlashDrafter, store: SequenceStore, cfg: WeaverTaskConfig,
                 adapter: WeaverAdapter | None = None) -> None:
        self.target, self.store, self.cfg = target.eval().requires_grad_(False), store, cfg
        self.drafter = drafter.to(device=target.device, dtype=target.dtype).eval().requires_grad_(False)
        depth = drafter.config.block_size - 1
        if adapter is None:
            variant = {"released": RELEASED, "learned": {}}[cfg.variant]
            adapter = WeaverAdapter.random(target.config, d_rank=cfg.d_rank, num_heads=cfg.num_heads,
                                           mlp_dim=cfg.mlp_dim, max_depth=depth, pool_size=cfg.pool_size,
                                           seed=cfg.seed, num_layers=cfg.num_layers, **variant)
        adapter = adapter.float().to(target.device).train()
        # torch paths: a trained adapter never grows trees here, so no round tables (stale as soon as it learns)
        adapter.bind(target.model.embed_tokens.weight, target.lm_head.weight, options=RuntimeOptions(kernels="torch"))
        self.trainer = WeaverTrainer(adapter, cfg)

    def model(self) -> nn.Module:
        return self.trainer

    def batch(self, step: int, micro: int, rank: int, world: int) -> tuple[Batch, torch.Tensor]:
        c = self.cfg
        return anchored_batch(self.store, step, micro, rank, world, c.batch_size, c.grad_accum, c.anchors, c.seed)

    @torch.no_grad()
    def _inputs(self, b: Batch, anchors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Everything the adapter's chains need, from the frozen target and drafter."""
        bsz, n = anchors.shape
        depth = self.drafter.config.block_size - 1
        t = torch.arange(depth + 1, device=anchors.device)
        # positions a-1 (the root's producer: target_hidden) and a..a+D-1 (the teachers of depths 1..D)
        select = (anchors[:, :, None] - 1 + t).clamp(max=b.tokens.shape[1] - 1)  # [B, N, D+1]
        features, hidden, logits = target_features(self.target, b.tokens, self.drafter.config.target_layer_ids,
                                                   select=select.flatten(1))
        hidden = hidden.view(bsz, n, depth + 1, -1)
        logits = logits.view(bsz, n, depth + 1, -1)
        dh = draft_at_anchors(self.drafter, features, b.tokens, anchors, self.target.model.embed_tokens)
        draft_logits = torch.nn.functional.linear(dh, self.target.lm_head.weight).float()  # [B, N, D, V]
        prior, ids = draft_logits.topk(self.cfg.pool_size, dim=-1)  # [B, N, D, K]
        teacher_full = logits[:, :, 1:]  # position a+d-1 predicts x_{a+d}: depth d's teacher
        teacher = teacher_full.gather(-1, ids)
        greedy = teacher_full.argmax(-1)  # the target's greedy token at each depth
        pos = anchors[:, :, None] + t[1:]  # x_{a+d}, d = 1..D
        valid = pos < b.lengths[:, None, None]
        chain = b.tokens.gather(1, (pos - 1).clamp(max=b.tokens.shape[1] - 1).flatten(1)).view_as(pos)  # x_a..
        rows = (hidden[:, :, 0], dh, chain, ids, prior, teacher, greedy, valid)
        return tuple(x.flatten(0, 1) for x in rows)  # one chain per (sequence, anchor)

    def loss(self, model: nn.Module, batch: tuple[Batch, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        b, anchors = batch
        dev = self.target.device
        inputs = self._inputs(b.to(dev), anchors.to(dev))
        adapter_dtype = self.trainer.adapter.proposal_in.weight.dtype
        th, dh = inputs[0].to(adapter_dtype), inputs[1].to(adapter_dtype)
        return model(th, dh, *inputs[2:], lm_head_weight=self.target.lm_head.weight)

    def save(self, model: nn.Module, path: Path) -> None:
        adapter = getattr(model, "module", model).adapter
        dtype = resolve_dtype(self.cfg.save_dtype, torch.device("cpu"))
        copy = WeaverAdapter(adapter.config)
        copy.load_state_dict(adapter.state_dict(), strict=False)
        copy.to(dtype).save_pretrained(path, max_shard_bytes=GIT_SHARD_BYTES)

    def config(self) -> dict:
        return {"task": self.name, **asdict(self.cfg), "adapter": asdict(self.trainer.adapter.config),
                "sequences": len(self.store), "tokens": self.store.num_tokens}
