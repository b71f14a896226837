"""H200: where a captured speculative round spends its device time, stage by stage and kernel by kernel.

    python3 scripts/gpu/round_profile.py --specs ar chain:16 weaver:64 | tee $OUT/round_profile.txt

SmolLM2-135M shapes with random weights (`smollm2-shape`), bf16, random 3-layer drafter, random width-512
Weaver, as `weaver bench rounds`. Per method: capture the round (one graph per stage), then replay each
stage's graph alone R times: device time per replay from CUDA events (median), and under torch.profiler
the kernels it launches (count, summed kernel time). "gaps" = event time - kernel time: launch latency
between the graph's kernels, which dominates at batch 1 on a 135M model. ar: the captured decode step.
Also the whole round as one graph (median of 48 replays: 6 blocks of 8 from a fresh state). Prints a table
per method and the top kernels.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import statistics

import torch
from torch.profiler import ProfilerActivity, profile

import weaver
from weaver.bench.scale import NAMED, attach_named
from weaver.options import BLAS
from weaver.speculative.round import Stages

STAGES = Stages.NAMES

PROMPT = [(3 * j + 7) % 1000 for j in range(40)]


def event_ms(fn, reps: int) -> list[float]:
    """Device ms of each of `reps` calls of fn (CUDA events around each)."""
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def kernels(fn, reps: int) -> collections.Counter:
    """{kernel name: (launches, summed us)} per call of fn, from the profiler's device events."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    count: collections.Counter = collections.Counter()
    time_us: collections.Counter = collections.Counter()
    for ev in prof.profiler.kineto_results.events():
        if ev.device_type() == torch.autograd.DeviceType.CUDA and not ev.name().startswith("Memcpy"):
            name = ev.name()[:70]
            count[name] += 1
            time_us[name] += ev.duration_ns() / 1e3
    return {name: (count[name] / reps, time_us[name] / reps) for name in count}


TOP = {"*": 8}  # kernels listed per stage; --top-build raises the build stage's
ROUND_BLOCKS = 6  # the one-graph round: median of 6 x 8 replays (8 alone moved by +-6% between processes)


def stage_spans(evs: list[tuple[int, int]], stage_kernels: list[tuple[str, float]], reps: int) -> dict | str:
    """Median span (first start to last end, us) of each stage and its hand-off from the previous stage's last
    end, from the sorted (start ns, end ns) of `reps` replays' kernels; the stages' kernel counts in order."""
    counts = [round(c) for _, c in stage_kernels]
    per = sum(counts)
    if per == 0 or len(evs) != per * reps:
        return f"{len(evs)} kernels for {reps} replays of {per}: the stage counts do not tile the round"
    spans: dict[str, list[float]] = collections.defaultdict(list)
    for r in range(reps):
        run = evs[r * per : (r + 1) * per]
        i, prev_end = 0, None
        for (name, _), n in zip(stage_kernels, counts, strict=True):
            part = run[i : i + n]
            i += n
            end = max(e for _, e in part)
            spans[name].append((end - part[0][0]) / 1e3)
            spans[name + " hand-off"].append(0.0 if prev_end is None else (part[0][0] - prev_end) / 1e3)
            prev_end = end
        spans["round span"].append((max(e for _, e in run) - run[0][0]) / 1e3)
    return {k: statistics.median(v) for k, v in spans.items()}


def timeline(fn, stage_kernels: list[tuple[str, float]], reps: int = 8) -> str:
    """Where a one-graph round's device time goes, from kernel start / end stamps (`stage_spans`). Unlike summed
    kernel durations this stays meaningful with programmatic dependent launch, where a kernel starts before its
    predecessor ends."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    evs = sorted((ev.start_ns(), ev.start_ns() + ev.duration_ns()) for ev in prof.profiler.kineto_results.events()
                 if ev.device_type() == torch.autograd.DeviceType.CUDA and not ev.name().startswith("Mem"))  # fmt: skip
    spans = stage_spans(evs, stage_kernels, reps)
    if isinstance(spans, str):
        return f"timeline: {spans}"
    return "\n".join(f"timeline {k:<22} {v:8.1f} us" for k, v in spans.items())


def captured_cfg(llm, method: str, budget: int):
    """The RoundConfig of the last captured round of (method, budget)."""
    return [key[0] for key in llm.engine._captured if key[0].method == method and key[0].budget == budget][-1]


def captured(llm, method: str, budget: int, mode: str):
    """The engine's captured round (RoundGraph or StageGraphs) of (method, budget, mode)."""
    return [g for (cfg, _, m), g in llm.engine._captured.items()
            if cfg.method == method and cfg.budget == budget and m == mode][-1]  # fmt: skip


def summarise(label: str, fn, reps: int, rows: list, top: dict, times: list[float] | None = None) -> None:
    """One table row: median event ms (of `times` when given, else of `reps` calls) and fn's kernels."""
    ms = statistics.median(times or event_ms(fn, reps))
    ks = kernels(fn, max(3, reps // 4))
    launches = sum(c for c, _ in ks.values())
    busy_ms = sum(t for _, t in ks.values()) / 1e3
    rows.append((label, ms, launches, busy_ms))
    top[label] = sorted(ks.items(), key=lambda kv: -kv[1][1])[: TOP.get(label, TOP["*"])]


def profile_method(llm, method: str, budget: int, reps: int) -> None:
    print(f"\n## {method} budget {budget}", flush=True)
    rows: list = []
    top: dict = {}
    if method == "ar":
        llm.generate(PROMPT, method="ar", max_new_tokens=8, ignore_eos=True, chat=False)
        step = captured(llm, "ar", 0, "round")
        summarise("ar step", step.graph.replay, reps, rows, top)  # advances the cache by reps tokens
    else:
        for mode in ("stages", "round"):
            llm.engine.options = llm.engine.options.replace(cuda_graphs=mode)
            llm.generate(PROMPT, method=method, budget=budget, max_new_tokens=4, ignore_eos=True, chat=False)
            rg = captured(llm, method, budget, mode)
            if mode == "stages":
                print(f"compiled stages: {llm.engine.compiled_stage_names(captured_cfg(llm, method, budget))}",
                      flush=True)
                for name in STAGES:
                    graph = getattr(rg.stages, name).graph
                    if name == "commit":  # advances the caches: few replays from a fresh state
                        llm.generate(PROMPT, method=method, budget=budget, max_new_tokens=2, ignore_eos=True,
                                     chat=False)
                        summarise(name, graph.replay, 8, rows, top)
                    else:
                        summarise(name, graph.replay, reps, rows, top)
            else:  # ROUND_BLOCKS x 8 replays, each block from a fresh prompt state (a replay advances the caches)
                times = []
                for _ in range(ROUND_BLOCKS):
                    llm.generate(PROMPT, method=method, budget=budget, max_new_tokens=2, ignore_eos=True, chat=False)
                    times += event_ms(rg.graph.replay, 8)
                summarise("ROUND (one graph)", rg.graph.replay, 8, rows, top, times)
                stage_kernels = [(label, launches) for label, _, launches, _ in rows if label in STAGES]
                llm.generate(PROMPT, method=method, budget=budget, max_new_tokens=2, ignore_eos=True, chat=False)
                print(timeline(rg.graph.replay, stage_kernels), flush=True)
        llm.engine.options = llm.engine.options.replace(cuda_graphs="round")
    print(f"{'stage':<20} {'event ms':>9} {'kernels':>8} {'kernel ms':>10} {'gaps ms':>8} {'us/kernel':>9}")
    for label, ms, launches, busy in rows:
        print(f"{label:<20} {ms:9.3f} {launches:8.1f} {busy:10.3f} {ms - busy:8.3f} {1e3 * ms / max(launches, 1):9.2f}")
    for label, items in top.items():
        print(f"-- {label}: top kernels (launches per call, us per call)")
        for name, (c, t) in items:
            print(f"   {c:6.1f} x {t / max(c, 1):7.2f} us = {t:8.1f} us  {name}")


def without_inductor_pdl() -> None:
    """torch.compile with inductor's `triton.enable_pdl` off whatever RuntimeOptions.pdl says (weaver's own kernels
    keep PDL): the A/B of session 49's `compile_stages(pdl=)`. Before anything compiles."""
    real_compile = torch.compile

    def compile_without(fn, **kwargs):
        return real_compile(fn, **{**kwargs, "options": {**kwargs.get("options", {}), "triton.enable_pdl": False}})

    torch.compile = compile_without


def with_gdn_config(change: str) -> None:
    """Every GDN tree call launched under `default_config` with `field=value,...` changed (session 55's prep A/B:
    `BVP=128` is the 65-node prep before b133d1e). Before anything is captured: the launcher reads it per call."""
    from prep_ab import config_change  # scripts/gpu, this script's folder: on sys.path when run as a script

    module = importlib.import_module("weaver.kernels.triton.gdn_tree")  # the package re-exports gdn_tree itself
    base_config = module.default_config
    module.default_config = lambda *args, **kwargs: config_change(change, base_config(*args, **kwargs))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--specs", nargs="+", default=["ar", "chain:16", "weaver:64"], help="method[:budget]")
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--model", default="smollm2-shape")
    parser.add_argument("--top", type=int, default=8, help="kernels listed per stage")
    parser.add_argument("--top-build", type=int, default=8, help="kernels listed for the build stage")
    parser.add_argument("--drafter", default="random:3",
                        help="random[:layers], a checkpoint dir, or published (bench scale's z-lab shape)")
    parser.add_argument("--adapter", default="random:512",
                        help="random[:width] (4 heads, GELU MLP 2x width), a checkpoint dir, or paper (bench scale's: "
                             "released variant, d_rank 2048, 16 heads, MLP 2048)")
    parser.add_argument("--equal-tokens", type=int, default=0,
                        help="after profiling: greedy-decode this many tokens with ar and each spec's method (captured "
                             "rounds) and print the prefix that matches ar's (issue 19's 27B lossless point)")
    parser.add_argument("--kernels", default="auto", choices=["auto", "torch"],
                        help="torch: the torch paths (the A/B baseline of a new kernel)")
    parser.add_argument("--min-capacity", type=int, default=0,
                        help="cache slots at least (a server sets its context here: Engine.min_capacity)")
    parser.add_argument("--draft-vocab", default=None, metavar="SPEC",
                        help="after the specs: profile them again with the drafter restricted to this token map or "
                             "first:N, on a new engine in the same process (the draft head's A/B)")
    parser.add_argument("--no-pdl", action="store_true",
                        help="launch without programmatic dependent launch (RuntimeOptions.pdl: weaver's kernels and "
                             "inductor's): the PDL A/B")
    parser.add_argument("--no-inductor-pdl", action="store_true",
                        help="inductor's kernels without PDL, weaver's with it: session 49's change alone, the A/B")
    parser.add_argument("--tuning", default=None, help="RuntimeOptions.tuning: a tuning table (JSON) or none")
    parser.add_argument("--blas", default="auto", choices=BLAS,
                        help="RuntimeOptions.blas: torch's BLAS library for the GEMMs of several rows (the A/B)")
    parser.add_argument("--gdn-config", default=None, metavar="FIELD=VALUE,...",
                        help="GDN tree calls under default_config with these fields changed (the prep A/B)")
    args = parser.parse_args()
    if args.gdn_config:
        with_gdn_config(args.gdn_config)
    if args.no_inductor_pdl:
        without_inductor_pdl()
    TOP["*"], TOP["build"] = args.top, args.top_build
    llm = weaver.LLM.from_config(args.model, random_weights=True, seed=0, device="cuda", dtype="bf16",
                                 drafter=None if args.drafter in NAMED else args.drafter,
                                 adapter=None if args.adapter in NAMED else args.adapter,
                                 options=weaver.RuntimeOptions(kernels=args.kernels, pdl=not args.no_pdl,
                                                                 tuning=args.tuning, blas=args.blas))  # fmt: skip
    llm = attach_named(llm, args.drafter, args.adapter)  # `bench scale`'s published drafter / paper adapter
    llm.engine.min_capacity = args.min_capacity
    print(torch.cuda.get_device_name(), torch.__version__, torch.backends.cuda.preferred_blas_library(), flush=True)
    profile_specs(llm, args.specs, args.reps)
    if args.draft_vocab:
        llm.set_draft_vocab(args.draft_vocab)  # on a new engine: the old one's captured rounds read the whole head
        torch.cuda.empty_cache()
        print(f"\n# the same specs, the drafter restricted to --draft-vocab {args.draft_vocab}", flush=True)
        profile_specs(llm, [s for s in args.specs if s != "ar"], args.reps)
    if args.equal_tokens:
        equal_tokens(llm, args.specs, args.equal_tokens)
    return 0


def profile_specs(llm, specs: list[str], reps: int) -> None:
    """profile_method for each method[:budget] spec; a failing spec is reported and skipped."""
    for spec in specs:
        method, _, budget = spec.partition(":")
        try:
            profile_method(llm, method, int(budget or 0), reps)
        except Exception as err:  # noqa: BLE001 - report and go on to the next spec
            print(f"{spec}: {type(err).__name__}: {err}", flush=True)


def equal_tokens(llm, specs: list[str], n: int) -> None:
    """Greedy tokens of every spec's method against ar's from PROMPT: the matching prefix (bf16 ties aside)."""
    llm.engine.options = llm.engine.options.replace(cuda_graphs="round")
    ref = llm.generate(PROMPT, method="ar", max_new_tokens=n, ignore_eos=True, chat=False).token_ids
    print(f"\n## greedy tokens against ar ({n} new tokens from the profile's prompt)\nar tokens: {ref}")
    for spec in specs:
        method, _, budget = spec.partition(":")
        if method == "ar":
            continue
        out = llm.generate(PROMPT, method=method, budget=int(budget or 1), max_new_tokens=n, ignore_eos=True,
                           chat=False)
        match = next((i for i, (a, b) in enumerate(zip(ref, out.token_ids, strict=False)) if a != b),
                     min(len(ref), len(out.token_ids)))
        tau = out.stats.new_tokens / max(out.stats.rounds, 1)
        first = "none" if match == len(ref) else (ref[match], out.token_ids[match])
        print(f"{spec:<12} matching prefix {match} of {len(ref)}; tau {tau:.2f}; first difference: {first}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
