"""CPU experiment (issue 17): which weaver builder options (w, c) raise greedy tau at budget 64?

The device builder pops the best w frontier entries per adapter step (default ceil(budget / 16): 16 steps at
budget 64) and pushes each expanded node's top-c children (default 8). This decodes the first N prompts of each
evaluation workload greedily with weaver under each variant, prints tau per workload and the macro mean, and
checks every output against ar (a builder option changes which tree is built, never what is accepted).

    python3 scripts/weaver_builder_ab.py --eval 32 --variants w=1 c=16 --shard 0/2 --out /tmp/ab/s0.json

A variant is comma-separated builder options (`w=1,c=16`); `default` is the builder's defaults. Two keys are not
builder options but experiments on the bound adapter (never runtime switches): `r=0.8` scales its learned correction
of the drafter's logits (pool logit = prior + r * R[c] . y; r = 0 ranks by the drafter's marginals alone, as ddtree
does), `t=0.7` divides the whole pool logit by a temperature (session 32's experiment: sharpening the tree's
cross-depth comparisons). `--held-in N` decodes the first N single-turn training prompts of each source instead
(choose there, confirm on the evaluation prompts). Session 43's `m=` (the root's children scored by a mixture with the
drafter's depth-1 softmax, run at 10bac22) and `b=` (a per-depth bias on the search, run at 7c05bbe) lost and were
deleted (acceptance/cpu_session43/COMMAND.txt).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import statistics
import time

import weaver
from weaver.speculative.weaver import WeaverAdapter
from weaver.train.data import build_training_prompts, eval_prompts

WORKLOADS = ("mt-bench", "humaneval", "gsm_symbolic")
SOURCES = {"sharegpt": "chat", "stdlib_code": "code", "gsm_symbolic": "math"}  # held-in stand-ins for the workloads


def held_in_prompts(per_source: int, seed: int) -> list[tuple[str, str, str]]:
    """(workload, id, text) of the first `per_source` single-turn training prompts of each source."""
    prompts = build_training_prompts(seed=seed, max_prompts=40 * per_source, mix={s: 1.0 for s in SOURCES})
    out, count = [], dict.fromkeys(SOURCES, 0)
    for p in prompts:
        if count[p.source] < per_source and len(p.messages) == 1:
            out.append((SOURCES[p.source], p.id, p.messages[-1]["content"]))
            count[p.source] += 1
    return out


def patch_pool_prior() -> None:
    """begin_round divides the pools' prior by the adapter's `_score_temperature` (the `t=` experiment)."""
    original = WeaverAdapter.begin_round

    def begin_round(self, target_hidden, draft_hidden, pool_ids, pool_prior, *args, **kwargs):
        tau = getattr(self, "_score_temperature", 1.0)
        return original(self, target_hidden, draft_hidden, pool_ids, pool_prior / tau, *args, **kwargs)

    WeaverAdapter.begin_round = begin_round


def parse_variant(text: str) -> tuple[dict[str, int], float, float]:
    """`w=1,c=16,r=0.8,t=0.7` -> ({"w": 1, "c": 16}, 0.8, 0.7); `default` -> ({}, 1.0, 1.0)."""
    if text == "default":
        return {}, 1.0, 1.0
    items = dict(kv.split("=") for kv in text.split(","))
    scale, temperature = float(items.pop("r", 1.0)), float(items.pop("t", 1.0))
    return {k: int(v) for k, v in items.items()}, scale, temperature


def summarise(runs: list[str], baselines: list[str], aliases: dict[str, str] | None = None) -> None:
    """Mean tau per workload of each variant in `runs` (this script's JSON), beside the same prompts' chain, ddtree
    and weaver records in `baselines` (`weaver bench acceptance` report.json files, default builder options), and
    the macro mean over the workloads; `aliases` renames variants that are one configuration (c=16 -> default once
    16 is the default)."""
    base: dict[str, dict[str, float]] = {}
    for path in baselines:
        for rec in json.load(open(path))["records"]:
            for x in rec["runs"]:
                if x["greedy"] and not x.get("w"):
                    base.setdefault(rec["id"], {})[x["method"]] = x["tau"]
    per: dict[tuple[str, str], dict] = {}  # a prompt measured twice (a rerun) counts once, the later run
    for path in runs:
        for rec in json.load(open(path))["records"]:
            for variant, run in rec["runs"].items():
                variant = (aliases or {}).get(variant, variant)
                b = base.get(rec["id"], {})  # held-in prompts have no baseline records: their columns are nan
                per.setdefault((variant, rec["workload"]), {})[rec["id"]] = (
                    run["tau"], *(b.get(m, math.nan) for m in ("weaver", "ddtree", "chain")), run["equal"])
    per = {key: list(by_id.values()) for key, by_id in per.items()}
    print("| variant | workload | prompts | tau | baseline weaver | ddtree | chain | equal to ar |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for (variant, workload), xs in sorted(per.items()):
        means = [statistics.mean(x[i] for x in xs) for i in range(4)]
        print(f"| {variant} | {workload} | {len(xs)} | " + " | ".join(f"{m:.3f}" for m in means)
              + f" | {sum(x[4] for x in xs)}/{len(xs)} |")
    for variant in sorted({v for v, _ in per}):
        rows = [xs for (v, _), xs in per.items() if v == variant]
        if len(rows) < len(WORKLOADS):
            continue
        macro = [statistics.mean(statistics.mean(x[i] for x in xs) for xs in rows) for i in range(4)]
        print(f"| {variant} | macro | {sum(map(len, rows))} | " + " | ".join(f"{m:.3f}" for m in macro)
              + f" | weaver / ddtree {macro[0] / macro[2]:.3f} (baseline {macro[1] / macro[2]:.3f}) |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--summarise", nargs="+", metavar="JSON", help="print the table of earlier runs and exit")
    parser.add_argument("--baseline", nargs="*", default=[], help="report.json globs of the default builder's runs")
    parser.add_argument("--alias", nargs="*", default=[], metavar="OLD=NEW", help="count variant OLD as NEW")
    parser.add_argument("--eval", type=int, default=32, help="the first N prompts of each evaluation workload")
    parser.add_argument("--from", dest="start", type=int, default=0, help="... from prompt index S on (S < N)")
    parser.add_argument("--variants", nargs="+", default=["default"])
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    parser.add_argument("--held-in", type=int, default=0, help="the first N training prompts of each source instead")
    parser.add_argument("--budget", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--shard", default="0/1", help="i/n: this process takes prompts i, i+n, ...")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.summarise:
        summarise(args.summarise, [p for g in args.baseline for p in sorted(glob.glob(g))],
                  dict(a.rsplit("=", 1) for a in args.alias))
        return 0
    if not args.out:
        parser.error("--out is required to decode")
    i, n = (int(x) for x in args.shard.split("/"))
    if args.held_in:
        prompts = held_in_prompts(args.held_in, seed=0)[i::n]
    else:
        prompts = [(w, p.id, p.text) for w in args.workloads for p in eval_prompts(w)[args.start : args.eval]][i::n]
    llm = weaver.LLM("smollm2", device="cpu", dtype="fp32")
    llm.engine._bind_draft_models()
    bound_r = llm.adapter.residual_lm_head.clone()
    patch_pool_prior()
    records = []
    for workload, pid, text in prompts:
        start = time.time()
        gen = dict(max_new_tokens=args.new_tokens, temperature=0.0)
        ar = llm.generate(text, method="ar", **gen)
        rec = {"workload": workload, "id": pid, "runs": {}}
        for variant in args.variants:
            options, scale, temperature = parse_variant(variant)
            llm.adapter.residual_lm_head = bound_r * (scale / temperature)
            llm.adapter._score_temperature = temperature
            out = llm.generate(text, method="weaver", budget=args.budget, builder_options=options or None, **gen)
            rec["runs"][variant] = {"tau": out.stats.tau, "equal": out.token_ids == ar.token_ids,
                                    "per_depth": list(out.stats.accepted_per_depth)}  # fmt: skip
        records.append(rec)
        line = " ".join(f"{k} {v['tau']:.2f}" for k, v in rec["runs"].items())
        print(f"{workload:<12} {pid}: {line} ({time.time() - start:.0f} s)", flush=True)
        with open(args.out, "w") as f:  # after every prompt: a killed run keeps what it measured
            json.dump({"args": vars(args), "records": records}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
