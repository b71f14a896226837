"""A tiny random DFlash drafter with its target embedding / head, for the drafter tests; an oracle drafter that
proposes the true continuation, for the engine tests that must commit long paths."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn

from weaver.models.config import ModelConfig
from weaver.speculative.drafter import DFlashDrafter, DrafterConfig

VOCAB, HIDDEN = 61, 48
TARGET = ModelConfig(
    model_type="qwen3",
    vocab_size=VOCAB,
    hidden_size=HIDDEN,
    intermediate_size=80,
    num_hidden_layers=7,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    qk_norm=True,
)


def make_drafter(seed: int = 0, perturb_norms: bool = True, **overrides) -> DFlashDrafter:
    """A random drafter for TARGET; config fields in `overrides`; norms perturbed so they matter."""
    base = DFlashDrafter.random(TARGET, num_layers=2, num_target_features=3, block_size=5, seed=seed)
    cfg = DrafterConfig(**{**vars(base.config), **overrides})
    drafter = DFlashDrafter(cfg).init_random_weights(seed)
    if perturb_norms:
        gen = torch.Generator().manual_seed(seed + 100)
        with torch.no_grad():
            for name, p in drafter.named_parameters():
                if name.endswith("norm.weight"):
                    p.add_(0.3 * torch.randn(p.shape, generator=gen))
    return drafter.eval()


def target_io(seed: int = 1) -> tuple[nn.Embedding, nn.Linear]:
    gen = torch.Generator().manual_seed(seed)
    embed, head = nn.Embedding(VOCAB, HIDDEN), nn.Linear(HIDDEN, VOCAB, bias=False)
    with torch.no_grad():
        embed.weight.copy_(torch.randn(VOCAB, HIDDEN, generator=gen))
        head.weight.copy_(0.2 * torch.randn(VOCAB, HIDDEN, generator=gen))
    return embed, head


def random_features(drafter: DFlashDrafter, batch: int, length: int, seed: int = 2) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, length, drafter.config.num_target_features * HIDDEN, generator=gen)


class OracleDrafter:
    """Proposes the true greedy continuation at each depth with probability `hit`, noise otherwise.

    Every draw is made up front: tables indexed by the root's position (the context length), on the target's
    device, so drafting is pure tensor indexing with no host work and a round can be compiled and captured in a
    CUDA graph like one with a real drafter."""

    def __init__(self, seq: list[int], vocab: int, hidden: int, depth: int = 15, hit: float = 0.8, seed: int = 0,
                 device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> None:  # fmt: skip
        gen = torch.Generator().manual_seed(seed)
        roots = len(seq) + 1  # a root at position r drafts positions r + 1 .. r + depth
        logits = torch.randn(roots, depth, vocab, generator=gen)
        hits = torch.rand(roots, depth, generator=gen) < hit
        pos = torch.arange(roots)[:, None] + 1 + torch.arange(depth)[None, :]
        hits &= pos < len(seq)
        r, d = hits.nonzero(as_tuple=True)
        logits[r, d, torch.tensor(seq)[pos[r, d]]] += 8.0
        self.logits = logits.to(device, dtype)
        self.hidden = torch.randn(roots, depth, hidden, generator=gen).to(device, dtype)
        self.device = torch.device(device)
        self.config = SimpleNamespace(target_layer_ids=[0], block_size=depth + 1)

    def new_context(self, batch_size: int, capacity: int):
        return SimpleNamespace(lengths=torch.zeros(batch_size, dtype=torch.long, device=self.device))

    def append_context(self, ctx, features, counts=None) -> None:
        ctx.lengths += features.shape[1] if counts is None else counts

    def draft(self, ctx, root, embed_tokens, lm_head, options=None):
        at = ctx.lengths.clamp(max=self.logits.shape[0] - 1)  # [B] the roots' positions
        return SimpleNamespace(logits=self.logits[at], hidden=self.hidden[at])


def oracle_generate(llm, prompt: list[int], method: str, budget: int, new_tokens: int, adapter=None,
                    engines: list | None = None, **oracle_kwargs) -> tuple[list[int], list[int], object]:  # fmt: skip
    """`llm`'s greedy ar tokens, and those of `method` driven by an OracleDrafter of them (so long paths are
    accepted and committed), with the round stats: (ar tokens, speculative tokens, stats). `engines`: a list that
    receives the engine that ran them (to inspect what it captured)."""
    from weaver.speculative.engine import Engine, RoundStats
    from weaver.speculative.round import RoundConfig
    from weaver.speculative.sampling import SamplingParams

    ref = llm.generate(prompt, max_new_tokens=new_tokens, ignore_eos=True).token_ids
    oracle = OracleDrafter(prompt + ref, llm.config.vocab_size, llm.config.hidden_size, device=llm.model.device,
                           dtype=llm.model.dtype, **oracle_kwargs)  # fmt: skip
    engine = Engine(llm.model, llm.options, drafter=oracle, adapter=adapter)
    if engines is not None:
        engines.append(engine)
    cfg = RoundConfig(method=method, budget=budget, rule="greedy", params=SamplingParams())
    stats = RoundStats()
    got: list[int] = []
    for tokens in engine.generate(prompt, cfg, new_tokens, seed=0, stats=stats):
        got.extend(tokens)
        if len(got) >= new_tokens:
            break
    return ref, got[:new_tokens], stats
