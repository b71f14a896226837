"""`weaver.LLM("smollm2")` loads the drafter and adapter weaver ships (drafter=None opts out); a missing or
damaged shipped file is a clear CheckpointError (a one-line `error:` from the CLI), never a traceback."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import weaver
from weaver.cli import main
from weaver.errors import CheckpointError
from weaver.models import registry
from weaver.speculative.drafter import DFlashDrafter


@pytest.fixture
def shipped(tmp_path, monkeypatch):
    """The smollm2 entry pointed at a drafter folder under tmp_path (written by each test)."""
    spec = dataclasses.replace(registry.REGISTRY["smollm2"], drafter="drafter", adapter="")
    monkeypatch.setitem(registry.REGISTRY, "smollm2", spec)
    monkeypatch.setattr(registry, "ASSETS", tmp_path)
    return tmp_path / "drafter"


def _write_drafter(path, target_cfg) -> DFlashDrafter:
    d = DFlashDrafter.random(target_cfg, num_layers=1, num_target_features=2, block_size=4, seed=1)
    d.save_pretrained(path)
    return d


def test_shipped_drafter_loads_by_default_and_none_opts_out(shipped) -> None:
    cfg = weaver.LLM("smollm2", drafter=None, adapter=None, device="cpu").config
    want = _write_drafter(shipped, cfg)
    llm = weaver.LLM("smollm2", device="cpu")
    assert llm.drafter is not None and llm.adapter is None
    assert torch.equal(llm.drafter.fc.weight.float(), want.fc.weight.float())
    assert weaver.LLM("smollm2", drafter=None, device="cpu").drafter is None


def test_damaged_or_missing_shipped_weights_are_clear_errors(shipped, capsys) -> None:
    cfg = weaver.LLM("smollm2", drafter=None, adapter=None, device="cpu").config
    _write_drafter(shipped, cfg)
    weights = shipped / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # truncated
    with pytest.raises(CheckpointError, match="model.safetensors"):
        weaver.LLM("smollm2", device="cpu")
    assert main(["generate", "hi", "--max-new-tokens", "2", "--device", "cpu"]) == 2
    assert "error:" in capsys.readouterr().err
    weights.unlink()
    with pytest.raises(CheckpointError, match="safetensors"):
        weaver.LLM("smollm2", device="cpu")
