"""`weaver train drafter`: the DFlash recipe (SpecForge) on target-regenerated replies (DESIGN §6).

Per step: the frozen target runs over the batch once for the features of its tapped layers; N random anchors
per sequence each root a block [x_a, MASK x (Bk-1)] drafted by `draft_at_anchors` (context strictly before the
anchor, bidirectional block); row k predicts x_{a+k} through the target's frozen LM head; cross-entropy weighted
exp(-(k-1)/gamma). The target's embedding and head are never trained; a vocabulary with no spare id (SmolLM2)
uses the drafter's learned mask embedding.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from weaver.llm import resolve_dtype
from weaver.models.checkpoint import GIT_SHARD_BYTES
from weaver.models.decoder import Decoder
from weaver.speculative.drafter import DFlashDrafter
from weaver.train.anchors import anchored_batch, draft_at_anchors, target_features
from weaver.train.shards import Batch, SequenceStore

__all__ = ["DrafterTask", "DrafterTaskConfig", "DrafterTrainer", "block_targets", "init_from_target"]


@dataclass
class DrafterTaskConfig:
    """The drafter's shape and the recipe's knobs (defaults: SmolLM2-135M, cheap to draft with)."""

    num_layers: int = 3
    num_target_features: int = 5  # tapped target layers, spread over [1, L-3]
    block_size: int = 16
    anchors: int = 64  # per sequence and step (the recipe allows up to 512)
    gamma: float = 7.0  # CE weight exp(-(k-1)/gamma) at block row k
    batch_size: int = 16  # sequences per rank and micro-step
    grad_accum: int = 1
    max_len: int = 1024
    init: str = "random"  # "random" (the recipe) or "target": layers start as copies of the target's top layers
    init_from: str | None = None  # a trained checkpoint the weights start from (weaver.train.warm_start)
    seed: int = 0
    save_dtype: str = "bf16"


def block_targets(tokens: torch.Tensor, lengths: torch.Tensor, anchors: torch.Tensor, block_size: int):
    """Targets [B, N, Bk-1] (x_{a+k}, k = 1..Bk-1) and their validity (inside the sequence)."""
    k = torch.arange(1, block_size, device=tokens.device)
    pos = anchors[:, :, None] + k  # [B, N, Bk-1]
    valid = pos < lengths[:, None, None]
    tgt = tokens.gather(1, pos.clamp(max=tokens.shape[1] - 1).flatten(1)).view_as(pos)
    return tgt, valid


class DrafterTrainer(nn.Module):
    """The module DDP wraps: forward = the drafter's weighted block CE and per-row top-1 agreement."""

    def __init__(self, drafter: DFlashDrafter, gamma: float) -> None:
        super().__init__()
        self.drafter = drafter
        bk = drafter.config.block_size
        self.register_buffer("weights", torch.exp(-torch.arange(bk - 1).float() / gamma), persistent=False)

    def forward(self, features: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor, anchors: torch.Tensor,
                embed_tokens: nn.Embedding, lm_head_weight: torch.Tensor) -> tuple[torch.Tensor, dict]:
        hidden = draft_at_anchors(self.drafter, features, tokens, anchors, embed_tokens)  # [B, N, Bk-1, H]
        logits = F.linear(hidden, lm_head_weight).float()  # [B, N, Bk-1, V]
        tgt, valid = block_targets(tokens, lengths, anchors, self.drafter.config.block_size)
        ce = F.cross_entropy(logits.flatten(0, 2), tgt.flatten(), reduction="none").view_as(tgt)
        w = self.weights * valid
        loss = (ce * w).sum() / w.sum().clamp(min=1.0)
        with torch.no_grad():
            hit = (logits.argmax(-1) == tgt) & valid
            count = valid.sum((0, 1)).float()
            top1 = hit.sum((0, 1)).float() / count.clamp(min=1.0)
        return loss, {"top1": top1, "count": count}


@torch.no_grad()
def init_from_target(drafter: DFlashDrafter, target: Decoder) -> None:
    """Copy the target's top layers into the drafter's (same names where the shapes agree; q/k norms stay 1):
    their outputs already live in the space the frozen LM head reads."""
    top = target.model.layers[len(target.model.layers) - len(drafter.layers):]
    for mine, theirs in zip(drafter.layers, top, strict=True):
        theirs_params = dict(theirs.named_parameters())
        for name, p in mine.named_parameters():
            src = theirs_params.get(name)
            if src is not None and src.shape == p.shape:
                p.copy_(src.to(p.dtype))
    drafter.norm.weight.copy_(target.model.norm.weight.to(drafter.norm.weight.dtype))


class DrafterTask:
    """`weaver.train.loop.TrainTask` for the drafter: batches from a SequenceStore, the target run online."""

    name = "drafter"

    def __init__(self, target: Decoder, store: SequenceStore, cfg: DrafterTaskConfig,
                 drafter: DFlashDrafter | None = None) -> None:
        self.target, self.store, self.cfg = target.eval().requires_grad_(False), store, cfg
        if drafter is None:
            drafter = DFlashDrafter.random(target.config, num_layers=cfg.num_layers,
                                           num_target_features=cfg.num_target_features, block_size=cfg.block_size,
                                           seed=cfg.seed)
            if cfg.init == "target":
                init_from_target(drafter, target)
            elif cfg.init != "random":
                raise ValueError(f"init must be 'target' or 'random', got {cfg.init!r}")
        self.trainer = DrafterTrainer(drafter.float().train(), cfg.gamma).to(target.device)

    def model(self) -> nn.Module:
        return self.trainer

    def batch(self, step: int, micro: int, rank: int, world: int) -> tuple[Batch, torch.Tensor]:
        c = self.cfg
        return anchored_batch(self.store, step, micro, rank, world, c.batch_size, c.grad_accum, c.anchors, c.seed)

    def loss(self, model: nn.Module, batch: tuple[Batch, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        b, anchors = batch
        dev = self.target.device
        b, anchors = b.to(dev), anchors.to(dev)
        features, _, _ = target_features(self.target, b.tokens, self.trainer.drafter.config.target_layer_ids,
                                         select=b.lengths[:, None] - 1)
        return model(features, b.tokens, b.lengths, anchors, self.target.model.embed_tokens,
                     self.target.lm_head.weight)

    def save(self, model: nn.Module, path: Path) -> None:
        drafter = getattr(model, "module", model).drafter
        dtype = resolve_dtype(self.cfg.save_dtype, torch.device("cpu"))
        copy = DFlashDrafter(drafter.config)
        copy.load_state_dict(drafter.state_dict())
        copy.to(dtype).save_pretrained(path, max_shard_bytes=GIT_SHARD_BYTES)

    def config(self) -> dict:
        return {"task": self.name, **asdict(self.cfg), "drafter": self.trainer.drafter.config.to_hf(),
                "sequences": len(self.store), "tokens": self.store.num_tokens}

