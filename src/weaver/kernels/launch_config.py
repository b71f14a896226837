"""The launch settings every Triton launcher shares (PDL, the tuning table) and torch's BLAS library, set once
from RuntimeOptions.

The launchers are module functions called from deep inside the fused paths, so the launch-level options live
here rather than in every signature: the engine calls `configure(options, hidden_size)` when it is built, and a
captured graph keeps the launches it was captured with. Process-wide: the last engine built sets them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from weaver.errors import GenerationConfigError
from weaver.options import BLAS_LT_MIN_HIDDEN, RuntimeOptions

__all__ = ["BLAS_LT_MIN_HIDDEN", "LaunchSettings", "blas_library", "configure", "settings"]


@dataclass
class LaunchSettings:
    pdl: bool = True  # programmatic dependent launch where the GPU has it (Hopper and later)
    tuning: str | None = None  # a verify_sweep.py table, "none", or None: the GPU's packaged table


_SETTINGS = LaunchSettings()


def configure(options: RuntimeOptions, hidden_size: int | None = None, cuda: bool = False) -> None:
    """Take the launch-level fields of `options` (pdl, tuning) and, on CUDA, set torch's preferred BLAS library
    for a target of `hidden_size` (`blas_library`; None: torch's choice stays)."""
    _SETTINGS.pdl = options.pdl
    _SETTINGS.tuning = options.tuning
    library = blas_library(options, hidden_size)
    if cuda and library is not None:
        try:
            torch.backends.cuda.preferred_blas_library(library)
        except RuntimeError as exc:  # a torch built without that library: auto keeps torch's, a named one is an error
            if options.blas != "auto":
                raise GenerationConfigError(f"blas={options.blas!r}: {exc}") from None


def blas_library(options: RuntimeOptions, hidden_size: int | None) -> str | None:
    """The BLAS library `options.blas` asks for a target of `hidden_size`: auto resolves by BLAS_LT_MIN_HIDDEN
    (None without a size: torch's own default stays)."""
    if options.blas != "auto":
        return options.blas
    if hidden_size is None:
        return None
    return "cublaslt" if hidden_size >= BLAS_LT_MIN_HIDDEN else "cublas"


def settings() -> LaunchSettings:
    """The settings in force (read by the launchers at each launch)."""
    return _SETTINGS
