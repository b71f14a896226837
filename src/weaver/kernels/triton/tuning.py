"""Measured launch configurations of the verify kernels (tables written by scripts/gpu/verify_sweep.py).

`RuntimeOptions.tuning` names a table (through `weaver.kernels.launch_config`); without it, a GPU whose name
matches a packaged table (`tuned/`, e.g. h200.json, measured on an H200) uses that one, and any other GPU keeps
every kernel's built-in configuration ("none" forces that). The table is the sweep's JSON; its
"best" entry maps a kernel name to {shape key: {"config": [...], ...}}. A kernel looks its shape up
(keys below): the exact key, else the same shape at the nearest measured row / node count (the smallest one
above, else the largest below: a 17-node tree takes the 65-row launch, not the built-in one, which at
rows the sweep never saw was up to 3x slower, rounds/issue16_ab), else the kernel's default:

    gemm_rows          fused_gemv's row-tiled launch: GemmTiles (block_m, block_n, block_k, num_warps, num_stages)
    tree_attention     (block_r, block_s, num_warps, num_stages)
    tree_rope_kv_write (num_warps,)
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import torch

from weaver.kernels.launch_config import settings

PACKAGED = {"H200": Path(__file__).parent / "tuned" / "h200.json"}  # GPU name fragment -> measured table


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def gemm_rows_key(
    n_out: int, k: int, m: int, dtype: torch.dtype, out_dtype: torch.dtype,
    norm: bool, swiglu: bool, residual: bool, norm_out: bool,
) -> str:
    """The row-tiled GEMV's shape: output columns, K, rows, dtypes and the fused prologue / epilogues."""
    flags = [name for name, on in (("norm", norm), ("swiglu", swiglu), ("res", residual), ("norm_out", norm_out)) if on]
    return "-".join([f"n{n_out}", f"k{k}", f"m{m}", _dtype(dtype), f"out_{_dtype(out_dtype)}", *flags])


def attention_key(nodes: int, heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> str:
    """A tree-verify attention shape: B T nodes, query / kv heads, head dim, dtype (any prefix length)."""
    return f"t{nodes}-h{heads}-hkv{kv_heads}-d{head_dim}-{_dtype(dtype)}"


@functools.lru_cache(maxsize=4)
def _table(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f).get("best", {})
    except (OSError, ValueError) as err:
        raise ValueError(f"tuning={path!r} is not a readable tuning table: {err}") from None


@functools.lru_cache(maxsize=1)
def _packaged_path() -> str | None:
    """The packaged table of this process's GPU, if there is one (asked once)."""
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name()
    return next((str(path) for fragment, path in PACKAGED.items() if fragment in name), None)


def table_path() -> str | None:
    """The table in use: RuntimeOptions.tuning ('none': no table), else the GPU's packaged one, else None."""
    path = settings().tuning
    if path == "none":
        return None
    return path or _packaged_path()


_COUNT = re.compile(r"^[mt](\d+)$")  # the row (gemm_rows: m17) or node (attention: t17) field of a key


def _split_count(key: str) -> tuple[str, int | None]:
    """(key with its row / node field blanked, that count); (key, None) when it has none."""
    fields = key.split("-")
    for i, field in enumerate(fields):
        found = _COUNT.match(field)
        if found:
            return "-".join(fields[:i] + [field[0]] + fields[i + 1 :]), int(found.group(1))
    return key, None


def nearest_entry(entries: dict, key: str) -> dict | None:
    """`entries[key]`, else the entry of the same shape at the nearest count: smallest above, else largest below."""
    if key in entries:
        return entries[key]
    shape, count = _split_count(key)
    if count is None:
        return None
    counts = {}
    for other in entries:
        other_shape, other_count = _split_count(other)
        if other_shape == shape and other_count is not None:
            counts[other_count] = other
    above = [c for c in counts if c >= count]
    best = min(above) if above else max(counts, default=None)
    return None if best is None else entries[counts[best]]


def tuned(kernel: str, key: str) -> list | None:
    """The measured configuration of `kernel` at shape `key` or its nearest row count, or None (no table, or
    no measured row count of that shape)."""
    path = table_path()
    if not path:
        return None
    config = _resolved(path, kernel, key)
    return None if config is None else list(config)


@functools.lru_cache(maxsize=512)
def _resolved(path: str, kernel: str, key: str) -> tuple | None:
    """`tuned`'s lookup, once per (table, kernel, shape): launchers ask at every eager launch, and a shape the
    table lacks would otherwise parse every key of its kernel each time."""
    entry = nearest_entry(_table(path).get(kernel, {}), key)
    return None if entry is None else tuple(entry["config"])
