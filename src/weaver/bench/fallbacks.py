"""Stages that were meant to run compiled but fell back to eager: every benchmark report names them, so an eager
stage is never timed as a compiled one without a word (`Engine.compile_fallbacks`)."""

from __future__ import annotations

import sys

__all__ = ["fallback_lines", "warn_fallbacks"]


def fallback_lines(fallbacks: dict[str, str] | None) -> list[str]:
    """Markdown lines for a report: nothing when every compiled stage compiled."""
    if not fallbacks:
        return []
    lines = ["**Not compiled (ran eager; their times are not the compiled path's):**", ""]
    lines += [f"- {stage}: {error}" for stage, error in sorted(fallbacks.items())]
    return [*lines, ""]


def warn_fallbacks(fallbacks: dict[str, str]) -> None:
    """One stderr line per stage that fell back to eager."""
    for stage, error in sorted(fallbacks.items()):
        print(f"warning: stage {stage} ran eager, the compiler failed: {error}", file=sys.stderr)
