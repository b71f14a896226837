"""A stage whose compiler fails runs eager and is named with its error (`compile_fallbacks`), and the benchmark
reports say so: the H200's hybrid verify once fell back to eager and was timed as if compiled."""

from __future__ import annotations

import warnings

import pytest
import torch

from weaver.bench.fallbacks import fallback_lines
from weaver.speculative.capture import compile_fallbacks, compile_stages
from weaver.speculative.round import Stages


def _stage(name: str):
    """A stage that adds len(name), named `name` (own_code keeps the name)."""

    def stage(x: torch.Tensor) -> torch.Tensor:
        return x + len(name)

    stage.__name__ = name
    return stage


def _failing_compile(fn, **kwargs):
    """torch.compile whose compiled `verify` fails at its first call, as inductor's launcher did."""

    def compiled(*args):
        if fn.__name__ == "verify":
            raise RuntimeError("launcher() missing 1 required positional argument: '_grid_2'\nmore lines")
        return fn(*args)

    return compiled


def test_a_stage_that_fails_to_compile_runs_eager_and_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, "compile", _failing_compile)
    stages = compile_stages(Stages(**{name: _stage(name) for name in Stages.NAMES}), ("draft", "verify", "commit"))
    x = torch.zeros(3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = {name: getattr(stages, name)(x) for name in Stages.NAMES}
    assert {name: float(out[0]) for name, out in outs.items()} == {n: float(len(n)) for n in Stages.NAMES}
    assert compile_fallbacks(stages) == {"verify": "RuntimeError: launcher() missing 1 required positional "
                                                    "argument: '_grid_2'"}
    assert [str(w.message) for w in caught if "not compiled" in str(w.message)] == [
        "stage 'verify' not compiled: RuntimeError: launcher() missing 1 required positional argument: '_grid_2'"]


def test_reports_name_the_fallbacks() -> None:
    assert fallback_lines({}) == [] and fallback_lines(None) == []
    lines = fallback_lines({"chain/16 verify": "TypeError: boom"})
    assert "- chain/16 verify: TypeError: boom" in lines and lines[0].startswith("**Not compiled")
