"""Weaver checkpoints: the authors' released `.pth` (trymirai/weaver) -> a WeaverConfig and its state dict, and the
config of weaver's own directory format (`read_pretrained_config`, for WeaverAdapter.from_pretrained).

    cfg, state_dict, where = read_released(path_or_dict, target_hidden)   # then WeaverAdapter.from_released

The file is `torch.save({"config": {...}, "state_dict": {...}})` (`reference/checkpoint-formats.md` §3), read with
`torch.load(path, map_location="cpu", weights_only=True)`. Config keys map to WeaverConfig as

    d_model (= d_embed) -> target_hidden     d_rank, num_heads, num_layers, mlp_dim -> the same names
    K -> max_depth                           candidate_pool_size -> pool_size          rope_base -> rope_base

and `encoder_mode` = 3, `score_head` = 4 and `activation` ("swiglu" for the released layout, "gelu" for the older
one) are the only values weaver computes; a key left out takes that value. The two layouts are told apart by their
keys: `blocks.0.gate_up_proj.weight` is the released one (RoPE, SwiGLU), `blocks.0.fc1.weight` with `pos_emb` the
older one (learned positions, GELU). The state dict's names are the adapter's parameter names, checked strictly
(`check_keys`). Norms are WeaverNorm with bias and eps 1e-6, as the authors' code fixes them. Every problem is one
CheckpointError line.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch

from weaver.errors import CheckpointError
from weaver.models.checkpoint import read_config_json
from weaver.speculative.weaver_layers import RELEASED, WeaverConfig

__all__ = ["MODEL_TYPE", "check_keys", "read_pretrained_config", "read_released"]

CONFIG_NAME = "config.json"
MODEL_TYPE = "weaver_adapter"  # the model_type of weaver's own adapter directories

RELEASED_KEY = "blocks.0.gate_up_proj.weight"
OLDER_KEYS = ("blocks.0.fc1.weight", "pos_emb")
_FIXED = {"encoder_mode": 3, "score_head": 4}  # the only accepted values (what weaver's adapter computes)
_RENAMED = {"d_rank": "d_rank", "num_heads": "num_heads", "num_layers": "num_layers", "mlp_dim": "mlp_dim",
            "K": "max_depth", "candidate_pool_size": "pool_size"}  # fmt: skip
_KNOWN = {*_RENAMED, *_FIXED, "d_model", "d_embed", "activation", "rope_base"}
_REQUIRED = ("d_model", "d_rank", "num_heads", "mlp_dim", "K")


def read_released(
    source: str | Path | Mapping[str, Any], target_hidden: int | None = None
) -> tuple[WeaverConfig, dict[str, torch.Tensor], str]:
    """The checkpoint's WeaverConfig, its state dict (CPU tensors, stored names and dtypes) and a name for errors.

    `source`: a `.pth` path or the dict it holds. `target_hidden`: the target's hidden size the adapter must fit
    (None: not checked)."""
    where = "released Weaver checkpoint" if isinstance(source, Mapping) else str(source)
    raw = source if isinstance(source, Mapping) else _load(Path(source))
    if not isinstance(raw, Mapping) or not {"config", "state_dict"} <= set(raw):
        keys = sorted(raw) if isinstance(raw, Mapping) else type(raw).__name__
        raise CheckpointError(f"{where}: expected a dict with 'config' and 'state_dict', got {keys}")
    config, state_dict = raw["config"], raw["state_dict"]
    if not isinstance(config, Mapping) or not isinstance(state_dict, Mapping):
        raise CheckpointError(f"{where}: 'config' and 'state_dict' must both be dicts")
    bad = sorted(str(k) for k, v in state_dict.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor))
    if bad:
        raise CheckpointError(f"{where}: state_dict entries that are not named tensors: {bad[:5]}")
    return _config(config, state_dict, target_hidden, where), dict(state_dict), where


def read_pretrained_config(path: Path) -> WeaverConfig:
    """The WeaverConfig of a `save_pretrained` directory; a wrong model_type, unknown or bad field: CheckpointError."""
    raw = read_config_json(path, "Weaver checkpoint")
    if raw.get("model_type", MODEL_TYPE) != MODEL_TYPE:
        raise CheckpointError(f"{path / CONFIG_NAME} is not a Weaver adapter config (model_type {MODEL_TYPE!r})")
    known = {f.name for f in fields(WeaverConfig)}
    unknown = sorted(set(raw) - known - {"model_type"})
    if unknown:
        raise CheckpointError(f"{path / CONFIG_NAME}: unknown fields {unknown}")
    try:
        return WeaverConfig(**{k: v for k, v in raw.items() if k in known})
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{path / CONFIG_NAME}: {exc}") from None


def check_keys(expected: set[str], got: set[str], where: str) -> None:
    """Strict key check: CheckpointError naming the missing and the unexpected keys (five of each at most)."""
    missing, unexpected = sorted(expected - got), sorted(got - expected)
    if missing or unexpected:
        parts = [f"{name} keys {keys[:5]}" + (f" (+{len(keys) - 5} more)" if len(keys) > 5 else "")
                 for name, keys in (("missing", missing), ("unexpected", unexpected)) if keys]  # fmt: skip
        raise CheckpointError(f"{where}: state_dict does not match its config: {'; '.join(parts)}")


def _load(path: Path) -> Any:
    """torch.load of the file, weights only; any failure -> one CheckpointError line."""
    if not path.is_file():
        raise CheckpointError(f"released Weaver checkpoint {path} is not a file")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 (unpickling raises many types; every one is a bad file)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"cannot read {path} as a torch checkpoint: {first}") from None


def _config(config: Mapping[str, Any], state_dict: Mapping[str, torch.Tensor], target_hidden: int | None,
            where: str) -> WeaverConfig:  # fmt: skip
    """The WeaverConfig of the authors' config and the layout of their state dict (module docstring)."""
    if RELEASED_KEY in state_dict:
        layout, variant, activation = "released", RELEASED, "swiglu"
    elif all(k in state_dict for k in OLDER_KEYS):
        layout, variant, activation = "older", {"positions": "learned", "mlp": "gelu"}, "gelu"
    else:
        raise CheckpointError(f"{where}: neither the released layout ({RELEASED_KEY}) nor the older one "
                              f"({' + '.join(OLDER_KEYS)})")  # fmt: skip
    for key, value in _FIXED.items():
        if config.get(key, value) != value:
            raise CheckpointError(f"{where}: {key}={config[key]!r} is not supported (weaver computes {key}={value})")
    if config.get("activation", activation) != activation:
        raise CheckpointError(f"{where}: activation={config['activation']!r} is not supported for the {layout} "
                              f"layout (weaver computes {activation!r})")  # fmt: skip
    missing = [k for k in _REQUIRED if k not in config]
    if missing:
        raise CheckpointError(f"{where}: config lacks {missing}")
    unknown = sorted(set(config) - _KNOWN)
    if unknown:
        warnings.warn(f"{where}: ignoring unknown config keys {unknown}", stacklevel=3)
    d_model, d_embed = config["d_model"], config.get("d_embed", config["d_model"])
    if d_model != d_embed:
        raise CheckpointError(f"{where}: d_model={d_model} != d_embed={d_embed}; weaver's adapter needs the target's "
                              "hidden and embedding widths equal")  # fmt: skip
    if target_hidden is not None and d_model != target_hidden:
        raise CheckpointError(f"{where}: the adapter is for a target of hidden size d_model={d_model}, this target's "
                              f"is {target_hidden}")  # fmt: skip
    blocks = {k.split(".")[1] for k in state_dict if k.startswith("blocks.")}
    fields = {new: config[old] for old, new in _RENAMED.items() if old in config}
    fields.setdefault("num_layers", len(blocks) or 1)
    if layout == "released":
        fields["rope_base"] = config.get("rope_base", 10000.0)
    try:
        return WeaverConfig(target_hidden=d_model, norm_bias=True, rms_norm_eps=1e-6, **fields, **variant)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{where}: {exc}") from None
