"""`weaver demo` (what `make demo` runs): one prompt decoded by every method, the fastest one's answer, a table.

Each method decodes the same prompt greedily (so all give the same tokens: lossless); the answer shown is the
fastest method's on this machine, then one row per method: tau (tokens per target pass) and tok/s. A short
warm-up generation per method first keeps one-time costs (CUDA graph capture, compilation) out of the table.
"""

from __future__ import annotations

import argparse
import sys

DEFAULT_PROMPT = "Explain in three sentences why the sky is blue."
METHODS = ("ar", "chain", "ddtree", "weaver")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("prompt", nargs="?", default=DEFAULT_PROMPT)
    p.add_argument("--model", default="smollm2")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--budget", type=int, default=32, help="tree budget of ddtree and weaver")
    p.add_argument("--device", default=None)


def run(args: argparse.Namespace) -> int:
    import weaver
    from weaver.bench.acceptance import warm_generate

    llm = weaver.LLM(args.model, device=args.device)
    methods = [m for m in METHODS if m == "ar" or llm.drafter is not None and (m != "weaver" or llm.adapter)]
    if len(methods) == 1:
        print(f"note: no trained drafter ships for {args.model}; showing ar only", file=sys.stderr)
    # chain drafts one token per block row; the trees spend --budget nodes
    budgets = {m: llm.drafter.config.block_size - 1 if m == "chain" else args.budget for m in methods if m != "ar"}
    results = {}
    for m in methods:
        llm.generate(args.prompt, method=m, budget=budgets.get(m, 1), max_new_tokens=8)  # warm-up
        results[m] = warm_generate(llm, args.prompt, method=m, budget=budgets.get(m, 1),
                                   max_new_tokens=args.max_new_tokens)  # timed warm, even in a new cache size
    ref = results["ar"].token_ids
    differ = [m for m, r in results.items() if r.token_ids != ref]
    best = max(results, key=lambda m: results[m].stats.tokens_per_s)
    print(results[best].text.strip())
    print()
    print(f"fastest here: {best}  ({llm.model.device}, {args.max_new_tokens} new tokens, greedy)")
    print(f"{'method':<8} {'budget':>6} {'tau':>6} {'tok/s':>8} {'x ar':>6}")
    ar_speed = results["ar"].stats.tokens_per_s
    for m, r in results.items():
        s = r.stats
        print(f"{m:<8} {budgets.get(m, '-'):>6} {s.tau:>6.2f} {s.tokens_per_s:>8.1f} {s.tokens_per_s / ar_speed:>6.2f}")
    if differ:
        print(f"error: {differ} gave other tokens than ar (a losslessness bug; please report it)", file=sys.stderr)
        return 1
    return 0
