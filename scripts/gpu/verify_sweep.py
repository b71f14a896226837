"""H200: launch configurations of the tree-verify kernels at SmolLM2 shapes (CUDA-graph timed medians).

    python3 scripts/gpu/verify_sweep.py --out $OUT/verify_sweep.json | tee $OUT/verify_sweep.txt
    WEAVER_TRITON_TUNING=$OUT/verify_sweep.json python3 -m weaver.cli bench rounds ...   # run with the best

Times the row-tiled `fused_gemv` (qkv+norm, o+res, gate_up+norm+swiglu, down+res, lm_head+norm+norm_out)
at 16 and 65 rows, `tree_attention` and `tree_rope_kv_write` at 16 and 65 nodes after a 300-token prefix,
bf16. Search per shape: the built-in config, a coarse grid of tile sizes (4 warps, 3 stages), then warps x
stages around its best three. Each config is compiled first by a pool of worker processes (Triton's disk
cache carries the binaries over), then timed here: one CUDA graph of launches that cycle through enough
copies of the weights (caches) to exceed the L2 cache, as in a real verify pass; median over replays, per
launch. A config that fails to compile or run is reported, not fatal; a time budget bounds the run. Prints
a table and the best config per shape; the JSON's "best" entry is the table `kernels/triton/tuning.py` reads.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import itertools
import json
import multiprocessing
import os
import statistics
import sys
import time

import torch

HIDDEN, INTER, VOCAB, H, HKV, D, LAYERS = 576, 1536, 49152, 9, 3, 64, 30  # SmolLM2-135M
GEMMS = {  # name: (rows of W, K, flags); one launch per layer, the LM head once per pass
    "qkv+norm": ((H + 2 * HKV) * D, HIDDEN, ("norm",)),
    "o+res": (HIDDEN, H * D, ("res",)),
    "gate_up+norm+swiglu": (2 * INTER, HIDDEN, ("norm", "swiglu")),
    "down+res": (HIDDEN, INTER, ("res",)),
    "lm_head+norm": (VOCAB, HIDDEN, ("norm", "norm_out", "fp32")),
}
ROWS = (16, 65)  # a chain of block 16; a Weaver tree of budget 64
PREFIX = 300
ROTATE_BYTES = 128 << 20  # weights / caches cycled per graph: well past the H200's 50 MB L2
BF16 = torch.bfloat16
DEVICE = torch.device("cuda")  # --cpu-smoke: the CPU, kernels interpreted (a plumbing check, no timing)


# -------------------------------------------------------------------------------------- the cases


def case_names() -> list[tuple[str, str, int]]:
    """(kernel, shape name, rows or nodes) for every timed shape."""
    cases = [("gemm_rows", name, m) for name in GEMMS for m in ROWS]
    return cases + [(kernel, "tree", t) for kernel in ("tree_attention", "tree_rope_kv_write") for t in ROWS]


def make_inputs(kernel: str, name: str, m: int, copies: int) -> list[tuple]:
    """`copies` argument sets of one case (distinct weights / caches, shared small inputs)."""
    dev = DEVICE
    gen = torch.Generator(device=dev).manual_seed(0)

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen, device=dev) * scale).to(BF16)

    if kernel == "gemm_rows":
        n, k, flags = GEMMS[name]
        x = randn(m, k, scale=3.0)
        nw = randn(k, scale=0.1) + 1 if "norm" in flags else None
        res = randn(m, n // 2 if "swiglu" in flags else n) if "res" in flags else None
        return [(x, randn(n, k, scale=k**-0.5), nw, res) for _ in range(copies)]
    parents = torch.tensor([[-1] + ([i - 1 for i in range(1, m)] if m <= 16 else
                                    [max(0, (i - 1) // 4) for i in range(1, m)])], device=dev)
    from weaver.ops.tree import ancestor_mask, node_depth

    lengths = torch.tensor([PREFIX], device=dev)
    slots = PREFIX + 128
    caches = [(randn(1, HKV, slots, D), randn(1, HKV, slots, D)) for _ in range(copies)]
    if kernel == "tree_attention":
        q = randn(m, H * D)
        return [(q, ck, cv, lengths, ancestor_mask(parents)) for ck, cv in caches]
    qkv = randn(m, (H + 2 * HKV) * D)
    inv_freq = 1.0 / (100000 ** (torch.arange(0, D, 2, device=dev).float() / D))
    return [(qkv, ck, cv, lengths, node_depth(parents), inv_freq) for ck, cv in caches]


def launch(kernel: str, name: str, config: tuple, args: tuple):
    """One kernel launch of a case with a launch config."""
    from weaver.kernels import triton as wt
    from weaver.kernels.triton.decode import GemmTiles

    if kernel == "gemm_rows":
        x, w, nw, res = args
        flags = GEMMS[name][2]
        norm_out = torch.empty_like(x) if "norm_out" in flags else None
        return wt.fused_gemv(x, w, norm_weight=nw, residual=res, swiglu="swiglu" in flags, norm_out=norm_out,
                             out_dtype=torch.float32 if "fp32" in flags else None, tiles=GemmTiles(*config))
    if kernel == "tree_attention":
        block_r, block_s, warps, stages = config
        return wt.tree_attention(*args, H, HKV, block_r=block_r, block_s=block_s, num_warps=warps, num_stages=stages)
    qkv, ck, cv, lengths, depth, inv_freq = args
    return wt.tree_rope_kv_write(qkv, ck, cv, lengths, depth, inv_freq, H, HKV, num_warps=config[0])


def default_config(kernel: str, name: str, m: int) -> tuple:
    """The config the kernel uses without a tuning table."""
    if kernel == "gemm_rows":
        from weaver.kernels.triton.decode import gemm_rows_config

        n, k, flags = GEMMS[name]
        return tuple(gemm_rows_config(n // 2 if "swiglu" in flags else n, k, m, torch.device("cuda")))
    return (32, 64, 4, 3) if kernel == "tree_attention" else (4,)


def table_key(kernel: str, name: str, m: int) -> str:
    """The shape key `kernels/triton/tuning.py` looks up for this case."""
    from weaver.kernels.triton import tuning

    if kernel != "gemm_rows":
        return tuning.attention_key(m, H, HKV, D, BF16)
    n, k, flags = GEMMS[name]
    out = torch.float32 if "fp32" in flags else BF16
    return tuning.gemm_rows_key(n // 2 if "swiglu" in flags else n, k, m, BF16, out, "norm" in flags,
                                "swiglu" in flags, "res" in flags, "norm_out" in flags)


# ---------------------------------------------------------------------------------- config grids


WIDE_K: list[int] = []  # --wide-k: an extra BLOCK_K (512) for the 16-row tiles


def coarse_grid(kernel: str, name: str, m: int) -> list[tuple]:
    """Tile sizes at 4 warps and 3 stages (register-bounded tiles only). With --wide-k the 16-row tiles also
    try BLOCK_K 512: two or three K steps for the SmolLM2 shapes (K = 576 / 1536), closer to the decode GEMV's
    short load chain (the v7 profile: 4.8 us per 16-row GEMM against 3.6 for the one-row GEMV). 1024 spills
    at 4 warps on sm_90 (triton 3.6: 424-5712 B of stack), 512 does not at BLOCK_N 16 (NOTES_h200.md)."""
    if kernel == "gemm_rows":
        k = GEMMS[name][1]
        grid = []
        for bm, bn, bk in itertools.product([16] if m <= 16 else [16, 32, 64, 128], [16, 32, 64, 128],
                                            [32, 64, 128, 256, *WIDE_K]):  # fmt: skip
            fits = bm * bk <= 8192 and bn * bk <= 16384 or (bk in WIDE_K and bm == 16 and bn <= 32)
            if bk <= max(32, 1 << (k - 1).bit_length()) and bm * bn <= 8192 and fits:
                grid.append((bm, bn, bk, 4, 3))
        return grid
    if kernel == "tree_attention":
        return [(br, bs, 4, 3) for br, bs in itertools.product([16, 32, 64, 128], [16, 32, 64, 128])]
    return [(w,) for w in (1, 2, 4, 8)]


def refine_grid(kernel: str, best: list[tuple]) -> list[tuple]:
    """Warps x stages around the best tile sizes."""
    if kernel == "tree_rope_kv_write":
        return []
    tiles = {cfg[:-2] for cfg in best}
    return [(*t, w, s) for t in sorted(tiles) for w, s in itertools.product([1, 2, 4, 8], [1, 2, 3, 4])]


# ---------------------------------------------------------------------------------- compile, time


_WORKER_INPUTS: dict = {}


def error_text(err: Exception) -> str:
    """One line naming a config's failure."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0][:160] if lines else ''}"


def compile_task(kernel: str, name: str, m: int, config: tuple) -> str | None:
    """Worker: compile and run one config once (fills Triton's disk cache); the error text, or None."""
    key = (kernel, name, m)
    try:
        if key not in _WORKER_INPUTS:
            _WORKER_INPUTS[key] = make_inputs(kernel, name, m, 1)[0]
        launch(kernel, name, config, _WORKER_INPUTS[key])
        torch.cuda.synchronize()
        return None
    except Exception as err:  # noqa: BLE001 - reported per config
        return error_text(err)


def precompile(tasks: list[tuple], jobs: int, deadline: float) -> dict[tuple, str | None]:
    """Compile `tasks` (kernel, name, m, config) in `jobs` processes; {task: error or None}; missing: not done."""
    done: dict[tuple, str | None] = {}
    if jobs <= 1 or not tasks:
        return done
    try:
        with cf.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(compile_task, *task): task for task in tasks}
            try:
                for fut in cf.as_completed(futures, timeout=max(1.0, deadline - time.monotonic())):
                    done[futures[fut]] = fut.result()
            except cf.TimeoutError:
                print(f"precompile: time budget reached, {len(tasks) - len(done)} configs left", flush=True)
                for fut in futures:
                    fut.cancel()
    except Exception as err:  # noqa: BLE001 - the pool is an optimisation: compile while timing instead
        print(f"precompile pool failed ({type(err).__name__}: {err}); compiling while timing", flush=True)
    return done


def time_us(kernel: str, name: str, m: int, config: tuple, inputs: list[tuple], replays: int) -> float:
    """Median per-launch device time of one CUDA graph that launches every input set once."""
    from weaver.speculative.capture import capture

    launch(kernel, name, config, inputs[0])  # compiles (or loads) outside the capture
    if DEVICE.type == "cpu":  # --cpu-smoke: the interpreter ran it; no device time to measure
        return float("nan")
    graph, _ = capture(lambda: [launch(kernel, name, config, a) for a in inputs], warmup=1)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(replays):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / len(inputs))
    return statistics.median(times)


def copies_for(kernel: str, inputs_one: tuple) -> int:
    """Input sets per graph: enough distinct weights / caches to pass ROTATE_BYTES, 8 to 128 launches."""
    if DEVICE.type == "cpu":
        return 1
    big = inputs_one[1]  # the weight, or the K cache (V: as large)
    size = big.numel() * big.element_size() * (1 if kernel == "gemm_rows" else 2)
    return max(8, min(128, -(-ROTATE_BYTES // size)))


# ------------------------------------------------------------------------------------------ main


def sweep(args: argparse.Namespace) -> dict:
    t0 = time.monotonic()
    deadline = t0 + args.budget_s
    results: list[dict] = []
    best: dict[str, dict] = {}
    cases = [case for case in case_names() if not args.kernels or case[0] in args.kernels]
    inputs = {}
    for case in cases:
        one = make_inputs(*case, 1)[0]
        inputs[case] = make_inputs(*case, copies_for(case[0], one))
    rounds = [{case: [default_config(*case), *coarse_grid(*case)][: 2 if args.cpu_smoke else None] for case in cases}]
    seen: set[tuple] = set()
    for phase in range(1 if args.cpu_smoke else 2):
        tasks = [t for t in dict.fromkeys((*case, cfg) for case, cfgs in rounds[phase].items() for cfg in cfgs)
                 if t not in seen]
        seen.update(tasks)
        compiled = precompile(tasks, args.jobs, t0 + args.budget_s * (0.5 if phase == 0 else 0.85))
        print(f"phase {phase + 1}: {len(tasks)} configs, {sum(e is None for e in compiled.values())} compiled "
              f"in workers ({time.monotonic() - t0:.0f} s)", flush=True)
        for task in tasks:
            case, cfg = task[:3], task[3]
            row = {"kernel": case[0], "case": list(case), "config": list(cfg)}
            if compiled.get(task):
                row["error"] = compiled[task]
            elif time.monotonic() > deadline:
                row["error"] = "not timed: time budget"
            else:
                try:
                    row["us"] = time_us(*case, cfg, inputs[case], args.replays)
                except Exception as err:  # noqa: BLE001 - reported per config
                    row["error"] = error_text(err)
            results.append(row)
        if phase == 0:
            nxt = {}
            for case in cases:
                timed = sorted((r["us"], tuple(r["config"])) for r in results if r["case"] == list(case) and "us" in r)
                nxt[case] = refine_grid(case[0], [cfg for _, cfg in timed[:3]])
            rounds.append(nxt)
    for case in cases:
        timed = sorted((r["us"], r["config"]) for r in results if r["case"] == list(case) and "us" in r)
        default = next((r for r in results if r["case"] == list(case) and r["config"] == list(default_config(*case))),
                       {})
        if timed:
            best.setdefault(case[0], {})[table_key(*case)] = {
                "config": timed[0][1], "us": timed[0][0], "case": list(case),
                "default_config": list(default_config(*case)), "default_us": default.get("us"),
                "top": [{"config": c, "us": t} for t, c in timed[:5]],
            }
    return {"results": results, "best": best, "elapsed_s": time.monotonic() - t0}


def report(out: dict) -> str:
    """The table: per shape the default and the best config, and the verify pass at 30 layers."""
    lines = [f"{'kernel':18s} {'shape':22s} {'m':>3s} | {'default':>9s} {'best':>9s} {'x':>5s} | best config "
             "(gemm: block_m n k warps stages; attention: block_r s warps stages; rope: warps) | next best"]
    totals = {m: [0.0, 0.0] for m in ROWS}
    for kernel, entries in out["best"].items():
        for entry in entries.values():
            _, name, m = entry["case"]
            d_us, b_us = entry["default_us"], entry["us"]
            gain = f"{d_us / b_us:5.2f}" if d_us else "  n/a"
            runner = ", ".join(f"{tuple(t['config'])} {t['us']:.2f}" for t in entry["top"][1:3])
            lines.append(f"{kernel:18s} {name:22s} {m:3d} | {d_us or float('nan'):9.2f} {b_us:9.2f} {gain} | "
                         f"{tuple(entry['config'])} | {runner}")
            times = LAYERS if name != "lm_head+norm" else 1
            if d_us:
                totals[m][0] += times * d_us
                totals[m][1] += times * b_us
    for m, (d_us, b_us) in totals.items():
        lines.append(f"verify kernels at {m} rows ({LAYERS} layers + LM head): default {d_us:.0f} us, "
                     f"best {b_us:.0f} us")
    failed = [r for r in out["results"] if "error" in r]
    lines.append(f"{len(out['results'])} configs, {len(failed)} failed or skipped, {out['elapsed_s']:.0f} s")
    for r in failed[:12]:
        lines.append(f"  {r['kernel']} {r['case'][1]} m={r['case'][2]} {tuple(r['config'])}: {r['error']}")
    return "\n".join(lines)


def main() -> int:
    global ROWS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="verify_sweep.json", help="JSON report (its 'best' is a tuning table)")
    parser.add_argument("--budget-s", type=float, default=150.0, help="stop timing new configs after this long")
    parser.add_argument("--wide-k", action="store_true", help="16-row GEMM tiles also try BLOCK_K 512")
    parser.add_argument("--jobs", type=int, default=max(1, min(15, (os.cpu_count() or 2) - 1)),
                        help="compile worker processes (1: compile while timing)")
    parser.add_argument("--replays", type=int, default=15, help="graph replays per config (median)")
    parser.add_argument("--kernels", nargs="*", choices=["gemm_rows", "tree_attention", "tree_rope_kv_write"],
                        default=[], help="sweep only these kernels (default: all)")
    parser.add_argument("--rows", type=int, nargs="+", default=list(ROWS),
                        help="row / node counts to sweep (default: 16 and 65; trees of budget 16 / 32 / 128 verify "
                             "17 / 33 / 129; merge into the packaged table with scripts/gpu/merge_tuning.py)")
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="plumbing check without a GPU: two configs per shape, interpreted, untimed")
    args = parser.parse_args()
    ROWS = tuple(args.rows)
    if args.wide_k:
        WIDE_K.append(512)
    if args.cpu_smoke:
        global DEVICE
        DEVICE = torch.device("cpu")
        os.environ.setdefault("TRITON_INTERPRET", "1")
        args.jobs = 1
        global PREFIX
        PREFIX = 20  # and 1/16 of every GEMM: the interpreter takes seconds per launch at full size
        GEMMS.update({name: (n // 16, k // 16, flags) for name, (n, k, flags) in GEMMS.items()})
    import triton

    out = sweep(args)
    out.update(device=torch.cuda.get_device_name() if DEVICE.type == "cuda" else "cpu (smoke)",
               torch=torch.__version__, triton=triton.__version__,
               command=" ".join(["python3", *sys.argv]))
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(report(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
