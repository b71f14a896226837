"""Per-method round statistics: tau, tok/s and the stage-time breakdown of one decoding round.

Runs every method (ar, chain, ddtree, weaver) at the given budgets on a few fixed prompts, with the
drafter and adapter given (or random ones), in one run; writes JSON and a markdown table.

    weaver bench rounds --model tiny-qwen3_5 --random-weights --new-tokens 48
    weaver bench rounds --model smollm2 --budgets 8 64 --new-tokens 32 --out rounds.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys

import torch

PROMPTS = [
    "Explain how a hash map works.",
    "Write a short story about a lighthouse keeper.",
    "List five prime numbers and say why they are prime.",
]
STAGES = ("prefill", "draft", "build", "verify", "accept", "commit")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2", help="registry name / directory (or preset)")
    parser.add_argument("--random-weights", action="store_true", help="build --model from a preset with random weights")
    parser.add_argument("--drafter", default="random", help="drafter checkpoint or 'random[:layers]'")
    parser.add_argument("--adapter", default="random", help="Weaver adapter checkpoint or 'random[:width]'")
    parser.add_argument("--methods", nargs="+", default=["ar", "chain", "ddtree", "weaver"])
    parser.add_argument("--budgets", nargs="+", type=int, default=[8, 32, 64])
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--out", default=None, help="JSON report path (a .md table is written next to it)")


def run(args: argparse.Namespace) -> int:
    import weaver

    kw = dict(device=args.device, dtype=args.dtype, drafter=args.drafter, adapter=args.adapter)
    if args.random_weights:
        llm = weaver.LLM.from_config(args.model, random_weights=True, seed=0, **kw)
        prompts = [[(7 * i + 3 * j) % llm.config.vocab_size for j in range(12)] for i in range(len(PROMPTS))]
    else:
        llm = weaver.LLM(args.model, **kw)
        prompts = PROMPTS
    llm.engine.timing = True  # synchronise the device at stage boundaries so stage times are real
    rows = []
    for method in args.methods:
        for budget in ([0] if method == "ar" else args.budgets):
            llm.generate(prompts[0], method=method, budget=max(budget, 1), max_new_tokens=4, ignore_eos=True)
            rounds = emitted = 0
            seconds = 0.0
            stages = dict.fromkeys(STAGES, 0.0)
            for prompt in prompts:
                out = llm.generate(prompt, method=method, budget=max(budget, 1), max_new_tokens=args.new_tokens,
                                   temperature=args.temperature, ignore_eos=True)
                rounds += out.stats.rounds
                emitted += out.stats.new_tokens - 1  # the prefill's token is not a round's
                seconds += out.stats.seconds
                for k, v in out.stats.stage_seconds.items():
                    stages[k] = stages.get(k, 0.0) + v
            per_round_ms = {k: 1e3 * v / max(rounds, 1) for k, v in stages.items() if k != "prefill"}
            rows.append({
                "method": method, "budget": budget, "tau": emitted / max(rounds, 1), "rounds": rounds,
                "tok_per_s": len(prompts) * args.new_tokens / seconds, "round_ms": per_round_ms,
                "cuda_graphs": method != "ar" and bool(getattr(llm._spec, "last_round_graphed", False)),
            })
            r = rows[-1]
            stage_txt = " ".join(f"{k} {v:.2f}" for k, v in per_round_ms.items() if v)
            print(f"{method:<7} budget {budget:>3}: tau {r['tau']:.2f} | {r['tok_per_s']:.1f} tok/s | "
                  f"ms/round: {stage_txt}" + (" (captured round)" if r["cuda_graphs"] else ""), flush=True)
    report = {
        "model": args.model, "random_weights": args.random_weights, "device": str(llm.model.device),
        "dtype": str(llm.model.dtype), "torch": torch.__version__, "python": platform.python_version(),
        "threads": torch.get_num_threads(), "new_tokens": args.new_tokens, "temperature": args.temperature,
        "command": " ".join(["weaver", "bench", "rounds", *sys.argv[3:]]), "rows": rows,
    }
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
        with open(args.out.rsplit(".", 1)[0] + ".md", "w") as f:
            f.write(markdown_table(report))
    return 0


def markdown_table(report: dict) -> str:
    head = "| method | budget | tau | tok/s | " + " | ".join(f"{s} ms/round" for s in STAGES[1:]) + " |\n"
    head += "|---|---:|---:|---:|" + "---:|" * (len(STAGES) - 1) + "\n"
    lines = [f"`{report['command']}` on {report['device']} ({report['dtype']})\n\n", head]
    for r in report["rows"]:
        cells = " | ".join(f"{r['round_ms'].get(s, 0.0):.2f}" for s in STAGES[1:])
        lines.append(f"| {r['method']} | {r['budget']} | {r['tau']:.2f} | {r['tok_per_s']:.1f} | {cells} |\n")
    return "".join(lines)
