"""Greedy losslessness of every speculative method: exactly the tokens of method="ar".

Two kinds of drafters: the random DFlash drafter + random Weaver adapter of the public API (drafts are
rarely accepted: this checks the plumbing), and an "oracle" drafter that knows the AR continuation and
proposes it at most depths, so long paths are accepted and committed (KV compaction, GDN state fold,
conv windows, drafter context) — the part most likely to break losslessness.
"""

from __future__ import annotations

import pytest
from helpers.drafters import oracle_generate

import weaver

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


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("budget", BUDGETS)
def test_oracle_drafter_accepts_long_paths_and_stays_lossless(llm, method, budget):
    ref, got, stats = oracle_generate(llm, PROMPTS[1], method, budget, 48,
                                      adapter=llm.adapter if method == "weaver" else None, seed=budget)
    assert got == ref
    assert stats.tau > 2.0, f"oracle drafts were not accepted (tau {stats.tau:.2f})"


GPU_CASES = [("chain", 15, False), ("ddtree", 64, False), ("weaver", 64, False), ("chain", 15, True),
             ("weaver", 16, True)]


@pytest.mark.gpu  # CUDA graphs and the compiled Triton kernels: run by scripts/gpu/changes_check.sh
@pytest.mark.parametrize("preset", ["tiny-llama", "tiny-qwen3_5"])
@pytest.mark.parametrize(("method", "budget", "compiled"), GPU_CASES)
def test_captured_rounds_commit_long_paths_on_cuda(preset, method, budget, compiled):
    """fp32 on the GPU, as users run it: rounds captured in one CUDA graph each (stages torch.compile'd where
    `compiled`), the Triton kernels, and the oracle drafter, so that long paths are accepted and committed
    (the hybrid's GDN state fold and conv windows included): the tokens of method="ar"."""
    llm = weaver.LLM.from_config(preset, random_weights=True, seed=7, device="cuda", dtype="fp32", drafter="random",
                                 adapter="random", options=weaver.RuntimeOptions(compile=compiled))  # fmt: skip
    engines: list = []
    ref, got, stats = oracle_generate(llm, PROMPTS[1], method, budget, 48, engines=engines,
                                      adapter=llm.adapter if method == "weaver" else None, seed=budget)
    assert got == ref
    assert stats.tau > 2.0, f"oracle drafts were not accepted (tau {stats.tau:.2f})"
    assert any(key[0].method == method and key[-1] == "round" for key in engines[0]._captured), "no captured round"
