"""Greedy losslessness of every speculative method: exactly the tokens of method="ar".

Two kinds of drafters: the random DFlash drafter + random Weaver adapter of the public API (drafts are
rarely accepted: this checks the plumbing), and an "oracle" drafter that knows the AR continuation and
proposes it at most depths, so long paths are accepted and committed (KV compaction, GDN state fold,
conv windows, drafter context) — the part most likely to break losslessness.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import weaver
from weaver.speculative.engine import Engine, RoundStats
from weaver.speculative.round import RoundConfig
from weaver.speculative.sampling import SamplingParams

PROMPTS = [[5, 17, 42, 8], [60, 61, 62, 63, 64, 65, 66, 67, 68], [3]]
METHODS = ["chain", "ddtree", "weaver"]
BUDGETS = [8, 32, 64]


@pytest.fixture(scope="module", params=["tiny-llama", "tiny-qwen3_5"])
def llm(request):
    return weaver.LLM.from_config(request.param, random_weights=True, seed=7, drafter="random", adapter="random")


@pytest.mark.parametrize("method", METHODS)
def test_random_drafter_greedy_equals_ar(llm, method):
    """Random drafts are rarely accepted: ~one round a token, 16 rounds a prompt (the oracle test below commits
    long paths over 48 tokens)."""
    for prompt in PROMPTS:
        ref = llm.generate(prompt, max_new_tokens=16, ignore_eos=True).token_ids
        for budget in BUDGETS:
            out = llm.generate(prompt, method=method, budget=budget, max_new_tokens=16, ignore_eos=True)
            assert out.token_ids == ref, f"{method} budget {budget} prompt {prompt}"
            assert out.stats.rounds >= 1 and out.stats.tau >= 1.0


class OracleDrafter:
    """Proposes the true greedy continuation at each depth with probability `hit`, noise otherwise."""

    def __init__(self, seq: list[int], vocab: int, hidden: int, depth: int = 15, hit: float = 0.8, seed: int = 0):
        self.seq, self.vocab, self.hidden, self.depth, self.hit = seq, vocab, hidden, depth, hit
        self.gen = torch.Generator().manual_seed(seed)
        self.config = SimpleNamespace(target_layer_ids=[0], block_size=depth + 1)

    def new_context(self, batch_size: int, capacity: int):
        return SimpleNamespace(lengths=torch.zeros(batch_size, dtype=torch.long))

    def append_context(self, ctx, features, counts=None) -> None:
        ctx.lengths += features.shape[1] if counts is None else counts

    def draft(self, ctx, root, embed_tokens, lm_head):
        start = int(ctx.lengths[0])  # position of the root
        logits = torch.randn(1, self.depth, self.vocab, generator=self.gen)
        for d in range(self.depth):
            pos = start + 1 + d
            if pos < len(self.seq) and torch.rand(1, generator=self.gen).item() < self.hit:
                logits[0, d, self.seq[pos]] += 8.0
        hidden = torch.randn(1, self.depth, self.hidden, generator=self.gen)
        return SimpleNamespace(logits=logits, hidden=hidden)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("budget", BUDGETS)
def test_oracle_drafter_accepts_long_paths_and_stays_lossless(llm, method, budget):
    prompt = PROMPTS[1]
    ref = llm.generate(prompt, max_new_tokens=48, ignore_eos=True).token_ids
    oracle = OracleDrafter(prompt + ref, llm.config.vocab_size, llm.config.hidden_size, seed=budget)
    engine = Engine(llm.model, llm.options, drafter=oracle, adapter=llm.adapter if method == "weaver" else None)
    cfg = RoundConfig(method=method, budget=budget, rule="greedy", params=SamplingParams())
    stats = RoundStats()
    got: list[int] = []
    for tokens in engine.generate(prompt, cfg, 48, seed=0, stats=stats):
        got.extend(tokens)
        if len(got) >= 48:
            break
    assert got[:48] == ref
    assert stats.tau > 2.0, f"oracle drafts were not accepted (tau {stats.tau:.2f})"
