"""Merge `weaver bench acceptance` reports run apart (one workload, method or slice of prompts per run, same code
and weights) into one table: tau per workload (the mean over every run's prompts of it; the header gives how
many) and macro for every run key, greedy equality with ar, and the issue-17 ratios. A prompt measured by several runs
counts once, as the last run given measured it: old reports first, then a rerun of one method with new weights,
give the new method against the old others.

    python3 scripts/merge_acceptance.py RUN_DIR... [--ratios weaver/64:chain/15 weaver/64:ddtree/64] > table.md
"""

from __future__ import annotations

import argparse
import statistics

from weaver.bench.acceptance import runs_by_prompt


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="directories holding a report.json")
    parser.add_argument("--ratios", nargs="*", default=[], help="A:B pairs of run keys: macro tau A / B")
    args = parser.parse_args()
    # (run key, workload) -> prompt id -> tau: a workload split over several runs pools its prompts (a report's
    # own per-workload tau is this mean over its records); a prompt measured twice counts once (the last run)
    prompts: dict[str, dict[str, dict[str, float]]] = {}
    equal: dict[str, dict[tuple[str, str], bool]] = {}  # the same last-run rule: (workload, id) -> equal to ar
    for (key, workload, prompt_id), r in runs_by_prompt(args.runs).items():
        prompts.setdefault(key, {}).setdefault(workload, {})[prompt_id] = r["tau"]
        if "equal_to_ar" in r:
            equal.setdefault(key, {})[(workload, prompt_id)] = bool(r["equal_to_ar"])
    tau = {key: {w: statistics.mean(ids.values()) for w, ids in per.items()} for key, per in prompts.items()}
    workloads = sorted({w for per in tau.values() for w in per})
    sizes = {w: max(len(per[w]) for per in prompts.values() if w in per) for w in workloads}  # prompts a workload
    print(f"| run | {' | '.join(f'tau {w} ({sizes[w]})' for w in workloads)} | macro tau | greedy equal to ar |")
    print("|---|" + "---:|" * (len(workloads) + 2))
    macro = {}
    for key, per in tau.items():
        cells = " | ".join(f"{per[w]:.3f}" if w in per else "" for w in workloads)
        macro[key] = statistics.mean(per.values()) if set(per) == set(workloads) else None
        eq = f"{sum(equal[key].values())} of {len(equal[key])}" if key in equal else ""
        print(f"| {key} | {cells} | {'' if macro[key] is None else f'{macro[key]:.3f}'} | {eq} |")
    for pair in args.ratios:
        a, b = pair.split(":")
        if macro.get(a) and macro.get(b):
            per = ", ".join(f"{w} {tau[a][w] / tau[b][w]:.2f}x" for w in workloads)
            print(f"\n{a} / {b}: macro {macro[a] / macro[b]:.3f}x ({per})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
