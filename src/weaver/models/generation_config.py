"""A checkpoint's `generation_config.json`: the sampling defaults its authors ship, and more EOS ids.

Only the fields the file sets count (no transformers defaults such as top_k=50 creep in), and the sampling
fields only when the file samples (`do_sample: true`), as transformers' `generate` reads it; a checkpoint
without the file, or one that does not sample, decodes greedily unless the caller says otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from weaver.errors import CheckpointError

FILE_NAME = "generation_config.json"
SAMPLING_FIELDS = ("temperature", "top_p", "top_k")


def read_generation_config(model_dir: str | Path) -> dict[str, Any]:
    """The JSON object in `model_dir/generation_config.json`, or {} when there is none."""
    file = Path(model_dir) / FILE_NAME
    if not file.is_file():
        return {}
    try:
        data = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{file} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{file} must hold a JSON object")
    return data


def sampling_defaults(generation_config: dict[str, Any]) -> dict[str, float | int]:
    """{temperature, top_p, top_k} the file sets, when it samples; {} (greedy) otherwise."""
    if not generation_config.get("do_sample", False):
        return {}
    out: dict[str, float | int] = {}
    for name in SAMPLING_FIELDS:
        value = generation_config.get(name)
        if value is not None:
            out[name] = int(value) if name == "top_k" else float(value)
    return out


def eos_token_ids(generation_config: dict[str, Any]) -> list[int]:
    """The file's `eos_token_id` (an int or a list) as a list."""
    value = generation_config.get("eos_token_id")
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [int(v) for v in value]
    return []
