"""Sampling through the engine: speculative methods emit the target's distribution (seeded Monte Carlo).

The exact rules are proven by enumeration in test_verify.py; this ties the whole loop (drafter, builder,
tree verify, commit) to the target's law on a real (tiny, random) model with a 6-token vocabulary:
the empirical law of the first two emitted tokens must be within sampling noise of the exact one.
"""

from __future__ import annotations

import itertools

import pytest
import torch

import weaver
from weaver.models.presets import preset_config
from weaver.speculative.sampling import SamplingParams, process_logits

VOCAB = 6
PROMPT = [1, 2, 3]
SAMPLES = 1200
PARAMS = SamplingParams(temperature=1.0, top_p=0.95, top_k=0)


@pytest.fixture(scope="module")
def llm():
    cfg = preset_config("tiny-llama", vocab_size=VOCAB, eos_token_id=None, bos_token_id=None)
    model = weaver.LLM.from_config(cfg, random_weights=True, seed=3, drafter="random", adapter="random")
    with torch.no_grad():  # sharpen the random model a little so the law is far from uniform
        model.model.lm_head.weight.mul_(8.0)
    return model


def _exact_pair_law(llm) -> torch.Tensor:
    first = process_logits(llm.logits(PROMPT)[-1], PARAMS)
    law = torch.zeros(VOCAB, VOCAB, dtype=torch.float64)
    for a in range(VOCAB):
        second = process_logits(llm.logits([*PROMPT, a])[-1], PARAMS)
        law[a] = first[a].double() * second.double()
    return law


@pytest.mark.parametrize(
    "method,verify",
    [("ar", "auto"), ("chain", "target_only"), ("chain", "chain_speculative"), ("ddtree", "target_only"),
     ("ddtree", "traversal"), ("weaver", "target_only"), ("weaver", "traversal")],
)
def test_first_two_tokens_follow_the_target(llm, method, verify):
    exact = _exact_pair_law(llm)
    counts = torch.zeros(VOCAB, VOCAB, dtype=torch.float64)
    taus = []
    for seed in range(SAMPLES):
        out = llm.generate(PROMPT, method=method, verify=verify, budget=8, max_new_tokens=2, seed=seed,
                           temperature=PARAMS.temperature, top_p=PARAMS.top_p, ignore_eos=True)
        a, b = out.token_ids[:2]
        counts[a, b] += 1
        taus.append(out.stats.tau)
    tv = 0.5 * (counts / SAMPLES - exact).abs().sum().item()
    # Sampling noise of a 36-outcome law at n=1200 is ~0.05; a wrong rule gives >> 0.15.
    assert tv < 0.11, f"{method}/{verify}: total variation {tv:.3f}"
    if method != "ar":
        assert max(taus) >= 2.0, "no draft was ever accepted: the test would not exercise acceptance"
    assert all(exact[a, b] > 0 or counts[a, b] == 0 for a, b in itertools.product(range(VOCAB), repeat=2))
