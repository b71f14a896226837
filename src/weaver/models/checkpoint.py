"""Checkpoint directories (config.json + safetensors) for targets, drafters and adapters.

Every way a directory can be wrong (missing, bad JSON, no weights, corrupt file, a tensor too many,
too few or of the wrong shape) becomes one CheckpointError that names the file and the problem.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from weaver.errors import CheckpointError

WEIGHTS_NAME = "model.safetensors"


def checkpoint_dir(path: str | Path, what: str = "checkpoint") -> Path:
    """`path` as a Path; CheckpointError unless it is a directory."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{what} directory {path} does not exist")
    return path


def read_config_json(path: str | Path, what: str = "checkpoint") -> dict[str, Any]:
    """The JSON object in `path` (a config.json file, or a directory holding one)."""
    path = Path(path)
    file = path / "config.json" if path.is_dir() else path
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"no config.json for the {what} at {file}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{file} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{file} must hold a JSON object")
    return data


def weight_files(model_dir: Path, what: str = "checkpoint") -> list[Path]:
    """The safetensors files of a directory (through its index when sharded), each checked to exist."""
    index = model_dir / f"{WEIGHTS_NAME}.index.json"
    if index.exists():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise CheckpointError(f"{index} is not a valid safetensors index: {exc}") from None
        files = [model_dir / name for name in sorted(set(weight_map.values()))]
    else:
        files = sorted(model_dir.glob("*.safetensors"))
        if not files:
            raise CheckpointError(f"no *.safetensors weights in {what} {model_dir}")
    for file in files:
        if not file.exists():
            raise CheckpointError(f"missing weight file {file}")
    return files


def read_weight_file(file: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(file), device="cpu")
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read {file}: {exc}") from None


def read_tensors(model_dir: Path, what: str = "checkpoint") -> dict[str, torch.Tensor]:
    """Every tensor of a (small) checkpoint on the CPU, under its stored name."""
    tensors: dict[str, torch.Tensor] = {}
    for file in weight_files(model_dir, what):
        tensors.update(read_weight_file(file))
    return tensors


@torch.no_grad()
def copy_tensors(
    params: dict[str, torch.Tensor],
    tensors: dict[str, torch.Tensor],
    where: str | Path,
    rename: Callable[[str], str | None] = lambda name: name,
) -> set[str]:
    """Copy tensors into `params` by (renamed) name; returns the names filled.

    `rename` maps a stored name to a parameter name, or to None for tensors the module does not own.
    An unknown name or a shape mismatch is a CheckpointError; the caller checks for missing ones.
    """
    seen: set[str] = set()
    for raw_name, tensor in tensors.items():
        name = rename(raw_name)
        if name is None:
            continue
        target = _target(params, name, raw_name, tuple(tensor.shape), where)
        target.copy_(tensor.to(device=target.device, dtype=target.dtype))
        seen.add(name)
    return seen


@torch.no_grad()
def copy_file_tensors(
    params: dict[str, torch.Tensor],
    file: Path,
    rename: Callable[[str], str | None] = lambda name: name,
    on_copy: Callable[[int], object] | None = None,
) -> set[str]:
    """Stream one safetensors file into `params` tensor by tensor; returns the names filled.

    A tensor is read only when a parameter wants it (renamed to None: never read), converted to the parameter's
    dtype on the CPU and copied into it, so nothing larger than one stored tensor exists besides the parameters.
    Errors as `copy_tensors`; `on_copy(nbytes)` reports each parameter's bytes once copied (progress bars).
    """
    seen: set[str] = set()
    try:
        with safe_open(str(file), framework="pt", device="cpu") as handle:
            for raw_name in handle.keys():
                name = rename(raw_name)
                if name is None:
                    continue
                target = _target(params, name, raw_name, tuple(handle.get_slice(raw_name).get_shape()), file.name)
                target.copy_(handle.get_tensor(raw_name).to(dtype=target.dtype))
                seen.add(name)
                if on_copy is not None:
                    on_copy(target.numel() * target.element_size())
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read {file}: {exc}") from None
    return seen


def _target(params: dict[str, torch.Tensor], name: str, raw_name: str, shape: tuple[int, ...],
            where: str | Path) -> torch.Tensor:
    """The parameter a stored tensor fills; an unknown name or another shape is a CheckpointError."""
    if name not in params:
        raise CheckpointError(f"{where}: unexpected parameter {raw_name!r} for this config")
    target = params[name]
    if tuple(target.shape) != shape:
        raise CheckpointError(f"{where}: {raw_name} has shape {shape}, config expects {tuple(target.shape)}")
    return target


def check_complete(params: dict[str, torch.Tensor], seen: set[str], where: str | Path, hint: str = "") -> None:
    """CheckpointError listing the parameters no tensor filled."""
    missing = sorted(set(params) - seen)
    if missing:
        more = f" (+{len(missing) - 5} more)" if len(missing) > 5 else ""
        raise CheckpointError(f"checkpoint {where} lacks parameters {missing[:5]}{more}{hint}")


def stored_dtype(tensors: dict[str, torch.Tensor]) -> torch.dtype:
    """dtype of the first floating-point tensor (float32 when there is none)."""
    for tensor in tensors.values():
        if tensor.is_floating_point():
            return tensor.dtype
    return torch.float32


GIT_SHARD_BYTES = 15 << 20  # trained weights we commit: each file under git's 16 MiB limit


def write_checkpoint(path: str | Path, config: dict[str, Any], module: nn.Module,
                     max_shard_bytes: int | None = None) -> None:
    """Write `config.json` and the module's parameters (on the CPU) into `path`: one `model.safetensors`, or
    shards of at most `max_shard_bytes` with an HF index (files kept under git's and the device's limits)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {name: p.detach().to("cpu").contiguous() for name, p in module.named_parameters()}
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        if max_shard_bytes and shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += nbytes
    for old in path.glob("model*.safetensors*"):  # a previous save's files (another shard count)
        old.unlink()
    if len(shards) == 1:
        save_file(tensors, str(path / WEIGHTS_NAME), metadata={"format": "pt"})
    else:
        stem = WEIGHTS_NAME.removesuffix(".safetensors")
        weight_map = {}
        for i, shard in enumerate(shards, 1):
            name = f"{stem}-{i:05d}-of-{len(shards):05d}.safetensors"
            save_file(shard, str(path / name), metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(shard, name))
        index = {"metadata": {"total_size": sum(t.numel() * t.element_size() for t in tensors.values())},
                 "weight_map": weight_map}
        (path / f"{WEIGHTS_NAME}.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    (path / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
