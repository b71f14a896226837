"""CPU experiment (issue 17): does sharpening the Weaver adapter's scores raise greedy tau at a fixed budget?

The weaver tree is grown best-first by path log-probability under the adapter, which is trained towards the
target's conditional (KL, or the acceptance-targeting mix). Greedy verification accepts a node only when its
path is the target's argmax path, so the probability that matters is P(token = target's argmax), sharper than
the target's softmax wherever the target is unsure between tokens it ranks alike. A temperature tau < 1 on the
pool logits (prior and learned part alike: logit / tau) moves the tree's comparisons across depths towards that,
without changing any sibling order. This script decodes held-in prompts (training prompts, never the evaluation
sets) greedily with ar, ddtree and weaver at each temperature and prints tau per workload and the macro mean; every
output is checked against ar (the temperature changes which tree is built, never what is accepted).

    python3 scripts/weaver_temperature_ab.py --per-source 8 --temperatures 1.0 0.7 0.5 --shard 0/2 --out /tmp/t0.json

The temperature is applied by wrapping the loaded adapter (its R rows and the pools' prior divided by tau): an
experiment, not a runtime switch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import weaver
from weaver.speculative.weaver import WeaverAdapter
from weaver.train.data import build_training_prompts, eval_prompts

SOURCES = {"sharegpt": "chat", "stdlib_code": "code", "gsm_symbolic": "math"}  # held-in stand-ins for the workloads


def held_in_prompts(per_source: int, seed: int) -> list[tuple[str, str, str]]:
    """(workload, id, text) of the first `per_source` single-turn training prompts of each source."""
    prompts = build_training_prompts(seed=seed, max_prompts=40 * per_source,
                                     mix={s: 1.0 for s in SOURCES})  # fmt: skip
    out, count = [], dict.fromkeys(SOURCES, 0)
    for p in prompts:
        if count[p.source] < per_source and len(p.messages) == 1:
            out.append((SOURCES[p.source], p.id, p.messages[-1]["content"]))
            count[p.source] += 1
    return out


def evaluation_prompts(first: int) -> list[tuple[str, str, str]]:
    """(workload, id, text) of the first `first` prompts of each evaluation workload (issue 17's three)."""
    return [(w, p.id, p.text) for w in ("mt-bench", "humaneval", "gsm_symbolic") for p in eval_prompts(w)[:first]]


def set_temperature(adapter: WeaverAdapter, tau: float, original_r: torch.Tensor) -> None:
    """Pool logits / tau: R's rows (the learned part) here, the pools' prior in begin_round (patched once)."""
    adapter.residual_lm_head = original_r / tau
    adapter._score_temperature = tau


def patch_begin_round() -> None:
    original = WeaverAdapter.begin_round

    def begin_round(self, target_hidden, draft_hidden, pool_ids, pool_prior, *args, **kwargs):
        tau = getattr(self, "_score_temperature", 1.0)
        return original(self, target_hidden, draft_hidden, pool_ids, pool_prior / tau, *args, **kwargs)

    WeaverAdapter.begin_round = begin_round


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-source", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--temperatures", nargs="+", type=float, default=[1.0, 0.7, 0.5])
    parser.add_argument(
        "--eval",
        type=int,
        default=0,
        help="instead of held-in prompts: the first N of each evaluation workload (to check a choice)",
    )
    parser.add_argument("--no-ddtree", action="store_true", help="weaver only")
    parser.add_argument("--budget", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--shard", default="0/1", help="i/n: this process takes prompts i, i+n, ...")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    i, n = (int(x) for x in args.shard.split("/"))
    prompts = (evaluation_prompts(args.eval) if args.eval else held_in_prompts(args.per_source, args.seed))[i::n]
    llm = weaver.LLM("smollm2", device="cpu", dtype="fp32")
    llm.engine._bind_draft_models()
    adapter = llm.adapter
    original_r = adapter.residual_lm_head.clone()
    patch_begin_round()
    records = []
    for workload, pid, text in prompts:
        start = time.time()
        gen = dict(max_new_tokens=args.new_tokens, temperature=0.0)
        ar = llm.generate(text, method="ar", **gen)
        rec = {"workload": workload, "id": pid, "runs": {}}
        if not args.no_ddtree:
            set_temperature(adapter, 1.0, original_r)
            out = llm.generate(text, method="ddtree", budget=args.budget, **gen)
            rec["runs"]["ddtree"] = {"tau": out.stats.tau, "equal": out.token_ids == ar.token_ids}
        for tau in args.temperatures:
            set_temperature(adapter, tau, original_r)
            out = llm.generate(text, method="weaver", budget=args.budget, **gen)
            rec["runs"][f"weaver@{tau}"] = {"tau": out.stats.tau,
                                            "equal": out.token_ids == ar.token_ids}  # fmt: skip
        records.append(rec)
        line = " ".join(f"{k} {v['tau']:.2f}" for k, v in rec["runs"].items())
        print(f"{workload:<5} {pid}: {line} ({time.time() - start:.0f} s)", flush=True)
    with open(args.out, "w") as f:
        json.dump({"args": vars(args), "records": records}, f, indent=1)
    summarise(records)
    return 0


def summarise(records: list[dict]) -> None:
    """tau per workload (mean over prompts) and the macro mean, per run; greedy equality with ar."""
    runs = list(records[0]["runs"]) if records else []
    workloads = sorted({r["workload"] for r in records})
    print(f"{'run':<14} " + " ".join(f"{w:>6}" for w in workloads) + "  macro  equal")
    for run in runs:
        per = [statistics.mean(r["runs"][run]["tau"] for r in records if r["workload"] == w) for w in workloads]
        equal = sum(r["runs"][run]["equal"] for r in records)
        print(
            f"{run:<14} "
            + " ".join(f"{t:6.2f}" for t in per)
            + f"  {statistics.mean(per):5.2f}  {equal}/{len(records)}"
        )


if __name__ == "__main__":
    raise SystemExit(main())
