"""Paired comparison of two sets of `weaver bench acceptance` reports (e.g. new weights against the shipped ones):
tau per method and workload over the prompts both sets measured, so a 40-prompt run can be held against the same
40 prompts of a full-set run. Each row also gives the mean per-prompt change with its standard error and how many
prompts rose / fell / held, so a 1% move on 48 prompts can be told from noise.

    python3 scripts/compare_acceptance.py --old OLD_RUN_DIR... --new NEW_RUN_DIR... > compare.md
    ... --pair weaver/64/w2=weaver/64     # compare a new run against an old one of another name
"""

from __future__ import annotations

import argparse
import statistics

from weaver.bench.acceptance import runs_by_prompt


def paired_row(label: str, workload: str, taus: list[tuple[float, float]]) -> str:
    """One markdown row: means, the mean change and its standard error, and rose / fell / held counts."""
    o, n = statistics.mean(t[0] for t in taus), statistics.mean(t[1] for t in taus)
    change = [t[1] - t[0] for t in taus]
    se = statistics.stdev(change) / len(change) ** 0.5 if len(change) > 1 else float("nan")
    counts = f"{sum(c > 0 for c in change)} / {sum(c < 0 for c in change)} / {sum(c == 0 for c in change)}"
    return f"| {label} | {workload} | {len(taus)} | {o:.2f} | {n:.2f} | {n - o:+.3f} ({se:.3f}) | {counts} |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", nargs="+", required=True, help="directories holding a report.json")
    parser.add_argument("--new", nargs="+", required=True, help="directories holding a report.json")
    parser.add_argument("--pair", nargs="*", default=[], metavar="NEW=OLD",
                        help="hold the new run NEW against the old run OLD (default: runs of the same name)")
    args = parser.parse_args()
    renames = dict(p.split("=", 1) for p in args.pair)
    old, new = runs_by_prompt(args.old), runs_by_prompt(args.new)
    pairs: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for (run, workload, prompt), r in sorted(new.items()):
        base = old.get((renames.get(run, run), workload, prompt))
        if base is not None:
            pairs.setdefault((run, workload), []).append((base["tau"], r["tau"]))
    print("| run | workload | prompts | old tau | new tau | mean change (s.e.) | rose / fell / held |")
    print("|---|---|---:|---:|---:|---:|---:|")
    macro: dict[str, list[tuple[float, float]]] = {}
    for (run, workload), taus in pairs.items():
        macro.setdefault(run, []).append((statistics.mean(t[0] for t in taus), statistics.mean(t[1] for t in taus)))
        print(paired_row(run, workload, taus))
    for run, means in macro.items():
        o, n = statistics.mean(t[0] for t in means), statistics.mean(t[1] for t in means)
        print(f"| {run} | macro | | {o:.2f} | {n:.2f} | {n - o:+.3f} | |")
    equal = [r.get("equal_to_ar") for r in new.values() if "equal_to_ar" in r]
    print(f"\nNew runs' greedy outputs equal to ar: {sum(map(bool, equal))} of {len(equal)}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
