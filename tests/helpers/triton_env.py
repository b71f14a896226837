"""Shared set-up of the Triton kernel tests; import it before `weaver.kernels.triton`.

CPU: kernels run under TRITON_INTERPRET=1 (set before triton is imported: @triton.jit reads it at
decoration time). GPU: `pytest --triton-full` runs the same tests compiled, at full size.

`FULL` and `DEVICE` come from that option: tests/conftest.py's `pytest_configure` calls `configure()` once the
command line is parsed, before any test module is imported, so a module's `from helpers.triton_env import
DEVICE, FULL` reads the configured values.
"""

from __future__ import annotations

import os

import torch

FULL = False  # set by configure(): `pytest --triton-full`
DEVICE = "cpu"


def configure(full: bool) -> None:
    """Run the kernel tests compiled at full size on CUDA (`full`) or interpreted at small sizes on the CPU."""
    global FULL, DEVICE
    if full and not torch.cuda.is_available():
        import pytest

        raise pytest.UsageError("--triton-full needs a CUDA device")
    FULL = bool(full)
    DEVICE = "cuda" if FULL else "cpu"


if not torch.cuda.is_available():  # before triton is imported: @triton.jit reads it at decoration time
    os.environ.setdefault("TRITON_INTERPRET", "1")
import triton  # noqa: E402,F401  (a test dependency: the kernels run under its interpreter on CPU)


def pinned(*cases: dict):
    """hypothesis `@example`s of the interpreted run (each case: the test's keyword arguments): the tile
    boundaries, pad nodes and masked tails that the few generated examples must not leave to chance. The
    compiled run (--triton-full) draws full-size shapes instead, so it takes none of these small ones."""

    def wrap(test):
        if FULL:
            return test
        from hypothesis import example

        for case in reversed(cases):
            test = example(**case)(test)
        return test

    return wrap
