"""Typed errors for user mistakes; the CLI turns each into one line and exit code 2."""

from __future__ import annotations


class WeaverError(Exception):
    """Base class of every error caused by the user's input rather than by a bug."""


class UnknownModelError(WeaverError):
    """A model name that is neither in the registry nor an existing directory."""


class CheckpointError(WeaverError):
    """A checkpoint directory that is missing, incomplete or corrupt."""


class UnsupportedArchitectureError(WeaverError):
    """A config.json whose architecture weaver does not implement."""


class InsufficientMemoryError(WeaverError):
    """Weights that cannot fit in the free memory of the device they should be allocated on."""


class PromptError(WeaverError):
    """An empty prompt, or one that does not fit in the context window."""


class GenerationConfigError(WeaverError):
    """Sampling or generation arguments out of range (temperature < 0, top_p outside (0, 1], ...)."""


class DataError(WeaverError):
    """A prompt-data package that is not installed, or a data file or directory that cannot be read or written."""


class UnknownWorkloadError(DataError, ValueError):
    """An evaluation workload name that is not one of `weaver.train.data.EVAL_WORKLOADS` (a ValueError too)."""
