"""Warm starts (`--init-from`): a new run begins from trained weights, so training adds up across runs.

A run's checkpoints resume it exactly (optimizer included); `--init-from` is for the next run: the weights of a
finished drafter or adapter (e.g. the shipped ones), a fresh optimizer and schedule. The checkpoint must fit
the target; a mismatch is a CheckpointError naming the field.
"""

from __future__ import annotations

from pathlib import Path

from weaver.errors import CheckpointError
from weaver.models.decoder import Decoder
from weaver.speculative.drafter import DFlashDrafter
from weaver.speculative.weaver import WeaverAdapter

__all__ = ["adapter_init", "drafter_init"]


def drafter_init(path: str | Path, target: Decoder, block_size: int) -> DFlashDrafter:
    """The drafter at `path` in fp32, checked against the target it will be trained for."""
    drafter = DFlashDrafter.from_pretrained(path)
    cfg, tcfg = drafter.config, target.config
    _same(path, "hidden_size", cfg.hidden_size, tcfg.hidden_size)
    _same(path, "vocab_size", cfg.vocab_size, tcfg.vocab_size)
    _same(path, "block_size", cfg.block_size, block_size)
    deepest = max(cfg.target_layer_ids)
    if deepest >= tcfg.num_hidden_layers:
        raise CheckpointError(f"{path}: taps target layer {deepest}, but the target has {tcfg.num_hidden_layers}")
    return drafter.float()


def adapter_init(path: str | Path, target: Decoder, drafter: DFlashDrafter) -> WeaverAdapter:
    """The adapter at `path` in fp32, checked against the target and the drafter whose pools it scores."""
    adapter = WeaverAdapter.from_pretrained(path)
    cfg = adapter.config
    _same(path, "target_hidden", cfg.target_hidden, target.config.hidden_size)
    _same(path, "max_depth", cfg.max_depth, drafter.config.block_size - 1)
    return adapter.float()


def _same(path: str | Path, field: str, got: int, want: int) -> None:
    if got != want:
        raise CheckpointError(f"{path}: {field} is {got}, but this run needs {want}")
