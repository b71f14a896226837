"""Merge the "best" entries of verify_sweep.py runs into a tuning table (the packaged one by default).

    python3 scripts/gpu/merge_tuning.py benchmarks/results/rounds/<run>/verify_sweep.json
    python3 scripts/gpu/merge_tuning.py new.json --table src/weaver/kernels/triton/tuned/h200.json

A shape in a newer sweep replaces the table's entry; the table's "source" lists every sweep it came from.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

PACKAGED = Path(__file__).resolve().parents[2] / "src" / "weaver" / "kernels" / "triton" / "tuned" / "h200.json"


def merge(table: dict, sweep: dict, source: str) -> dict:
    """`table` with `sweep`'s best entries added (the sweep's win on shapes both have); sources listed."""
    out = dict(table)
    best = {kernel: dict(entries) for kernel, entries in table.get("best", {}).items()}
    for kernel, entries in sweep.get("best", {}).items():
        best.setdefault(kernel, {}).update(entries)
    sources = out.get("source", [])
    sources = [sources] if isinstance(sources, str) else list(sources)
    commands = out.get("command", [])
    commands = [commands] if isinstance(commands, str) else list(commands)
    out.update(best=best, source=[*sources, source], command=[*commands, sweep.get("command", "")])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sweeps", nargs="+", type=Path, help="verify_sweep.py JSON reports, oldest first")
    parser.add_argument("--table", type=Path, default=PACKAGED, help="the table to update in place")
    args = parser.parse_args()
    table = json.loads(args.table.read_text())
    for path in args.sweeps:
        table = merge(table, json.loads(path.read_text()), str(path))
    args.table.write_text(json.dumps(table, indent=1) + "\n")
    counts = {kernel: len(entries) for kernel, entries in table["best"].items()}
    print(f"{args.table}: {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
