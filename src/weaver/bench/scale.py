"""`weaver bench scale`: a round's cost at a real model's shape, against the bandwidth floor, and the speedup
that cost projects with the paper's (or a measured) tau (DESIGN §11, §12b).

Random weights in the run's dtype (bf16 on CUDA), built where they run with no float32 copy (`build_model`):
the target from a preset (default `qwen3.6-27b-shape`); the drafter at z-lab's published Qwen3.6-27B-DFlash
shape (`--drafter published`: 5 layers, 4 sliding-window 2048 + 1 full, block 16; z-lab's heads for a
5120-wide target, the target's otherwise); the Weaver adapter at the paper's (`--adapter paper`: released
variant, d_rank 2048, 16 heads, one block, MLP 2048). In one run:
- copy bandwidth (a large device-to-device copy) and the AR step's floor: bytes of weights one step reads
  (the target's parameters but the embedding table) / that bandwidth;
- `weaver bench rounds`' AR row (`bench.rounds.measure`): the AR step;
- verify alone at N non-root nodes (N + 1 nodes) for chains and proposal-shaped trees (`bench.kernels`' trees
  and graph timing), after a `--context`-token prefix;
- prefill at `--prefill` prompt lengths;
- `weaver bench rounds`' rows per method and budget: the round and its stages (draft, build, verify, accept,
  commit), from captured graphs on CUDA (compiling each configuration: the slow part, so it comes last);
- projected speedup = tau x t_AR / t_round, with tau from the paper (weaver-paper.md §5.2, derived and rough:
  weaver 8.5 and ddtree 6.5 at budget 64, chain 4.8) and from an acceptance report (`--tau-from`).
Writes report.json and report.md under --out, after every section (a run cut short keeps what it measured).

    weaver bench scale --model tiny-qwen3_5 --device cpu --budgets 4 --verify-nodes 4 8 --prefill 16 \\
        --context 16 --new-tokens 4 --adapter random:16 --out /tmp/scale      # CPU plumbing, seconds
    weaver bench scale --out benchmarks/results/scale/h200                   # one H200, Qwen3.6-27B shape
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from weaver.argtypes import positive_int
from weaver.bench import rounds
from weaver.bench.fallbacks import fallback_lines, warn_fallbacks
from weaver.kernels import gemv
from weaver.options import add_runtime_arguments, runtime_options

# tau at budget 64 (chain: block 16) from weaver-paper.md §5.2: derived from the paper's text, not its table
PAPER_TAU = {"weaver": 8.5, "ddtree": 6.5, "chain": 4.8}
PAPER_TAU_BUDGET = 64


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="qwen3.6-27b-shape", help="preset name or config.json (random weights)")
    parser.add_argument("--drafter", default="published",
                        help="published (z-lab's Qwen3.6-27B-DFlash shape), random[:layers] or a checkpoint dir")
    parser.add_argument("--adapter", default="paper",
                        help="paper (d_rank 2048, 16 heads, one block), random[:width], a checkpoint dir or .pth")
    parser.add_argument("--methods", nargs="+", default=["ar", "chain", "ddtree", "weaver"])
    parser.add_argument("--budgets", nargs="+", type=positive_int, default=[16, 32, 64, 128],
                        help="ddtree / weaver budgets")
    parser.add_argument("--chain-budget", type=positive_int, default=16, help="chain drafts per round (block 16: 15)")
    parser.add_argument("--verify-nodes", nargs="*", type=positive_int, default=[16, 32, 64, 128],
                        help="non-root nodes of the verify-alone trees and chains (none: skip them)")
    parser.add_argument("--prefill", nargs="*", type=positive_int, default=[1024, 4096],
                        help="prompt lengths to prefill (none: skip)")
    parser.add_argument("--context", type=positive_int, default=512,
                        help="prompt tokens before the rounds and verifies")
    parser.add_argument("--new-tokens", type=positive_int, default=32, help="tokens per generation in the round rows")
    parser.add_argument("--prompts", type=positive_int, default=2, help="generations per round row")
    parser.add_argument("--tau-from", nargs="+", default=None, metavar="REPORT",
                        help="acceptance report.json files (or their directories), pooled per workload: project "
                             "with their tau per workload and macro too (a prompt in several reports: the last's)")
    parser.add_argument("--draft-vocab", default=None, metavar="SPEC",
                        help="the drafter scores only this token map's tokens, or first:N (random weights: any N "
                             "rows cost the same); default: the whole vocabulary")
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None, help="default: bf16 on cuda, fp32 on cpu")
    parser.add_argument("--out", default="benchmarks/results/scale", help="directory for report.json / report.md")
    parser.add_argument("--merge", nargs="+", default=None, metavar="REPORT",
                        help="measure nothing: merge these report.json files (runs split over calls on one machine) "
                             "into --out, the first file's AR row and bandwidth for every ratio")
    add_runtime_arguments(parser)


def run(args: argparse.Namespace) -> int:
    taus = measured_tau(args.tau_from)  # a bad file fails before the model is built
    command = " ".join(["weaver", "bench", "scale", *sys.argv[3:]])
    if args.merge:
        report = merge_reports([Path(p) for p in args.merge])
        report["command"] = command
        report["projection"] = projection(report, taus)
        write_report(report, Path(args.out))
        print(markdown(report))
        return 0
    llm = build(args)
    if args.draft_vocab:
        llm.set_draft_vocab(args.draft_vocab)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"command": command, "model": args.model,
              "device": device_name(llm.model.device), "dtype": str(llm.model.dtype), "torch": torch.__version__,
              "blas": blas_name(llm.model.device), "python": platform.python_version(),
              "one_row": one_row_route(llm),
              "time": time.strftime("%Y-%m-%d %H:%M:%S"),
              "context": args.context, "bytes": weight_bytes(llm), "rows": [], "verify": [], "prefill": [],
              "draft_vocab": None if llm.drafter is None or llm.drafter.vocab_ids is None
              else int(llm.drafter.vocab_ids.numel())}  # fmt: skip

    def save() -> None:
        report["projection"] = projection(report, taus)
        report["compile_fallbacks"] = dict(llm.engine.compile_fallbacks)
        write_report(report, out)

    bw = copy_bandwidth(llm.model.device)
    report["copy_GBps"] = bw / 1e9
    report["ar_floor_ms"] = 1e3 * report["bytes"]["ar_step_read"] / bw
    print(f"copy {bw / 1e9:.0f} GB/s (read + write); AR floor {report['ar_floor_ms']:.3f} ms "
          f"({report['bytes']['ar_step_read'] / 1e9:.2f} GB of weights per step)", flush=True)  # fmt: skip
    save()
    llm.engine.timing = True
    prompts = [[(7 * i + 3 * j) % llm.config.vocab_size for j in range(args.context)] for i in range(args.prompts)]
    ns = argparse.Namespace(new_tokens=args.new_tokens, temperature=0.0)

    def measure_rows(methods: list[str]) -> None:
        for method in methods:
            budgets = [0] if method == "ar" else [args.chain_budget] if method == "chain" else args.budgets
            for budget in budgets:
                report["rows"].append(rounds.measure(llm, prompts, method, budget, ns))
                print(rounds.row_line(report["rows"][-1], rounds.ar_step_ms(report["rows"])), flush=True)
                save()

    # cheap and most wanted first: a run cut short by a time limit keeps them
    measure_rows([m for m in args.methods if m == "ar"])
    for kind in ("chain", "tree"):
        for n in args.verify_nodes:
            report["verify"].append(verify_row(llm, kind, n, args.context))
            print(f"verify {kind:<5} N={n:>3}: {report['verify'][-1]['ms']:.3f} ms", flush=True)
            save()
    for n in args.prefill:
        report["prefill"].append(prefill_row(llm, n))
        print(f"prefill {n:>5} tokens: {report['prefill'][-1]['ms']:.1f} ms", flush=True)
        save()
    measure_rows([m for m in args.methods if m != "ar"])
    print(markdown(report))
    warn_fallbacks(report["compile_fallbacks"])
    return 0


def write_report(report: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "report.md").write_text(markdown(report))


def merge_reports(paths: list[Path]) -> dict:
    """One report from runs that one command could not hold (a device call's time limit): the first file's header,
    bandwidth and AR row, then every file's speculative rows, verify-alone rows and prefills in order."""
    from weaver.errors import WeaverError

    reports = []
    for path in paths:
        try:
            reports.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            raise WeaverError(f"--merge {path}: not a bench scale report.json ({exc})") from None
    first = reports[0]
    for path, r in zip(paths, reports, strict=True):
        if not isinstance(r, dict) or any(k not in r for k in ("command", "rows", "verify", "prefill", "bytes")):
            raise WeaverError(f"--merge {path}: not a bench scale report.json (no command / rows / verify / prefill "
                              "/ bytes)")
        if _machine(r) != _machine(first):
            raise WeaverError(f"--merge {path}: %s on %s (%s, BLAS %s) is not the first report's %s on %s (%s, BLAS %s)"
                              % (*_machine(r), *_machine(first)))
    runs = [c for r in reports for c in (r.get("merged_from") or [r["command"]])]  # a merged report: its parts
    merged = {**first, "merged_from": runs, "rows": [], "verify": [], "prefill": [], "compile_fallbacks": {}}
    ar = next((row for r in reports for row in r["rows"] if row["method"] == "ar"), None)
    merged["rows"] = ([ar] if ar else []) + [row for r in reports for row in r["rows"] if row["method"] != "ar"]
    for r in reports:
        merged["verify"] += r["verify"]
        merged["prefill"] += r["prefill"]
        merged["compile_fallbacks"].update(r.get("compile_fallbacks") or {})
    return merged


def _machine(report: dict) -> tuple:
    return report.get("model"), report.get("device"), report.get("dtype"), report.get("blas")


# ------------------------------------------------------------------------------------------------ models
def build(args: argparse.Namespace):
    """The LLM: random target, with the drafter and adapter the arguments name (published / paper shapes)."""
    import weaver

    llm = weaver.LLM.from_config(args.model, random_weights=True, seed=0, device=args.device, dtype=args.dtype,
                                 drafter=None if args.drafter in NAMED else args.drafter,
                                 adapter=None if args.adapter in NAMED else args.adapter,
                                 options=runtime_options(args))  # fmt: skip
    return attach_named(llm, args.drafter, args.adapter)


NAMED = ("published", "paper")  # the drafter / adapter specs that name the paper's shapes


def attach_named(llm, drafter: str | None, adapter: str | None):
    """`llm` with the published-shape drafter (drafter="published") and the paper-shape adapter (adapter="paper")
    in place of what it was built with (build it with None for those), on a new engine; else unchanged."""
    new_drafter = published_drafter(llm.model) if drafter == "published" else llm.drafter
    new_adapter = paper_adapter(llm.model) if adapter == "paper" else llm.adapter
    if new_drafter is not llm.drafter or new_adapter is not llm.adapter:
        from weaver.speculative.engine import Engine

        llm.drafter, llm.adapter = new_drafter, new_adapter
        llm.engine = Engine(llm.model, llm.options, drafter=new_drafter, adapter=new_adapter)
    return llm


def published_drafter_config(t):
    """z-lab/Qwen3.6-27B-DFlash's shape (checkpoint-formats.md §2) for a target config `t`: 5 layers (4 sliding-window
    2048 + 1 full), block 16, 5 target features; z-lab's heads for a 5120-wide target, the target's otherwise."""
    from weaver.speculative.drafter_io import DrafterConfig, build_target_layer_ids

    zlab = t.hidden_size == 5120
    return DrafterConfig(
        hidden_size=t.hidden_size, num_hidden_layers=5,
        num_attention_heads=32 if zlab else t.num_attention_heads,
        num_key_value_heads=8 if zlab else t.num_key_value_heads,
        head_dim=128 if zlab else t.head_dim, intermediate_size=17408 if zlab else t.intermediate_size,
        rms_norm_eps=t.rms_norm_eps, rope_theta=1e7 if zlab else t.rope_theta, block_size=16,
        target_layer_ids=build_target_layer_ids(t.num_hidden_layers, min(5, t.num_hidden_layers)),
        mask_token_id=248070 if zlab and t.vocab_size > 248070 else None,
        layer_types=["sliding_attention"] * 4 + ["full_attention"], sliding_window=2048,
        vocab_size=t.vocab_size, num_target_layers=t.num_hidden_layers,
    )  # fmt: skip


def published_drafter(target, seed: int = 0):
    """A random drafter at the published shape, allocated once on the target's device in its dtype (built on meta)."""
    from weaver.speculative.drafter import DFlashDrafter

    with torch.device("meta"):
        drafter = DFlashDrafter(published_drafter_config(target.config))
    drafter = drafter.to(target.dtype).to_empty(device=target.device).init_random_weights(seed)
    return drafter.eval().requires_grad_(False).fuse_projections()


def paper_adapter(target, seed: int = 0):
    """A random Weaver adapter at the paper's shape: released variant, d_rank 2048, 16 heads, one block, MLP 2048."""
    from weaver.speculative.weaver import RELEASED, WeaverAdapter

    adapter = WeaverAdapter.random(target.config, d_rank=2048, num_heads=16, mlp_dim=2048, seed=seed, **RELEASED)
    return adapter.to(device=target.device, dtype=target.dtype).eval().requires_grad_(False)


def weight_bytes(llm) -> dict[str, int]:
    """Bytes of each model's parameters; `ar_step_read`: what one AR step reads (all but the embedding table,
    of which it reads one row, unless the LM head shares it)."""
    def size(module) -> int:
        return sum(p.numel() * p.element_size() for p in module.parameters()) if module is not None else 0

    target = size(llm.model)
    embed = llm.model.model.embed_tokens.weight
    unread = 0 if llm.config.tie_word_embeddings else embed.numel() * embed.element_size()
    return {"target": target, "ar_step_read": target - unread, "drafter": size(llm.drafter),
            "adapter": size(llm.adapter)}  # fmt: skip


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({platform.processor() or 'host'})"


def one_row_route(llm) -> str | None:  # llm: weaver.LLM (imported lazily, as in `build`)
    """How a one-row projection of a large weight runs on CUDA (RuntimeOptions.gemv): "blas" / "triton" / "tma"."""
    return gemv.route(llm.options, llm.model.device) if llm.model.device.type == "cuda" else None


def blas_name(device: torch.device) -> str | None:
    """torch's preferred BLAS library on CUDA (RuntimeOptions.blas, set by the engine): "cublas" / "cublaslt"."""
    return torch.backends.cuda.preferred_blas_library().name.lower() if device.type == "cuda" else None


# ------------------------------------------------------------------------------------------------ timing
def median_ms(fn, device: torch.device, reps: int = 5, warmup: int = 1) -> float:
    """Median wall ms of fn() with the device synchronised around each call (eager work, or work over ~1 ms)."""
    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times)


def copy_bandwidth(device: torch.device) -> float:
    """Bytes read + written per second by a large copy on the device (CUDA: `bench.kernels`' 2 GiB copy)."""
    if device.type == "cuda":
        from weaver.bench.kernels import copy_bandwidth as cuda_copy_bandwidth

        return cuda_copy_bandwidth()
    a = torch.rand(1 << 24, device=device)
    b = torch.empty_like(a)
    return 2 * a.numel() * a.element_size() / (median_ms(lambda: b.copy_(a), device) / 1e3)


@torch.no_grad()
def verify_row(llm, kind: str, n: int, context: int, compiled: bool = True) -> dict:
    """The round's verify stage alone over a chain or proposal-shaped tree of n non-root nodes (n + 1 nodes),
    after `context` committed tokens: one captured graph on CUDA (median of replays), eager elsewhere.
    torch.compile'd where the engine compiles it (a verify with no fused path); `compiled=False`: never (A/B)."""
    from weaver.bench.kernels import chain_tree, proposal_tree
    from weaver.speculative.round import RoundConfig, RoundState
    from weaver.speculative.sampling import SamplingParams
    from weaver.speculative.tree import DraftTree

    dev, vocab = llm.model.device, llm.config.vocab_size
    parents = chain_tree(n + 1) if kind == "chain" else proposal_tree(n + 1, seed=n)
    gen = torch.Generator().manual_seed(n)
    tokens = torch.randint(0, vocab, (n + 1,), generator=gen).tolist()
    tree = DraftTree.from_parent_lists([parents], [tokens], device=dev).with_ancestors()
    cfg = RoundConfig(method="chain", budget=n, rule="greedy", params=SamplingParams())
    stages = None
    if llm.drafter is not None:  # the round's own verify stage (with the fused verify where the engine has one)
        llm.engine._bind_draft_models()  # what the engine does on first speculative use
        stages = llm.engine.stages_for(cfg, None)
        if compiled and "verify" in llm.engine.compiled_stage_names(cfg):
            from weaver.speculative.capture import compile_stages

            stages = compile_stages(stages, ("verify",), pdl=llm.engine.options.pdl)
    cache = llm.engine.cache_for(context + n + 2)
    llm.model(torch.arange(context, device=dev)[None] % vocab, cache, last_only=True)
    state = RoundState(cache=cache, root=tree.tokens[:, 0])

    def run():
        if stages is not None:
            return stages.verify(state, tree)
        return llm.model(tree.tokens, cache, parents=tree.parents, depth=tree.depth, ancestors=tree.ancestor_mask())

    if dev.type == "cuda" and llm.engine.cuda_graphs != "off":
        from weaver.bench.kernels import time_graphs

        ms = time_graphs([run], reps=30, warmup=3, calls_per_graph=1)[0] / 1e3
    else:
        ms = median_ms(run, dev, reps=3)
    return {"kind": kind, "budget": n, "nodes": n + 1, "depth": max(tree.depth[0].tolist()), "ms": ms,
            "compiled": stages is not None and getattr(stages.verify, "compiled", False)}


@torch.no_grad()
def prefill_row(llm, n: int) -> dict:
    """The engine's prefill of an n-token prompt (median of 3 after a warm-up)."""
    ids = [(11 * j + 5) % llm.config.vocab_size for j in range(n)]
    ms = median_ms(lambda: llm.engine.prefill(llm.engine.cache_for(n + 1), ids), llm.model.device, reps=3)
    return {"tokens": n, "ms": ms, "tok_per_s": n / ms * 1e3}


# -------------------------------------------------------------------------------------------- projection
def measured_tau(paths: list[str] | None) -> dict[tuple[str, int], dict[str, float]]:
    """{(method, budget): {workload: tau, ..., "macro": their mean}} over acceptance reports: a workload's tau is the
    mean over its prompts (as `weaver bench acceptance` reports it), pooled over every report given, a prompt
    measured by several counting once (the last report's); greedy runs, or a T=1 rule's where no greedy one."""
    if not paths:
        return {}
    from weaver.bench.acceptance import runs_by_prompt
    from weaver.errors import WeaverError

    pooled: dict[tuple, dict[str, list[float]]] = {}  # (method, budget, T=1 rule or "") -> workload -> taus
    try:
        for (_, workload, _), r in runs_by_prompt(paths).items():
            if r.get("w") is None:  # a weaver width variant is not the run the round rows measure
                rule = "" if r.get("greedy", True) else str(r.get("rule"))
                pooled.setdefault((r["method"], int(r["budget"]), rule), {}).setdefault(workload, []).append(
                    float(r["tau"]))
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise WeaverError(f"--tau-from {' '.join(paths)}: not acceptance report.json files ({exc!r})") from None
    taus: dict[tuple[str, int], dict[str, float]] = {}
    for (method, budget, _), per in sorted(pooled.items(), key=lambda kv: kv[0][2] == ""):  # greedy last: it wins
        per_tau = {w: statistics.mean(v) for w, v in sorted(per.items())}
        taus[(method, budget)] = {**per_tau, "macro": statistics.mean(per_tau.values())}
    return taus


def _tau_for(taus: dict, method: str, budget: int):
    if method == "chain":  # one chain per drafter block, whatever budget label the run gave it
        return next((tau for (m, _), tau in taus.items() if m == "chain"), None)
    return taus.get((method, budget))


def projection(report: dict, measured: dict[tuple[str, int], float]) -> list[dict]:
    """Per speculative row: projected speedup = tau x t_AR / t_round for the paper's tau and the measured one."""
    ar_ms = rounds.ar_step_ms(report["rows"])
    paper = {(m, PAPER_TAU_BUDGET): tau for m, tau in PAPER_TAU.items()}
    out = []
    for r in report["rows"]:
        if r["method"] == "ar" or not ar_ms:
            continue
        row = {"method": r["method"], "budget": r["budget"], "round_ms": r["round_ms"],
               "round_over_ar": r["round_ms"] / ar_ms}  # fmt: skip
        scale = ar_ms / r["round_ms"]
        tau = _tau_for(paper, r["method"], r["budget"])
        row["tau_paper"], row["speedup_paper"] = tau, None if tau is None else tau * scale
        per = _tau_for(measured, r["method"], r["budget"]) or {}
        row["tau_measured"] = per.get("macro")
        row["speedup_measured"] = None if not per else per["macro"] * scale
        row["measured_per_workload"] = {w: {"tau": t, "speedup": t * scale} for w, t in per.items() if w != "macro"}
        out.append(row)
    return out


def per_workload_table(projection_rows: list[dict]) -> str:
    """The measured tau's projection per workload: `tau (speedup)` cells, one row per projected round."""
    rows = [p for p in projection_rows if p.get("measured_per_workload")]
    if not rows:
        return ""
    workloads = sorted({w for p in rows for w in p["measured_per_workload"]})
    lines = ["Measured tau per workload (speedup it projects):\n\n| method | budget | " + " | ".join(workloads)
             + " |\n|---|---:|" + "---:|" * len(workloads) + "\n"]  # fmt: skip
    for p in rows:
        cells = [p["measured_per_workload"].get(w) for w in workloads]
        lines.append(f"| {p['method']} | {p['budget']} | " + " | ".join(
            "" if c is None else f"{c['tau']:.2f} ({c['speedup']:.2f}x)" for c in cells) + " |\n")
    return "".join(lines) + "\n"


def markdown(report: dict) -> str:
    """The report as markdown tables."""
    def f(x, fmt="{:.3f}"):
        return "" if x is None else fmt.format(x)

    b = report["bytes"]
    ar_ms = rounds.ar_step_ms(report["rows"])
    runs = report.get("merged_from") or [report["command"]]
    lines = [f"# Scale: {report['model']} on {report['device']} ({report['dtype']})\n\n",
             "" if len(runs) == 1 else f"Merged from {len(runs)} runs on one machine (the AR row and bandwidth are "
             "the first's):\n\n", "".join(f"`{c}`\n\n" for c in runs),
             f"Weights: target {b['target'] / 1e9:.2f} GB (an AR step reads {b['ar_step_read'] / 1e9:.2f} GB), drafter "
             f"{b['drafter'] / 1e9:.2f} GB, adapter {b['adapter'] / 1e6:.1f} MB. Copy bandwidth "
             f"{report.get('copy_GBps', 0):.0f} GB/s (read + write): AR floor {f(report.get('ar_floor_ms'))} ms"]
    blas = f" GEMMs of several rows: {report['blas']}." if report.get("blas") else ""
    if report.get("one_row"):
        blas += f" One row of a large weight: {report['one_row']}."
    if ar_ms and report.get("ar_floor_ms"):
        lines.append(f"; measured AR step {ar_ms:.3f} ms = {report['ar_floor_ms'] / ar_ms:.1%} of the floor's speed")
    lines.append(f".{blas}\n\n")
    if report["rows"]:
        lines.append("## Rounds\n\n" + rounds.markdown_table(report) + "\n")
    if report.get("projection"):
        lines.append("## Projected speedup = tau x t_AR / t_round\n\npaper tau: weaver-paper.md §5.2 (derived, rough; "
                     "budget 64, chain block 16). Random weights accept nothing, so the round's own tau is not used."
                     "\n\n| method | budget | round / AR | tau paper | speedup paper | tau measured "
                     "| speedup measured |\n|---|---:|---:|---:|---:|---:|---:|\n")
        for p in report["projection"]:
            lines.append(f"| {p['method']} | {p['budget']} | {p['round_over_ar']:.2f} | {f(p['tau_paper'], '{:.2f}')} "
                         f"| {f(p['speedup_paper'], '{:.2f}')} | {f(p['tau_measured'], '{:.2f}')} "
                         f"| {f(p['speedup_measured'], '{:.2f}')} |\n")
        lines.append("\n" + per_workload_table(report["projection"]))
    if report["verify"]:
        lines.append(f"## Verify alone (after {report['context']} tokens)\n\n| kind | N (non-root) | depth | compiled "
                     "| ms | x AR step | x AR floor |\n|---|---:|---:|---|---:|---:|---:|\n")
        for v in report["verify"]:
            lines.append(f"| {v['kind']} | {v['budget']} | {v['depth']} | {'yes' if v.get('compiled') else 'no'} "
                         f"| {v['ms']:.3f} "
                         f"| {f(v['ms'] / ar_ms if ar_ms else None, '{:.2f}')} "
                         f"| {f(v['ms'] / report['ar_floor_ms'] if report.get('ar_floor_ms') else None, '{:.2f}')} |\n")
        lines.append("\n")
    if report["prefill"]:
        lines.append("## Prefill\n\n| tokens | ms | tok/s |\n|---:|---:|---:|\n")
        lines += [f"| {p['tokens']} | {p['ms']:.1f} | {p['tok_per_s']:.0f} |\n" for p in report["prefill"]]
    lines += [f"\n{line}" for line in fallback_lines(report.get("compile_fallbacks"))]
    return "".join(lines)
