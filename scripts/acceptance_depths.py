"""Where methods differ by depth: pooled over `weaver bench acceptance` reports, the share of rounds that accept at
least d drafted tokens, per workload and run (method/budget), from each record's accepted_per_depth histogram.

    python scripts/acceptance_depths.py --runs chain/15 ddtree/64 weaver/64 \
        --reports 'acceptance/cpu_session39/[A-G]*/' 'acceptance/cpu_session40/greedy_*/'

A run found in several reports counts each (workload, prompt) once: the last report's record, as the merge and
compare scripts read them (`weaver.bench.acceptance.runs_by_prompt`).
"""

from __future__ import annotations

import argparse
import glob
from pathlib import Path

from weaver.bench.acceptance import runs_by_prompt


def survival(histogram: list[int]) -> list[float]:
    """P(accepted >= d) for d = 0, 1, ... from counts of rounds by accepted drafted tokens."""
    total = sum(histogram)
    return [sum(histogram[d:]) / total for d in range(len(histogram))] if total else []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", nargs="+", required=True, help="report directories (with report.json) or globs")
    parser.add_argument("--runs", nargs="+", required=True, help="run keys, e.g. ddtree/64 weaver/64")
    parser.add_argument("--depths", type=int, default=10, help="columns d = 1..N")
    args = parser.parse_args()
    paths = [p for g in args.reports for p in sorted(glob.glob(g)) if Path(p, "report.json").is_file()]
    pooled: dict[tuple[str, str], list[int]] = {}
    for (key, workload, _), rec in runs_by_prompt(paths).items():
        if key not in args.runs:
            continue
        hist = pooled.setdefault((workload, key), [])
        counts = rec["accepted_per_depth"]
        hist.extend([0] * (len(counts) - len(hist)))
        for d, n in enumerate(counts):
            hist[d] += n
    cols = range(1, args.depths + 1)
    print(f"{len(paths)} reports. P(accepted >= d), rounds pooled over each workload's prompts:")
    print("| workload | run | rounds | " + " | ".join(f"d={d}" for d in cols) + " |")
    print("|---|---|---:|" + "---:|" * len(cols))
    for (workload, key), hist in sorted(pooled.items()):
        s = survival(hist) + [0.0] * (args.depths + 1)
        print(f"| {workload} | {key} | {sum(hist)} | " + " | ".join(f"{s[d]:.2f}" for d in cols) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
