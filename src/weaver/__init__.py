"""weaver: lossless speculative decoding with trees from marginals."""

from __future__ import annotations

from weaver.errors import (
    CheckpointError,
    GenerationConfigError,
    InsufficientMemoryError,
    PromptError,
    UnknownModelError,
    UnsupportedArchitectureError,
    WeaverError,
)
from weaver.options import RuntimeOptions

__version__ = "0.1.0"

__all__ = [
    "LLM",
    "CheckpointError",
    "GenerationConfigError",
    "InsufficientMemoryError",
    "PromptError",
    "RuntimeOptions",
    "UnknownModelError",
    "UnsupportedArchitectureError",
    "WeaverError",
    "__version__",
]


def __getattr__(name: str):
    # Lazy so `import weaver.ops.gdn` does not pull the engine (and transformers) in.
    if name == "LLM":
        from weaver.llm import LLM

        return LLM
    raise AttributeError(f"module 'weaver' has no attribute {name!r}")
