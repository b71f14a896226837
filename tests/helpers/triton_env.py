"""Shared set-up of the Triton kernel tests; import it before `weaver.kernels.triton`.

CPU: kernels run under TRITON_INTERPRET=1 (set before triton is imported: @triton.jit reads it at
decoration time). GPU: `WEAVER_TRITON_FULL=1` runs the same tests compiled, at full size.
"""

from __future__ import annotations

import os

import pytest
import torch

FULL = os.environ.get("WEAVER_TRITON_FULL", "0") == "1"
DEVICE = "cuda" if FULL else "cpu"
if FULL and not torch.cuda.is_available():
    pytest.skip("WEAVER_TRITON_FULL=1 needs CUDA", allow_module_level=True)
if not torch.cuda.is_available():  # before triton is imported: @triton.jit reads it at decoration time
    os.environ.setdefault("TRITON_INTERPRET", "1")
import triton  # noqa: E402,F401  (a test dependency: the kernels run under its interpreter on CPU)
