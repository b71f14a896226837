"""The plot of a training run: loss and the acceptance proxy (tau) per step, and top-1 per depth."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["plot_history"]


def plot_history(history: str | Path, out: str | Path, title: str = "") -> None:
    """Write a PNG of history.jsonl: loss, tau (and the drafter's tau when logged), top-1 at a few depths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(history)
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    steps = [r["step"] for r in rows]
    axes[0].plot(steps, [r["loss"] for r in rows])
    axes[0].set(title="loss", xlabel="step")
    if rows and "tau" in rows[0]:
        axes[1].plot(steps, [r["tau"] for r in rows], label="model")
        if "drafter_tau" in rows[0]:
            axes[1].plot(steps, [r["drafter_tau"] for r in rows], label="drafter alone")
        axes[1].legend()
    axes[1].set(title="acceptance proxy tau (chain)", xlabel="step")
    if rows and "top1" in rows[0]:
        depth = len(rows[0]["top1"])
        for d in sorted({0, 1, 3, 7, depth - 1} & set(range(depth))):
            axes[2].plot(steps, [r["top1"][d] for r in rows], label=f"depth {d + 1}")
        axes[2].legend()
    axes[2].set(title="top-1 agreement", xlabel="step")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
