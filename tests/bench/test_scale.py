"""`weaver bench scale` end to end on a tiny hybrid model (CPU), and the published drafter shape."""

from __future__ import annotations

import json

import pytest

from weaver.bench.scale import published_drafter_config
from weaver.cli import main
from weaver.models.config import ModelConfig
from weaver.models.presets import preset_config


def _acceptance(path, records, name="report.json"):
    """An acceptance report (JSON file `name` under path) holding `records`: (workload, prompt id, method, budget,
    greedy, tau) each."""
    by_prompt = {}
    for workload, pid, method, budget, greedy, tau in records:
        run = {"method": method, "budget": budget, "greedy": greedy, "rule": None if greedy else "target_only",
               "tau": tau}  # fmt: skip
        record = by_prompt.setdefault((workload, pid), {"workload": workload, "id": pid, "ar": {}, "runs": []})
        record["runs"].append(run)
    path.mkdir()
    (path / name).write_text(json.dumps({"summary": {}, "records": list(by_prompt.values())}))
    return str(path / name)


def test_scale_report_on_cpu(tmp_path):
    first = _acceptance(tmp_path / "a", [("gsm", "1", "chain", 15, True, 2.0), ("gsm", "1", "weaver", 4, True, 3.0),
                                         ("gsm", "1", "weaver", 4, False, 9.0)], name="acc.json")  # fmt: skip
    # a second report, given as its directory: a new workload, and gsm prompt 1 again (the last report's counts)
    _acceptance(tmp_path / "b", [("mt", "2", "weaver", 4, True, 5.0), ("gsm", "1", "weaver", 4, True, 4.0)])
    out = tmp_path / "out"
    argv = ["bench", "scale", "--model", "tiny-qwen3_5", "--device", "cpu", "--methods", "ar", "chain", "weaver",
            "--budgets", "4", "--verify-nodes", "4", "--prefill", "16", "--context", "8", "--new-tokens", "3",
            "--prompts", "1", "--adapter", "random:16", "--draft-vocab", "first:64",
            "--tau-from", first, str(tmp_path / "b"), "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["draft_vocab"] == 64
    assert [(r["method"], r["budget"]) for r in report["rows"]] == [("ar", 0), ("chain", 16), ("weaver", 4)]
    assert set(report["rows"][2]["stage_ms"]) == {"draft", "build", "verify", "accept", "commit"}
    assert [(v["kind"], v["nodes"]) for v in report["verify"]] == [("chain", 5), ("tree", 5)]
    assert report["prefill"][0]["tokens"] == 16 and report["prefill"][0]["ms"] > 0
    assert report["ar_floor_ms"] > 0 and report["bytes"]["ar_step_read"] < report["bytes"]["target"]
    ar_ms = report["rows"][0]["round_ms"]
    chain, weaver = report["projection"]
    assert chain["tau_paper"] == 4.8 and chain["tau_measured"] == 2.0
    assert chain["speedup_paper"] == pytest.approx(4.8 * ar_ms / chain["round_ms"])
    assert weaver["tau_paper"] is None and weaver["tau_measured"] == 4.5  # greedy runs win over T=1 ones
    assert {w: v["tau"] for w, v in weaver["measured_per_workload"].items()} == {"gsm": 4.0, "mt": 5.0}
    assert weaver["measured_per_workload"]["mt"]["speedup"] == pytest.approx(5.0 * ar_ms / weaver["round_ms"])
    assert "Measured tau per workload" in (out / "report.md").read_text()
    assert "## Verify alone" in (out / "report.md").read_text()
    assert main([*argv[:-5], "--tau-from", str(tmp_path / "missing.json"), "--out", str(out)]) == 2
    (tmp_path / "bad.json").write_text(json.dumps({"records": [{"workload": "w", "id": "1", "runs": [{}]}]}))
    assert main([*argv[:-5], "--tau-from", str(tmp_path / "bad.json"), "--out", str(out)]) == 2


def test_scale_skips_verify_and_prefill_when_given_none(tmp_path):
    """A run split over device calls measures the verify-alone rows and the prefill in one call only."""
    out = tmp_path / "out"
    assert main(["bench", "scale", "--model", "tiny-qwen3_5", "--device", "cpu", "--methods", "ar",
                 "--verify-nodes", "--prefill", "--context", "8", "--new-tokens", "2", "--prompts", "1",
                 "--drafter", "random:1", "--adapter", "random:16", "--out", str(out)]) == 0  # fmt: skip
    report = json.loads((out / "report.json").read_text())
    assert report["verify"] == [] and report["prefill"] == [] and [r["method"] for r in report["rows"]] == ["ar"]


def _fake_report(path, rows, verify=(), prefill=(), device="gpu0", blas="cublaslt"):
    """A bench scale report.json with the given rows (method, budget, round ms)."""
    report = {"command": f"weaver bench scale {path.name}", "model": "m", "device": device, "dtype": "bf16",
              "blas": blas, "context": 8, "bytes": {"target": 10, "ar_step_read": 8, "drafter": 1, "adapter": 1},
              "copy_GBps": 1.0, "ar_floor_ms": 1.0, "verify": list(verify), "prefill": list(prefill),
              "rows": [{"method": m, "budget": b, "tau": 1.0, "rounds": 1, "tok_per_s": 1.0, "cuda_graphs": True,
                        "round_ms": ms, "stage_ms": {"verify": ms}} for m, b, ms in rows]}  # fmt: skip
    path.mkdir()
    (path / "report.json").write_text(json.dumps(report))
    return str(path / "report.json")


def test_scale_merge_keeps_the_first_ar_row_and_every_other_row(tmp_path):
    a = _fake_report(tmp_path / "a", [("ar", 0, 10.0), ("chain", 16, 12.0)])
    b = _fake_report(tmp_path / "b", [("ar", 0, 11.0), ("weaver", 64, 14.0)],
                     verify=[{"kind": "chain", "budget": 16, "nodes": 17, "depth": 16, "ms": 11.0}])
    out = tmp_path / "merged"
    assert main(["bench", "scale", "--merge", a, b, "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert [(r["method"], r["round_ms"]) for r in report["rows"]] == [("ar", 10.0), ("chain", 12.0), ("weaver", 14.0)]
    assert [p["round_over_ar"] for p in report["projection"]] == [1.2, 1.4]
    assert len(report["verify"]) == 1 and len(report["merged_from"]) == 2
    assert "Merged from 2 runs" in (out / "report.md").read_text()
    assert "GEMMs of several rows: cublaslt." in (out / "report.md").read_text()
    again = tmp_path / "again"  # a merged report merged again keeps the runs it was made of
    assert main(["bench", "scale", "--merge", str(out / "report.json"), "--out", str(again)]) == 0
    assert json.loads((again / "report.json").read_text())["merged_from"] == report["merged_from"]
    other = _fake_report(tmp_path / "c", [("ar", 0, 9.0)], device="gpu1")
    assert main(["bench", "scale", "--merge", a, other, "--out", str(out)]) == 2  # another machine: a clear error
    other_blas = _fake_report(tmp_path / "d", [("ar", 0, 9.0)], blas="cublas")  # another BLAS: not one configuration
    assert main(["bench", "scale", "--merge", a, other_blas, "--out", str(out)]) == 2
    assert main(["bench", "scale", "--merge", str(tmp_path / "none.json"), "--out", str(out)]) == 2
    (tmp_path / "list.json").write_text("[1, 2]")  # JSON, but not a report
    assert main(["bench", "scale", "--merge", a, str(tmp_path / "list.json"), "--out", str(out)]) == 2


def test_published_drafter_shape_at_27b():
    cfg = published_drafter_config(ModelConfig.from_hf(preset_config("qwen3.6-27b-shape")))
    assert cfg.target_layer_ids == [1, 16, 31, 46, 61] and cfg.mask_token_id == 248070
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (32, 8, 128)
    assert cfg.layer_types == ["sliding_attention"] * 4 + ["full_attention"] and cfg.sliding_window == 2048
