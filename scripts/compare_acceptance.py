"""Paired comparison of two sets of `weaver bench acceptance` reports (e.g. new weights against the shipped ones):
tau per method and workload over the prompts both sets measured, so a 40-prompt run can be held against the same
40 prompts of a full-set run.

    python3 scripts/compare_acceptance.py --old OLD_RUN_DIR... --new NEW_RUN_DIR... > compare.md
"""

from __future__ import annotations

import argparse
import statistics

from weaver.bench.acceptance import runs_by_prompt


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", nargs="+", required=True, help="directories holding a report.json")
    parser.add_argument("--new", nargs="+", required=True, help="directories holding a report.json")
    args = parser.parse_args()
    old, new = runs_by_prompt(args.old), runs_by_prompt(args.new)
    pairs: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for key, r in sorted(new.items()):
        if key in old:
            pairs.setdefault(key[:2], []).append((old[key]["tau"], r["tau"]))
    print("| run | workload | prompts | old tau | new tau |")
    print("|---|---|---:|---:|---:|")
    macro: dict[str, list[tuple[float, float]]] = {}
    for (run, workload), taus in pairs.items():
        o, n = statistics.mean(t[0] for t in taus), statistics.mean(t[1] for t in taus)
        macro.setdefault(run, []).append((o, n))
        print(f"| {run} | {workload} | {len(taus)} | {o:.2f} | {n:.2f} |")
    for run, taus in macro.items():
        print(f"| {run} | macro | | {statistics.mean(t[0] for t in taus):.2f} | "
              f"{statistics.mean(t[1] for t in taus):.2f} |")
    equal = [r.get("equal_to_ar") for r in new.values() if "equal_to_ar" in r]
    print(f"\nNew runs' greedy outputs equal to ar: {sum(map(bool, equal))} of {len(equal)}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
