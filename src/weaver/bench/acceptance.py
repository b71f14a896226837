"""`weaver bench acceptance`: tau per workload, method and budget, the per-depth acceptance, and losslessness.

For every evaluation prompt (`weaver.train.data.eval_prompts`: MT-Bench turn 1, HumanEval, gsm_symbolic;
ShareGPT on request) it decodes greedily with `ar` and with chain (the drafter's block), ddtree and weaver at
each budget, checks that every speculative output equals ar's token for token, and records tau (tokens per
verify pass, bonus included), the accepted tokens per depth and tok/s; at T = 1 (one budget) it runs weaver
with target-only and with traversal verification. Writes JSON (every prompt), markdown (per workload and the
macro-average) and a PNG of tau vs budget. tok/s is always a warm run's: a generation that captured or
compiled a round (the first of its method, budget and cache size on CUDA) is run again and timed then.

    weaver bench acceptance --drafter DIR --adapter DIR --limit 10 --out benchmarks/results/acceptance/cpu
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import statistics
import sys
import time
from pathlib import Path

from weaver.argtypes import positive_int
from weaver.bench.fallbacks import fallback_lines, warn_fallbacks
from weaver.options import add_runtime_arguments, runtime_options

DEFAULT_WORKLOADS = ["mt-bench", "humaneval", "gsm_symbolic"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2", help="registry name or directory")
    parser.add_argument("--drafter", default="auto", help="drafter checkpoint (default auto: the model's trained one)")
    parser.add_argument("--adapter", default="auto", help="adapter checkpoint (default auto: the model's trained one)")
    parser.add_argument("--draft-vocab", default=None, metavar="TOKEN_MAP",
                        help="the drafter scores only this token map's tokens (`weaver data token-map`)")
    parser.add_argument("--workloads", nargs="+", default=DEFAULT_WORKLOADS)
    parser.add_argument("--limit", type=positive_int, default=None, help="prompts per workload (default: all)")
    parser.add_argument("--eval-dir", default=None,
                        help="read <dir>/<workload>.jsonl (`weaver data build`'s eval/) instead of the packages")
    parser.add_argument("--methods", nargs="+", default=["chain", "ddtree", "weaver"])
    parser.add_argument("--budgets", nargs="+", type=positive_int, default=[16, 32, 64, 128])
    parser.add_argument("--chain-budget", type=positive_int, default=15, help="chain drafts (block 16: 15)")
    parser.add_argument("--weaver-widths", nargs="+", type=int, default=[0],
                        help="weaver's w (nodes expanded per adapter step) to run at each budget; 0: the builder's "
                             "default ceil(budget / 16). Fewer, wider steps make the build cheaper")
    parser.add_argument("--sampled-budget", type=int, default=64,
                        help="budget of the T=1 runs: target-only for every method, traversal too for weaver (0: none)")
    parser.add_argument("--max-new-tokens", type=positive_int, default=128)
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--out", required=True, help="output directory (report.json, report.md, tau.png)")
    add_runtime_arguments(parser)


def _runs(methods: list[str], budgets: list[int], chain_budget: int,
          widths: list[int] = (0,)) -> list[tuple[str, int, int]]:  # fmt: skip
    """(method, budget, w) of every speculative run; w = 0: the builder's default (and the only one but weaver's)."""
    out = []
    for m in methods:
        if m == "chain":
            out.append((m, chain_budget, 0))
        else:
            out += [(m, b, w) for b in budgets for w in (widths if m == "weaver" else [0])]
    return out


def _sampled_runs(methods: list[str], budget: int, chain_budget: int) -> list[tuple[str, int, str]]:
    """(method, budget, rule) of the T=1 runs: target-only for every speculative method asked for (chain at its
    block), traversal too for weaver (the rule its adapter's q serves); none with budget 0."""
    if not budget:
        return []
    out = []
    for m in methods:
        if m != "ar":
            rules = ("target_only", "traversal") if m == "weaver" else ("target_only",)
            out += [(m, chain_budget if m == "chain" else budget, rule) for rule in rules]
    return out


def run(args: argparse.Namespace) -> int:
    import torch
    from tqdm.auto import tqdm

    import weaver

    llm = weaver.LLM(args.model, device=args.device, dtype=args.dtype, drafter=args.drafter, adapter=args.adapter,
                     options=runtime_options(args), draft_vocab=args.draft_vocab)
    prompts = {w: _prompts(w, args.limit, args.eval_dir) for w in args.workloads}
    runs = _runs(args.methods, args.budgets, args.chain_budget, args.weaver_widths)
    sampled = _sampled_runs(args.methods, args.sampled_budget, args.chain_budget)
    records = []
    total = sum(len(p) for p in prompts.values()) * (1 + len(runs) + len(sampled))
    bar = tqdm(total=total, desc="acceptance", unit="gen")
    for workload, items in prompts.items():
        for item in items:
            gen = functools.partial(warm_generate, llm, item.text, max_new_tokens=args.max_new_tokens,
                                    temperature=0.0)
            ar = gen(method="ar")
            bar.update()
            rec = {"workload": workload, "id": item.id, "ar": _stats(ar), "runs": []}
            for method, budget, w in runs:
                out = gen(method=method, budget=budget, builder_options={"w": w} if w else None)
                rec["runs"].append({"method": method, "budget": budget, "w": w or None, "greedy": True,
                                    "equal_to_ar": out.token_ids == ar.token_ids, **_stats(out)})
                bar.update()
            for method, budget, rule in sampled:
                out = gen(method=method, budget=budget, temperature=1.0, seed=0, verify=rule)
                rec["runs"].append({"method": method, "budget": budget, "greedy": False, "rule": rule,
                                    **_stats(out)})
                bar.update()
            records.append(rec)
    bar.close()
    report = {"command": " ".join(sys.argv), "model": args.model, "device": str(llm.model.device),
              "dtype": str(llm.model.dtype), "host": platform.node(), "torch": torch.__version__,
              "max_new_tokens": args.max_new_tokens, "time": time.strftime("%Y-%m-%d %H:%M:%S"),
              "summary": summarise(records), "compile_fallbacks": llm.engine.compile_fallbacks, "records": records}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "report.md").write_text(markdown(report))
    plot(report["summary"], out / "tau.png")
    print(markdown(report))
    warn_fallbacks(report["compile_fallbacks"])
    bad = [(r["workload"], r["id"], x["method"], x["budget"], x.get("w")) for r in records for x in r["runs"]
           if x.get("equal_to_ar") is False]
    if bad:
        print(f"error: {len(bad)} greedy outputs differ from ar: {bad[:5]}", file=sys.stderr)
        return 1
    return 0


def warm_generate(llm, prompt, **kwargs):
    """`llm.generate`, repeated once when the call captured or compiled a round (the first use of a method,
    budget and cache size on CUDA): tok/s is a warm run's, never one that paid for compilation. The repeat gives
    the same tokens (greedy, or seeded sampling)."""
    before = llm.engine.captured_count
    out = llm.generate(prompt, **kwargs)
    if llm.engine.captured_count != before:
        out = llm.generate(prompt, **kwargs)
    return out


def _prompts(workload: str, limit: int | None, eval_dir: str | None) -> list:
    """The workload's evaluation prompts, from the packages or from a directory `weaver data build` wrote."""
    from weaver.train.data import eval_prompts, read_prompts

    if eval_dir is None:
        return eval_prompts(workload, limit)
    return read_prompts(Path(eval_dir) / f"{workload}.jsonl")[:limit]


def _stats(out) -> dict:
    s = out.stats
    return {"tau": s.tau, "rounds": s.rounds, "new_tokens": s.new_tokens, "tok_s": s.tokens_per_s,
            "seconds": s.seconds, "prefill_s": s.stage_seconds.get("prefill"),  # where a generation's time goes
            "accepted_per_depth": s.accepted_per_depth}


def run_key(method: str, budget: int, width: int | None = None, greedy: bool = True, rule: str | None = None) -> str:
    """A run's name in a report's summary (and in the scripts that merge or compare reports): method/budget, then
    /w<w> for a weaver width and /T=1/<rule> for a sampled run."""
    return f"{method}/{budget}" + (f"/w{width}" if width else "") + ("" if greedy else f"/T=1/{rule}")


def runs_by_prompt(runs: list[str]) -> dict[tuple[str, str, str], dict]:
    """(run key, workload, prompt id) -> that run's record, over every report given (a report.json, or a directory
    holding one); a prompt measured by several reports keeps the last one's (the scripts that merge or compare
    reports read them so)."""
    out = {}
    for run in runs:
        path = Path(run) if Path(run).is_file() else Path(run) / "report.json"
        for record in json.loads(path.read_text())["records"]:
            for r in record["runs"]:
                key = run_key(r["method"], r["budget"], r.get("w"), r.get("greedy", True), r.get("rule"))
                out[(key, record["workload"], record["id"])] = r
    return out


def summarise(records: list[dict]) -> dict:
    """Per (run key): per workload mean tau / tok/s / acceptance rate per depth, the macro-average, and the median
    prefill and per-round milliseconds over every prompt."""
    keys: dict[str, dict] = {}
    for rec in records:
        rows = [("ar", 0, True, None, rec["ar"])] + [
            (x["method"], x["budget"], x["greedy"], x.get("rule"), x) for x in rec["runs"]]
        for method, budget, greedy, rule, x in rows:
            width = x.get("w")
            key = run_key(method, budget, width, greedy, rule)
            w = keys.setdefault(key, {"method": method, "budget": budget, "w": width, "greedy": greedy, "rule": rule,
                                      "per_workload": {}})["per_workload"].setdefault(rec["workload"], [])
            w.append(x)
    for entry in keys.values():
        per = {}
        every = [x for xs in entry["per_workload"].values() for x in xs]
        for workload, xs in entry["per_workload"].items():
            rounds = sum(x["rounds"] for x in xs)
            depth = max((len(x["accepted_per_depth"]) for x in xs), default=0)
            acc = [sum(x["accepted_per_depth"][d] for x in xs if d < len(x["accepted_per_depth"])) / max(rounds, 1)
                   for d in range(depth)]
            per[workload] = {"tau": statistics.mean(x["tau"] for x in xs),
                             "tok_s": statistics.mean(x["tok_s"] for x in xs),
                             "accept_rate_per_depth": acc, "prompts": len(xs)}
        entry["per_workload"] = per
        entry["macro_tau"] = statistics.mean(v["tau"] for v in per.values())
        entry["macro_tok_s"] = statistics.mean(v["tok_s"] for v in per.values())
        # where a generation's time goes: its prefill, and the rest per round (median over the prompts)
        timed = [x for x in every if x.get("prefill_s") is not None and x["rounds"]]
        entry["prefill_ms"] = statistics.median(1e3 * x["prefill_s"] for x in timed) if timed else None
        entry["round_ms"] = (statistics.median(1e3 * (x["seconds"] - x["prefill_s"]) / x["rounds"] for x in timed)
                             if timed else None)  # fmt: skip
    ar = keys.get("ar/0", {}).get("macro_tok_s") or 0.0
    for entry in keys.values():
        entry["speedup_vs_ar"] = entry["macro_tok_s"] / ar if ar else None
    return keys


def markdown(report: dict) -> str:
    summary = report["summary"]
    workloads = sorted({w for e in summary.values() for w in e["per_workload"]})
    head = (f"| run | {' | '.join(f'tau {w}' for w in workloads)} | macro tau | macro tok/s | x ar | prefill ms | "
            "ms / round |")
    lines = [f"# Acceptance — {report['model']} on {report['device']} ({report['dtype']}), "
             f"{report['max_new_tokens']} new tokens", "", f"`{report['command']}`", "", head,
             "|" + "---|" * (len(workloads) + 6)]
    for key, e in summary.items():
        taus = " | ".join(f"{e['per_workload'][w]['tau']:.2f}" if w in e["per_workload"] else "" for w in workloads)
        x = f"{e['speedup_vs_ar']:.2f}" if e["speedup_vs_ar"] else ""
        times = " | ".join("" if e.get(k) is None else f"{e[k]:.3f}" for k in ("prefill_ms", "round_ms"))
        lines.append(f"| {key} | {taus} | {e['macro_tau']:.2f} | {e['macro_tok_s']:.1f} | {x} | {times} |")
    lines += ["", "Acceptance rate per depth (macro over workloads; fraction of rounds accepting depth d):", ""]
    for key, e in summary.items():
        if key == "ar/0":
            continue
        per = list(e["per_workload"].values())
        depth = max(len(v["accept_rate_per_depth"]) for v in per)
        rates = [statistics.mean(v["accept_rate_per_depth"][d] for v in per if d < len(v["accept_rate_per_depth"]))
                 for d in range(depth)]
        lines.append(f"- {key}: " + " ".join(f"{r:.2f}" for r in rates))
    bad = sum(1 for r in report["records"] for x in r["runs"] if x.get("equal_to_ar") is False)
    n = sum(1 for r in report["records"] for x in r["runs"] if "equal_to_ar" in x)
    lines += ["", f"Greedy outputs equal to ar: {n - bad} of {n}.", ""]
    lines += fallback_lines(report.get("compile_fallbacks"))
    return "\n".join(lines)


def plot(summary: dict, path: Path) -> None:
    """tau vs budget, one line per method (greedy), macro-average."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    lines = sorted({(e["method"], e.get("w") or 0) for e in summary.values() if e["method"] != "ar"})
    for method, width in lines:
        pts = sorted((e["budget"], e["macro_tau"]) for e in summary.values()
                     if e["method"] == method and (e.get("w") or 0) == width and e["greedy"])
        method = f"{method} w={width}" if width else method
        if len(pts) == 1:
            ax.axhline(pts[0][1], linestyle="--", label=f"{method} (budget {pts[0][0]})")
        else:
            ax.plot(*zip(*pts, strict=True), marker="o", label=method)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("budget (non-root nodes)")
    ax.set_ylabel("tau (tokens per verify pass)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
