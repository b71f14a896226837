"""Captured rounds (weaver.speculative.capture) on the CPU, with a fake CUDA graph that re-runs what it captured.

The real capture needs CUDA (scripts/gpu/rounds_check.py runs it on the H200). Here `capture.capture` does
the same warm-up runs and "captures" the callable, and a replay calls it again: that checks both modes' stage
wiring (one graph per round, one per stage), the state reset after capture, the timing keys, the compile
fallback and the per-configuration compile caches, against greedy autoregressive decoding.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time

import pytest
import torch

import weaver
from weaver.options import RuntimeOptions
from weaver.speculative import capture
from weaver.speculative.engine import Engine
from weaver.speculative.round import Stages

STAGES = Stages.NAMES


def copy_into(static, new) -> None:
    """What a replay does to a captured output: rewrite its tensors in place (dataclasses, tuples, tensors)."""
    if isinstance(static, torch.Tensor):
        static.copy_(new)
    elif dataclasses.is_dataclass(static):
        for f in dataclasses.fields(static):
            copy_into(getattr(static, f.name), getattr(new, f.name))
    elif isinstance(static, (tuple, list)):
        for a, b in zip(static, new, strict=True):
            copy_into(a, b)


class FakeGraph:
    def __init__(self, fn, out) -> None:
        self.fn, self.out = fn, out
        self.replays = 0

    def replay(self) -> None:
        self.replays += 1
        copy_into(self.out, self.fn())


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
    out = fn()
    return FakeGraph(fn, out), out


@pytest.fixture(scope="module")
def llm():
    return weaver.LLM.from_config("tiny-llama", random_weights=True, seed=7, drafter="random", adapter="random",
                                  options=RuntimeOptions(compile=False))  # fmt: skip


@pytest.fixture(autouse=True)
def fake_cuda(monkeypatch):
    """Capture on the CPU: the fake graph, fake events, and an engine that captures whatever its device."""
    monkeypatch.setattr(capture, "capture", fake_capture)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(Engine, "cuda_graphs", property(lambda self: self.options.cuda_graphs))


def run(llm, method: str, budget: int, mode: str, prompt: list[int], n: int = 40):
    llm.engine.options = llm.engine.options.replace(cuda_graphs=mode)
    llm.engine.timing = True
    try:
        out = llm.generate(prompt, method=method, budget=budget, max_new_tokens=n, ignore_eos=True)
    finally:
        llm.engine.timing = False
    return out


@pytest.mark.parametrize("mode", ["round", "stages"])
@pytest.mark.parametrize("method,budget", [("chain", 16), ("ddtree", 8), ("weaver", 64)])
def test_captured_round_equals_ar(llm, method, budget, mode):
    prompt = [5, 17, 42, 8]
    want = run(llm, "ar", 1, "off", prompt).token_ids
    out = run(llm, method, budget, mode, prompt)
    assert out.token_ids == want
    timed = set(out.stats.stage_samples) - {"prefill"}
    assert timed == ({"round"} if mode == "round" else set(STAGES))
    assert all(len(out.stats.stage_samples[name]) == out.stats.rounds for name in timed)
    captured = [key for key in llm.engine._captured if key[0].method == method and key[-1] == mode]
    assert len(captured) == 1
    kind = capture.RoundGraph if mode == "round" else capture.StageGraphs
    assert isinstance(llm.engine._captured[captured[0]], kind)
    again = run(llm, method, budget, mode, [3, 1, 4])  # the captured round is reused, its state refilled
    assert again.token_ids == run(llm, "ar", 1, "off", [3, 1, 4]).token_ids
    assert len([k for k in llm.engine._captured if k[0].method == method and k[-1] == mode]) == 1
    # ... by the captured prefill (attention-only target): one graph for the padded prompt's bucket
    assert [key for key in llm.engine._prefill_graphs if key[0] == captured[0]] == [(captured[0], 16)]


def test_captured_ar_round_equals_eager_ar(llm):
    """AR runs through the same loop: its captured one-node round gives the eager round's tokens."""
    want = run(llm, "ar", 1, "off", [2, 7, 1, 8]).token_ids
    assert run(llm, "ar", 1, "round", [2, 7, 1, 8]).token_ids == want


def test_failed_compile_falls_back_to_the_eager_stage(monkeypatch):
    def broken_compile(fn, **kwargs):
        def run(*args):
            raise RuntimeError("no compiler here")

        return run

    monkeypatch.setattr(torch, "compile", broken_compile)
    calls = []
    stages = Stages(*(functools.partial(lambda name, *a: calls.append(name) or name, n) for n in STAGES))
    compiled = capture.compile_stages(stages, ("draft",))
    with pytest.warns(UserWarning, match="stage 'draft' not compiled: RuntimeError: no compiler here"):
        assert compiled.draft(None) == "draft"
    assert compiled.draft(None) == "draft" and calls == ["draft", "draft"]  # eager from then on, warned once
    assert compiled.build is stages.build


def test_graphed_step_copies_inputs_and_replays():
    calls = []

    def step(x: torch.Tensor) -> torch.Tensor:
        calls.append(int(x))
        return x + 1

    graphed = capture.GraphedStep(step, torch.tensor(0), warmup=2)
    assert calls == [0, 0, 0]  # two warm-up runs, then the capture
    graphed(torch.tensor(5))
    assert calls[-1] == 5 and int(graphed.static_in[0]) == 5


def test_every_configuration_compiles_its_own_stages(monkeypatch, caplog):
    """ar + chain + ddtree + weaver x budgets 8/16/32/64/128 in one process: each configuration's stages are
    compiled into a cache of their own (dynamo's eager backend: the guards and recompiles are dynamo's, the
    code generator does not matter), so none hits recompile_limit and falls back to eager."""
    llm = weaver.LLM.from_config("tiny-llama", random_weights=True, seed=3, drafter="random", adapter="random",
                                 options=RuntimeOptions(compile=True))  # fmt: skip
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    monkeypatch.setattr(Engine, "compile", property(lambda self: self.options.compile))
    torch._dynamo.reset()
    prompt = [5, 17, 42, 8]
    want = run(llm, "ar", 1, "round", prompt, n=12).token_ids
    with caplog.at_level(logging.WARNING):
        for method in ("chain", "ddtree", "weaver"):
            for budget in (8, 16, 32, 64, 128):
                assert run(llm, method, budget, "round", prompt, n=12).token_ids == want, (method, budget)
    hits = [r.getMessage() for r in caplog.records if "recompile_limit" in r.getMessage()]
    assert not hits, hits[:2]
    assert len(llm.engine._captured) == 16


@pytest.mark.parametrize("method,budget", [("chain", 16), ("weaver", 64)])
def test_rounds_queued_ahead_keep_the_tokens(llm, monkeypatch, method, budget):
    """Untimed captured rounds: the next round is queued before the last one is read while it is needed even
    if every round in flight emits its most; the tokens stay ar's, whatever length is asked for."""
    from weaver.speculative import readback

    most = []
    submit = readback.ChunkReadback.submit

    def counting_submit(self, count):
        submit(self, count)
        most.append(len(self.pending))

    monkeypatch.setattr(readback.ChunkReadback, "submit", counting_submit)
    prompt = [5, 17, 42, 8]
    want = {n: run(llm, "ar", 1, "off", prompt, n=n).token_ids for n in (40, 17, 3)}
    llm.engine.options = llm.engine.options.replace(cuda_graphs="round")
    for n, tokens in want.items():
        most.clear()
        out = llm.generate(prompt, method=method, budget=budget, max_new_tokens=n, ignore_eos=True)
        assert out.token_ids == tokens and len(tokens) == n
        assert max(most) == (2 if n >= 33 else 1)  # ahead only while 2 x 16 tokens are still wanted


@pytest.mark.parametrize("pdl", [True, False])
def test_compiled_stages_take_pdl_from_the_options(monkeypatch, pdl):
    """RuntimeOptions.pdl reaches inductor as `triton.enable_pdl` (its own kernels with PDL on Hopper), a key
    torch.compile accepts: an unknown one would fail only at the first compiled call, on the GPU. The commit stage
    compiles without it (measured slower with it)."""
    seen = []
    real_compile = torch.compile

    def recording_compile(fn, **kwargs):
        seen.append(kwargs["options"])
        return real_compile(fn, **kwargs)

    monkeypatch.setattr(torch, "compile", recording_compile)
    stages = Stages(*(functools.partial(lambda name, x: x + len(name), n) for n in STAGES))
    compiled = capture.compile_stages(stages, ("draft", "verify", "commit"), pdl=pdl)
    assert seen == [{"triton.enable_pdl": pdl}] * 2 + [{"triton.enable_pdl": False}]  # commit: NO_INDUCTOR_PDL
    assert float(compiled.draft(torch.zeros(2))[0]) == len("draft")  # compiles on CPU with the option
    assert capture.compile_fallbacks(compiled) == {}
