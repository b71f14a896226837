"""`weaver bench scale` end to end on a tiny hybrid model (CPU), and the published drafter shape."""

from __future__ import annotations

import json

import pytest

from weaver.bench.scale import published_drafter_config
from weaver.cli import main
from weaver.models.config import ModelConfig
from weaver.models.presets import preset_config


def test_scale_report_on_cpu(tmp_path):
    acceptance = {"summary": {
        "weaver/4": {"method": "weaver", "budget": 4, "greedy": True, "macro_tau": 3.0},
        "weaver/4/T=1/target_only": {"method": "weaver", "budget": 4, "greedy": False, "macro_tau": 9.0},
        "chain/15": {"method": "chain", "budget": 15, "greedy": True, "macro_tau": 2.0}}}  # fmt: skip
    (tmp_path / "acc.json").write_text(json.dumps(acceptance))
    out = tmp_path / "out"
    argv = ["bench", "scale", "--model", "tiny-qwen3_5", "--device", "cpu", "--methods", "ar", "chain", "weaver",
            "--budgets", "4", "--verify-nodes", "4", "--prefill", "16", "--context", "8", "--new-tokens", "3",
            "--prompts", "1", "--adapter", "random:16", "--draft-vocab", "first:64",
            "--tau-from", str(tmp_path / "acc.json"), "--out", str(out)]  # fmt: skip
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
    assert weaver["tau_paper"] is None and weaver["tau_measured"] == 3.0  # greedy runs win over T=1 ones
    assert "## Verify alone" in (out / "report.md").read_text()
    assert main([*argv[:-4], "--tau-from", str(tmp_path / "missing.json"), "--out", str(out)]) == 2


def test_scale_skips_verify_and_prefill_when_given_none(tmp_path):
    """A run split over device calls measures the verify-alone rows and the prefill in one call only."""
    out = tmp_path / "out"
    assert main(["bench", "scale", "--model", "tiny-qwen3_5", "--device", "cpu", "--methods", "ar",
                 "--verify-nodes", "--prefill", "--context", "8", "--new-tokens", "2", "--prompts", "1",
                 "--drafter", "random:1", "--adapter", "random:16", "--out", str(out)]) == 0  # fmt: skip
    report = json.loads((out / "report.json").read_text())
    assert report["verify"] == [] and report["prefill"] == [] and [r["method"] for r in report["rows"]] == ["ar"]


def test_published_drafter_shape_at_27b():
    cfg = published_drafter_config(ModelConfig.from_hf(preset_config("qwen3.6-27b-shape")))
    assert cfg.target_layer_ids == [1, 16, 31, 46, 61] and cfg.mask_token_id == 248070
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (32, 8, 128)
    assert cfg.layer_types == ["sliding_attention"] * 4 + ["full_attention"] and cfg.sliding_window == 2048
