"""The skinny-GEMM experiment (scripts/gpu/skinny_gemm_ab.py, session 50) computes x @ W^T: its sweep's numbers
mean something only if the kernel it times is right. Under the interpreter here, compiled with `--triton-full`."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from helpers.triton_env import DEVICE  # noqa: F401  (sets TRITON_INTERPRET before triton loads)

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "gpu"


def test_the_skinny_gemm_experiment_matches_torch(capsys):
    sys.path.insert(0, str(SCRIPTS))
    try:
        module = importlib.import_module("skinny_gemm_ab")
    finally:
        sys.path.remove(str(SCRIPTS))
    module.check()  # asserts every case (splits, ragged M / N / K) within 1e-5 of torch's fp32 product
    assert "matches torch on 36" in capsys.readouterr().out

