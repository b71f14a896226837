"""Warm starts (`--init-from`): a new run begins from trained weights, so training adds up across runs.

A run's checkpoints resume it exactly (optimizer included); `--init-from` is for the next run: the weights of a
finished drafter or adapter (e.g. the shipped ones), a fresh optimizer and schedule. The checkpoint must fit
the target; a mismatch is a CheckpointError naming the field. `grow_drafter` (`--grow-to`) gives a trained
drafter more layers that start as the identity, so a deeper drafter starts where the shallow one ended;
`grow_adapter` (`--grow-layers`, `--grow-mlp`) does the same for an adapter's blocks and MLP width.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from weaver.errors import CheckpointError
from weaver.models.decoder import Decoder
from weaver.speculative.drafter import DFlashDrafter
from weaver.speculative.weaver import WeaverAdapter

__all__ = ["adapter_init", "drafter_init", "grow_adapter", "grow_drafter"]


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


@torch.no_grad()
def grow_drafter(drafter: DFlashDrafter, num_layers: int, seed: int = 0) -> DFlashDrafter:
    """`drafter` with layers appended up to `num_layers`, each new one the identity at first (its o_proj and
    down_proj zero, the rest drawn as a new drafter's), so its marginals are unchanged and training goes on from
    them with more depth. New layers repeat the last layer's type."""
    cfg, have = drafter.config, drafter.config.num_hidden_layers
    if num_layers < have:
        raise CheckpointError(f"--grow-to {num_layers}: the drafter already has {have} layers")
    extra = num_layers - have
    types = cfg.layer_types + cfg.layer_types[-1:] * extra
    grown_cfg = dataclasses.replace(cfg, num_hidden_layers=num_layers, layer_types=types)
    grown = DFlashDrafter(grown_cfg).init_random_weights(seed).to(device=drafter.device, dtype=drafter.dtype)
    missing, unexpected = grown.load_state_dict(drafter.state_dict(), strict=False)
    new_prefixes = tuple(f"layers.{i}." for i in range(have, num_layers))
    if unexpected or any(not key.startswith(new_prefixes) for key in missing):
        raise CheckpointError(f"cannot grow this drafter: unexpected {unexpected}, missing {missing}")
    for layer in grown.layers[have:]:
        for out_proj in (layer.self_attn.o_proj, layer.mlp.down_proj):
            out_proj.weight.zero_()
            if out_proj.bias is not None:
                out_proj.bias.zero_()
    return grown.train(drafter.training)


@torch.no_grad()
def grow_adapter(
    adapter: WeaverAdapter, num_layers: int | None = None, mlp_dim: int | None = None, seed: int = 0
) -> WeaverAdapter:
    """`adapter` with blocks appended up to `num_layers` (each the identity at first: its o_proj and MLP
    down-projection zero) and its MLPs widened to `mlp_dim` hidden units (the new units' down-projection columns
    zero), the rest drawn as a new adapter's; its scores are unchanged and training goes on with more capacity."""
    cfg = adapter.config
    layers, width = num_layers or cfg.num_layers, mlp_dim or cfg.mlp_dim
    if layers < cfg.num_layers or width < cfg.mlp_dim:
        raise CheckpointError(f"an adapter grows only: it has {cfg.num_layers} blocks and MLP width {cfg.mlp_dim}, "
                              f"asked for {layers} and {width}")  # fmt: skip
    grown = WeaverAdapter(dataclasses.replace(cfg, num_layers=layers, mlp_dim=width)).init_random_weights(seed)
    ref = next(adapter.parameters())
    grown = grown.to(device=ref.device, dtype=ref.dtype)
    old_width = cfg.mlp_dim
    new = grown.state_dict()
    for name, value in adapter.state_dict().items():
        if name not in new:
            raise CheckpointError(f"cannot grow this adapter: {name} has no place in the grown one")
        target = new[name]
        if target.shape == value.shape:
            target.copy_(value)
        elif name.endswith(("gate_up_proj.weight", "gate_up_proj.bias")):  # rows [gate; up], each widened
            target[:old_width] = value[:old_width]
            target[width : width + old_width] = value[old_width:]
        elif name.endswith(("fc1.weight", "fc1.bias")):
            target[:old_width] = value
        elif name.endswith(("down_proj.weight", "fc2.weight")):  # the new units' columns: zero
            target.zero_()
            target[:, :old_width] = value
        else:
            raise CheckpointError(f"cannot grow this adapter: {name} is {tuple(value.shape)}, "
                                  f"the grown one {tuple(target.shape)}")  # fmt: skip
    for block in grown.blocks[cfg.num_layers :]:
        for out_proj in (block.o_proj, block.mlp_down):
            out_proj.weight.zero_()
            if out_proj.bias is not None:
                out_proj.bias.zero_()
    return grown.train(adapter.training)


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
