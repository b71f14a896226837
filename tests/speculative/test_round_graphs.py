"""Captured rounds (spec.round_graphs) on the CPU, with a fake CUDA graph that re-runs what it captured.

The real capture needs CUDA (scripts/gpu/rounds_check.py runs it on the H200). Here `graphs.capture` is
replaced by one that does the same warm-up runs and "captures" the callable, and a replay calls it again:
that checks the stage wiring of both modes (one graph per round, one per stage), the state reset after
capture, the timing keys and the compile fallback, against greedy autoregressive decoding.
"""

from __future__ import annotations

import functools
import time

import pytest
import torch

import weaver
from weaver.speculative import graphs
from weaver.speculative.engine import RoundStats
from weaver.speculative.round import SpecConfig, compile_stages
from weaver.speculative.round_graphs import STAGES, RoundGraphs
from weaver.speculative.sampling import SamplingParams


class FakeGraph:
    def __init__(self, fn) -> None:
        self.fn = fn
        self.replays = 0

    def replay(self) -> None:
        self.replays += 1
        self.fn()


class FakeEvent:
    def __init__(self, enable_timing: bool = False) -> None:
        self.t = 0.0

    def record(self) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, end: FakeEvent) -> float:
        return 1e3 * (end.t - self.t)


def fake_capture(fn, warmup: int = 2):
    for _ in range(warmup):
        fn()
    return FakeGraph(fn), fn()


@pytest.fixture(scope="module")
def llm():
    llm = weaver.LLM.from_config("tiny-llama", random_weights=True, seed=7, drafter="random", adapter="random")
    llm._speculative("weaver").compile_stages = ()  # eager stages (the compiled ones: test_compiled_stages)
    return llm


@pytest.fixture(autouse=True)
def fake_cuda(monkeypatch):
    monkeypatch.setattr(graphs, "capture", fake_capture)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)


def graphed_tokens(llm, method: str, budget: int, mode: str, prompt: list[int], n: int = 40):
    spec = llm._speculative(method)
    cfg = SpecConfig(method=method, budget=budget, rule="greedy", params=SamplingParams(), builder_options={})
    stats = RoundStats()
    cache = llm.engine.cache_for(len(prompt) + n + budget + 2)
    tokens: list[int] = []
    for new in spec.generate(cache, prompt, n, cfg, None, stats, use_graphs=True, timing=True, graph_mode=mode):
        tokens.extend(new)
    assert spec.last_round_graphed
    return tokens[:n], stats, spec


@pytest.mark.parametrize("mode", ["round", "stages"])
@pytest.mark.parametrize("method,budget", [("chain", 16), ("ddtree", 8), ("weaver", 64)])
def test_captured_round_equals_ar(llm, method, budget, mode):
    prompt = [5, 17, 42, 8]
    want = llm.generate(prompt, max_new_tokens=40, ignore_eos=True).token_ids
    got, stats, spec = graphed_tokens(llm, method, budget, mode, prompt)
    assert got == want
    timed = set(stats.stage_samples) - {"prefill"}
    assert timed == ({"round"} if mode == "round" else set(STAGES))
    assert all(len(stats.stage_samples[name]) == stats.rounds for name in timed)
    captured = [g for key, g in spec._graphs.items() if key[0] == method and key[-1] == mode]
    assert len(captured) == 1 and len(captured[0].graphs) == (1 if mode == "round" else 5)
    again, _, _ = graphed_tokens(llm, method, budget, mode, [3, 1, 4])  # the captured round is reused
    assert again == llm.generate([3, 1, 4], max_new_tokens=40, ignore_eos=True).token_ids


@pytest.mark.slow
def test_compiled_stages(llm):
    """torch.compile'd draft and build stages (inductor on the CPU) inside the captured round."""
    spec = llm._speculative("weaver")
    spec.compile_stages = ("draft", "build")
    try:
        got, _, spec = graphed_tokens(llm, "weaver", 8, "round", [2, 7, 1, 8])
    finally:
        spec.compile_stages = ()
    assert got == llm.generate([2, 7, 1, 8], max_new_tokens=40, ignore_eos=True).token_ids
    assert [g.compiled for key, g in spec._graphs.items() if key[1] == 8 and key[0] == "weaver"] == [["draft", "build"]]


def test_failed_compile_falls_back_to_the_eager_stage(llm, monkeypatch):
    def broken_compile(fn, **kwargs):
        def run():
            raise RuntimeError("no compiler here")

        return run

    monkeypatch.setattr(torch, "compile", broken_compile)
    spec = llm._speculative("chain")
    cfg = SpecConfig(method="chain", budget=8, rule="greedy", params=SamplingParams(), builder_options={})
    cache = llm.engine.cache_for(64)
    state = spec.start(cache, [5, 6, 7], cfg.params, None)
    with pytest.warns(UserWarning, match="stage 'draft' not compiled: RuntimeError: no compiler here"):
        graph = RoundGraphs(spec, state, cfg, compile_stages=("draft",), mode="round")
    assert graph.compiled == []
    with pytest.raises(ValueError, match="mode must be one of"):
        RoundGraphs(spec, state, cfg, mode="one")


def test_graphed_step_copies_inputs_and_replays():
    calls = []

    def step(x: torch.Tensor) -> torch.Tensor:
        calls.append(int(x))
        return x + 1

    graphed = graphs.GraphedStep(step, torch.tensor(0), warmup=2)
    assert calls == [0, 0, 0]  # two warm-up runs, then the capture
    graphed(torch.tensor(5))
    assert calls[-1] == 5 and int(graphed.static_in[0]) == 5


def test_compile_stages_from_the_environment(monkeypatch):
    monkeypatch.delenv("WEAVER_COMPILE", raising=False)
    monkeypatch.delenv("WEAVER_COMPILE_STAGES", raising=False)
    assert compile_stages() == ("draft", "build", "accept", "commit")
    monkeypatch.setenv("WEAVER_COMPILE_STAGES", "draft, build,commit")
    assert compile_stages() == ("draft", "build", "commit")
    monkeypatch.setenv("WEAVER_COMPILE_STAGES", "draft,bulid")
    with pytest.raises(weaver.errors.GenerationConfigError, match="stages are draft"):
        compile_stages()
    monkeypatch.setenv("WEAVER_COMPILE", "0")
    assert compile_stages() == ()


def test_round_graph_mode_from_the_environment(monkeypatch):
    """One graph per round unless WEAVER_ROUND_GRAPHS asks for five; typos are refused."""
    make = functools.partial(weaver.LLM.from_config, "tiny-llama", random_weights=True, seed=1)
    monkeypatch.delenv("WEAVER_ROUND_GRAPHS", raising=False)
    assert make().engine.round_graphs == "round"
    monkeypatch.setenv("WEAVER_ROUND_GRAPHS", "stages")
    assert make().engine.round_graphs == "stages"
    monkeypatch.setenv("WEAVER_ROUND_GRAPHS", "one")
    with pytest.raises(weaver.errors.GenerationConfigError, match="WEAVER_ROUND_GRAPHS"):
        make()


def test_bench_rounds_times_the_one_graph_round_whatever_the_default(llm, monkeypatch):
    """`weaver bench rounds` takes the round's time from one graph per round and the stages' from five, also
    when the engine's default mode is five graphs (the H200 run of 2026-12-01 hit a KeyError there); the
    engine's mode comes back afterwards."""
    import argparse

    from weaver.bench import rounds
    from weaver.speculative.builders import BUILDERS

    def graphable_here(cfg, device) -> bool:  # as round_graphs.graphable, without the CUDA check
        return cfg.rule == "greedy" and cfg.method in BUILDERS

    monkeypatch.setattr("weaver.speculative.engine.graphable", graphable_here)
    monkeypatch.setattr(llm.engine, "use_cuda_graphs", True)
    monkeypatch.setattr(llm.engine, "timing", True)
    monkeypatch.setattr(llm.engine, "round_graphs", "stages")
    args = argparse.Namespace(new_tokens=12, temperature=0.0)
    row = rounds.measure(llm, [[5, 17, 42, 8], [3, 1, 4]], "chain", 8, args)
    assert row["cuda_graphs"] and llm.engine.round_graphs == "stages"
    assert row["round_ms"] > 0 and set(row["stage_ms"]) == set(STAGES)
    assert all(v > 0 for v in row["stage_ms"].values())
