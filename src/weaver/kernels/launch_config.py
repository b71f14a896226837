"""The launch settings every Triton launcher shares (PDL, the tuning table), set once from RuntimeOptions.

The launchers are module functions called from deep inside the fused paths, so the two launch-level options
live here rather than in every signature: the engine calls `configure(options)` when it is built, and a
captured graph keeps the launches it was captured with. Process-wide: the last engine built sets them.
"""

from __future__ import annotations

from dataclasses import dataclass

from weaver.options import RuntimeOptions

__all__ = ["LaunchSettings", "configure", "settings"]


@dataclass
class LaunchSettings:
    pdl: bool = True  # programmatic dependent launch where the GPU has it (Hopper and later)
    tuning: str | None = None  # a verify_sweep.py table, "none", or None: the GPU's packaged table


_SETTINGS = LaunchSettings()


def configure(options: RuntimeOptions) -> None:
    """Take the launch-level fields of `options` (pdl, tuning)."""
    _SETTINGS.pdl = options.pdl
    _SETTINGS.tuning = options.tuning


def settings() -> LaunchSettings:
    """The settings in force (read by the launchers at each launch)."""
    return _SETTINGS
