"""Per-method round statistics: tau, tok/s, the cost of one decoding round and its stage breakdown.

Runs every method (ar, chain, ddtree, weaver) at the given budgets on a few fixed prompts, with the
drafter and adapter given (or random ones), in one run; writes JSON and a markdown table. Round and
stage costs are medians over rounds; on CUDA the round is one captured graph (its device time from CUDA
events) and the stages come from a second pass with one graph per stage; "round / ar step" divides by
the ar row of the same run.

    weaver bench rounds --model tiny-qwen3_5 --random-weights --new-tokens 48
    weaver bench rounds --model smollm2 --budgets 8 64 --new-tokens 32 --out rounds.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys

import torch

from weaver.argtypes import positive_int
from weaver.bench.fallbacks import fallback_lines, warn_fallbacks
from weaver.options import add_runtime_arguments, runtime_options

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
    parser.add_argument("--budgets", nargs="+", type=positive_int, default=[8, 32, 64])
    parser.add_argument("--new-tokens", type=positive_int, default=48)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--out", default=None, help="JSON report path (a .md table is written next to it)")
    add_runtime_arguments(parser)


def run(args: argparse.Namespace) -> int:
    import weaver

    kw = dict(device=args.device, dtype=args.dtype, drafter=args.drafter, adapter=args.adapter,
              options=runtime_options(args))
    if args.random_weights:
        llm = weaver.LLM.from_config(args.model, random_weights=True, seed=0, **kw)
        prompts = [[(7 * i + 3 * j) % llm.config.vocab_size for j in range(12)] for i in range(len(PROMPTS))]
    else:
        llm = weaver.LLM(args.model, **kw)
        prompts = PROMPTS
    llm.engine.timing = True  # device times: CUDA events around captured graphs, else syncs between stages
    rows = []
    for method in args.methods:
        for budget in ([0] if method == "ar" else args.budgets):
            rows.append(measure(llm, prompts, method, budget, args))
            print(row_line(rows[-1], ar_step_ms(rows)), flush=True)
    report = {
        "model": args.model, "random_weights": args.random_weights, "device": str(llm.model.device),
        "dtype": str(llm.model.dtype), "torch": torch.__version__, "python": platform.python_version(),
        "threads": torch.get_num_threads(), "new_tokens": args.new_tokens, "temperature": args.temperature,
        "command": " ".join(["weaver", "bench", "rounds", *sys.argv[3:]]), "rows": rows,
        "compile_fallbacks": llm.engine.compile_fallbacks,
    }
    warn_fallbacks(report["compile_fallbacks"])
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
        with open(args.out.rsplit(".", 1)[0] + ".md", "w") as f:
            f.write(markdown_table(report))
    return 0


def generate_all(llm, prompts: list, method: str, budget: int, args: argparse.Namespace) -> dict:
    """Every prompt once (after a short warm-up call): rounds, emitted tokens, seconds, stage samples (s)."""
    budget = max(budget, 1)
    llm.generate(prompts[0], method=method, budget=budget, max_new_tokens=4, ignore_eos=True)
    total = {"rounds": 0, "emitted": 0, "seconds": 0.0, "samples": {}}
    for prompt in prompts:
        out = llm.generate(prompt, method=method, budget=budget, max_new_tokens=args.new_tokens,
                           temperature=args.temperature, ignore_eos=True)
        total["rounds"] += out.stats.rounds
        total["emitted"] += out.stats.new_tokens - 1  # the prefill's token is not a round's
        total["seconds"] += out.stats.seconds
        for stage, values in out.stats.stage_samples.items():
            total["samples"].setdefault(stage, []).extend(values)
    return total


def measure(llm, prompts: list, method: str, budget: int, args: argparse.Namespace) -> dict:
    """One row: tau, tok/s and the round cost in ms (medians over rounds; ar: the mean decode step).

    Captured rounds run twice: as ONE graph per round (tok/s and the round's device time) and as five
    graphs (each stage's device time). Eager rounds give both from one run (host clocks around stages).
    """
    options = llm.engine.options  # the run's own options come back afterwards
    try:
        run = generate_all(llm, prompts, method, budget, args)
        graphed = method != "ar" and "round" in run["samples"]
        stages = run["samples"]
        if graphed:
            llm.engine.options = options.replace(cuda_graphs="stages")
            stages = generate_all(llm, prompts, method, budget, args)["samples"]
    finally:
        llm.engine.options = options
    row = {"method": method, "budget": budget, "tau": run["emitted"] / max(run["rounds"], 1), "rounds": run["rounds"],
           "tok_per_s": len(prompts) * args.new_tokens / run["seconds"], "cuda_graphs": graphed}
    if method == "ar":  # one device time per chunk of decode steps: the mean step
        row["round_ms"] = 1e3 * sum(run["samples"].get("verify", [])) / max(run["rounds"], 1)
        row["stage_ms"] = {"verify": row["round_ms"]}
        return row
    if graphed:
        row["round_ms"] = 1e3 * statistics.median(run["samples"]["round"])
    else:  # eager: the round is the sum of its stages
        per_round = [sum(times) for times in zip(*(stages[s] for s in STAGES[1:]), strict=True)]
        row["round_ms"] = 1e3 * statistics.median(per_round)
    row["stage_ms"] = {s: 1e3 * statistics.median(stages[s]) for s in STAGES[1:]}
    return row


def ar_step_ms(rows: list[dict]) -> float | None:
    """The ar row's decode step of this run, if it has one."""
    return next((r["round_ms"] for r in rows if r["method"] == "ar"), None)


def row_line(r: dict, ar_ms: float | None) -> str:
    """One printed line per row."""
    stage_txt = " ".join(f"{k} {v:.2f}" for k, v in r["stage_ms"].items())
    ratio = f" = {r['round_ms'] / ar_ms:.2f} x ar step" if ar_ms and r["method"] != "ar" else ""
    graphs = " (captured round)" if r["cuda_graphs"] else ""
    return (f"{r['method']:<7} budget {r['budget']:>3}: tau {r['tau']:.2f} | {r['tok_per_s']:.1f} tok/s | round "
            f"{r['round_ms']:.3f} ms{ratio} | stage ms: {stage_txt}{graphs}")


def markdown_table(report: dict) -> str:
    head = ("| method | budget | tau | tok/s | round ms | round / ar step | "
            + " | ".join(f"{s} ms" for s in STAGES[1:]) + " |\n")
    head += "|---|---:|---:|---:|---:|---:|" + "---:|" * (len(STAGES) - 1) + "\n"
    how = ("the round from one captured graph per round, the stages from five (one per stage)"
           if any(r["cuda_graphs"] for r in report["rows"]) else "eager rounds, host clocks around each stage")
    speculative = any(r["method"] != "ar" for r in report["rows"])
    lines = [f"`{report['command']}` on {report['device']} ({report['dtype']}). "
             + (f"Speculative rows: medians over rounds; {how}; " if speculative else "")
             + "ar: the mean decode step.\n\n", head]
    ar_ms = ar_step_ms(report["rows"])
    for r in report["rows"]:
        ratio = f"{r['round_ms'] / ar_ms:.2f}" if ar_ms and r["method"] != "ar" else ""
        cells = " | ".join(f"{r['stage_ms'].get(s, 0.0):.3f}" for s in STAGES[1:])
        lines.append(f"| {r['method']} | {r['budget']} | {r['tau']:.2f} | {r['tok_per_s']:.1f} | {r['round_ms']:.3f} "
                     f"| {ratio} | {cells} |\n")
    fallbacks = fallback_lines(report.get("compile_fallbacks"))
    return "".join(lines) + "".join(f"\n{line}" for line in fallbacks)
