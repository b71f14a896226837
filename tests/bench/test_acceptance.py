"""`weaver bench acceptance` times warm runs only: a generation that captured or compiled a round is repeated."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from weaver.bench.acceptance import warm_generate


class FakeLLM:
    """Counts generate calls; the first call of each method 'captures' (as a CUDA engine does)."""

    def __init__(self) -> None:
        self.engine = SimpleNamespace(captured_count=0)
        self.calls: list[str] = []
        self.seen: set[str] = set()

    def generate(self, prompt, method="ar", **kwargs):
        self.calls.append(method)
        if method not in self.seen:
            self.seen.add(method)
            self.engine.captured_count += 1
        return SimpleNamespace(method=method, call=len(self.calls))


def test_a_capturing_generation_is_timed_again_and_a_warm_one_is_not() -> None:
    llm = FakeLLM()
    first = warm_generate(llm, "p", method="weaver", budget=64)
    assert llm.calls == ["weaver", "weaver"] and first.call == 2  # the returned run is the warm repeat
    again = warm_generate(llm, "p", method="weaver", budget=64)
    assert llm.calls == ["weaver"] * 3 and again.call == 3
    warm_generate(llm, "p", method="ar")
    assert llm.calls[-2:] == ["ar", "ar"]


def test_weaver_widths_add_runs_and_keys_of_their_own() -> None:
    from weaver.bench.acceptance import _runs, summarise

    runs = _runs(["chain", "ddtree", "weaver"], [16, 64], 15, [0, 4])
    assert runs == [("chain", 15, 0), ("ddtree", 16, 0), ("ddtree", 64, 0), ("weaver", 16, 0), ("weaver", 16, 4),
                    ("weaver", 64, 0), ("weaver", 64, 4)]  # fmt: skip
    stats = {"rounds": 2, "accepted_per_depth": [1, 1], "tok_s": 10.0}
    records = [{"workload": "gsm", "ar": {**stats, "tau": 1.0}, "runs": [
        {"method": "weaver", "budget": 16, "w": None, "greedy": True, **stats, "tau": 3.0},
        {"method": "weaver", "budget": 16, "w": 4, "greedy": True, **stats, "tau": 2.0}]}]
    summary = summarise(records)
    assert sorted(summary) == ["ar/0", "weaver/16", "weaver/16/w4"]
    assert summary["weaver/16"]["macro_tau"] == 3.0 and summary["weaver/16/w4"]["macro_tau"] == 2.0


def test_summary_gives_the_median_prefill_and_round_times() -> None:
    """prefill ms and ms / round: medians over the prompts of (seconds - prefill) / rounds; absent without times."""
    from weaver.bench.acceptance import markdown, summarise

    def run(seconds: float, prefill: float, rounds: int) -> dict:
        return {"method": "chain", "budget": 15, "greedy": True, "tau": 2.0, "rounds": rounds, "tok_s": 1.0,
                "accepted_per_depth": [rounds], "seconds": seconds, "prefill_s": prefill}  # fmt: skip

    ar = {"tau": 1.0, "rounds": 4, "tok_s": 1.0, "accepted_per_depth": [4]}  # no times: columns left empty
    records = [{"workload": w, "ar": ar, "runs": [run(s, p, r)]}
               for w, (s, p, r) in {"a": (0.012, 0.002, 10), "b": (0.030, 0.004, 13), "c": (0.5, 0.1, 4)}.items()]
    summary = summarise(records)
    assert abs(summary["chain/15"]["prefill_ms"] - 4.0) < 1e-9 and abs(summary["chain/15"]["round_ms"] - 2.0) < 1e-9
    assert summary["ar/0"]["prefill_ms"] is None
    report = {"summary": summary, "model": "m", "device": "d", "dtype": "t", "max_new_tokens": 8, "command": "c",
              "records": records}  # fmt: skip
    assert "| chain/15 | 2.00 | 2.00 | 2.00 | 2.00 | 1.0 | 1.00 | 4.000 | 2.000 |" in markdown(report)


def test_sampled_runs_cover_every_method_asked_for() -> None:
    """T=1: target-only for each speculative method (chain at its block), traversal too for weaver; none at 0."""
    from weaver.bench.acceptance import _sampled_runs

    assert _sampled_runs(["ar", "chain", "ddtree", "weaver"], 64, 15) == [
        ("chain", 15, "target_only"), ("ddtree", 64, "target_only"), ("weaver", 64, "target_only"),
        ("weaver", 64, "traversal")]  # fmt: skip
    assert _sampled_runs(["ddtree"], 32, 15) == [("ddtree", 32, "target_only")]
    assert _sampled_runs(["chain", "weaver"], 0, 15) == []


def _report(path: Path, taus: dict[str, float], w: int | None = None, hists: dict | None = None) -> str:
    """A report.json with one weaver run per prompt (the fields `runs_by_prompt` reads; `hists`: a prompt's
    accepted_per_depth)."""
    path.mkdir()
    records = [{"workload": "gsm_symbolic", "id": pid, "ar": {"tau": 1.0},
                "runs": [{"method": "weaver", "budget": 64, "w": w, "greedy": True, "equal_to_ar": True, "tau": t,
                          "accepted_per_depth": (hists or {}).get(pid, [])}]}
               for pid, t in taus.items()]
    (path / "report.json").write_text(json.dumps({"records": records}))
    return str(path)


def test_compare_acceptance_pairs_prompts(tmp_path) -> None:
    """The compare script's paired change, standard error and rose / fell / held counts, over common prompts only,
    and `--pair` holding a renamed run against the old one."""
    old = _report(tmp_path / "old", {"a": 2.0, "b": 4.0, "c": 6.0, "z": 9.0})
    new = _report(tmp_path / "new", {"a": 3.0, "b": 4.0, "c": 5.0}, w=2)
    script = Path(__file__).parents[2] / "scripts" / "compare_acceptance.py"
    run = [sys.executable, str(script), "--old", old, "--new", new]
    unpaired = subprocess.run(run, capture_output=True, text=True, check=True).stdout
    assert "| gsm_symbolic |" not in unpaired  # weaver/64/w2 has no old run of its name
    out = subprocess.run(run + ["--pair", "weaver/64/w2=weaver/64"], capture_output=True, text=True, check=True).stdout
    row = next(line for line in out.splitlines() if "| gsm_symbolic |" in line)
    # changes +1, 0, -1 over the 3 common prompts: mean 0, s.e. 1 / sqrt(3)
    assert row == "| weaver/64/w2 | gsm_symbolic | 3 | 4.00 | 4.00 | +0.000 (0.577) | 1 / 1 / 1 |"
    assert "equal to ar: 3 of 3" in out


def test_acceptance_depths_pools_rounds_once_per_prompt(tmp_path) -> None:
    """The depth script's P(accepted >= d): rounds pooled over prompts, a prompt in two reports counted once (the
    later report's record)."""
    first = _report(tmp_path / "first", {"a": 1.0, "b": 1.0}, hists={"a": [1, 1, 0], "b": [9, 9, 9]})
    later = _report(tmp_path / "later", {"b": 1.0}, hists={"b": [0, 1, 1]})
    script = Path(__file__).parents[2] / "scripts" / "acceptance_depths.py"
    run = [sys.executable, str(script), "--runs", "weaver/64", "--depths", "3", "--reports", first, later]
    out = subprocess.run(run, capture_output=True, text=True, check=True).stdout
    row = next(line for line in out.splitlines() if "| weaver/64 |" in line)
    # pooled rounds by accepted tokens [1, 2, 1] (a, then b from the later report): 4 rounds, >= 1: 3, >= 2: 1
    assert row == "| gsm_symbolic | weaver/64 | 4 | 0.75 | 0.25 | 0.00 |"
