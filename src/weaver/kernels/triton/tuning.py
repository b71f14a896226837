"""Measured launch configurations of the verify kernels (tables written by scripts/gpu/verify_sweep.py).

`RuntimeOptions.tuning` names a table (through `weaver.kernels.launch_config`); without it, a GPU whose name
matches a packaged table (`tuned/`, e.g. h200.json, measured on an H200) uses that one, and any other GPU keeps
every kernel's built-in configuration ("none" forces that). The table is the sweep's JSON; its
"best" entry maps a kernel name to {shape key: {"config": [...], ...}}. A kernel looks its shape up
(keys below, exact match) and falls back to its default when the shape is not there:

    gemm_rows          fused_gemv's row-tiled launch: GemmTiles (block_m, block_n, block_k, num_warps, num_stages)
    tree_attention     (block_r, block_s, num_warps, num_stages)
    tree_rope_kv_write (num_warps,)
"""

from __future__ import annotations

import functools
import json
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


def tuned(kernel: str, key: str) -> list | None:
    """The measured configuration of `kernel` at shape `key`, or None (no table, or shape not in it)."""
    path = table_path()
    if not path:
        return None
    entry = _table(path).get(kernel, {}).get(key)
    return None if entry is None else list(entry["config"])
