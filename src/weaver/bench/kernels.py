"""`weaver bench kernels`: the GDN tree-verify kernel against the paper's and stronger baselines.

Shape of one Qwen3.6-27B GDN layer (B=1, H=16, HV=48, K=V=128) at T tree nodes. Every method is captured
in a CUDA graph per input set; several input sets (each its own random tree and tensors, together larger
than the L2) are replayed round-robin and the median of the per-replay event times is reported.

Methods:
  fused          weaver.kernels.triton: build_tree_structure + gdn_tree (all stages, per layer)
  fused_kernel   gdn_tree alone with the structure prebuilt (what each layer pays when it is shared)
  per_branch     paper baseline: each root-to-leaf path from H0 by its own fla fused_recurrent call
  varlen         all root-to-leaf paths in one fla fused_recurrent call (cu_seqlens; H0 repeated per path
                 outside the timed region)
  snapshot       per-node recurrence from the parent's saved state, one batched fla step per depth level
                 (the SGLang/vLLM snapshot approach; parent states gathered by index_select)
  chunk_chain    fla chunk_gated_delta_rule on a chain of T tokens (not a tree method; reference point)
  floor          bytes moved once (q, k, v, g, beta, H0 in; o, aux out) / measured copy bandwidth
Errors: max |o - ref| / max |ref| against weaver.ops.gdn.gdn_tree in float64 on the same (rounded) inputs.
`--sweep` also times the fused kernel over launch configurations.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import platform
import sys
import time
from pathlib import Path

import torch

from weaver.argtypes import positive_int

DEFAULT_T = (16, 32, 64, 128, 256)
SHAPE = dict(H=16, HV=48, K=128, V=128)
DEVICE = "cuda"  # the bench times on CUDA; tests of its plumbing swap in "cpu"


# ----------------------------------------------------------------------------------------------- trees
def proposal_tree(T: int, seed: int, max_depth: int = 15) -> list[int]:
    """Parents of a best-first proposal tree: each node's children have geometric marginals
    p(rank) = (1 - e^-s) e^(-s rank) with s ~ U(0.3, 2) (top-1 prob 0.26-0.86), candidates are expanded by
    cumulative log-prob (first child + next sibling, as DDTree), depth capped. Branching ends up
    concentrated near the root; T=128 gives ~44 leaves and depth 11-15."""
    gen = torch.Generator().manual_seed(seed)
    parents, depth, logp, decay = [-1], [0], [0.0], []

    def child_logp(node: int, rank: int) -> float:
        while len(decay) <= node:  # per-node sharpness s: p(rank) = (1 - e^-s) e^(-s rank)
            decay.append(0.3 + 1.7 * float(torch.rand(1, generator=gen)))
        s = decay[node]
        return logp[node] + math.log(1 - math.exp(-s)) - s * rank

    heap = [(-child_logp(0, 0), 0, 0)]
    while len(parents) < T and heap:
        neg, par, rank = heapq.heappop(heap)
        node = len(parents)
        parents.append(par)
        depth.append(depth[par] + 1)
        logp.append(-neg)
        heapq.heappush(heap, (-child_logp(par, rank + 1), par, rank + 1))
        if depth[node] < max_depth:
            heapq.heappush(heap, (-child_logp(node, 0), node, 0))
    return parents


def chain_tree(T: int) -> list[int]:
    return [-1] + list(range(T - 1))


def root_paths(parents: list[int]) -> list[list[int]]:
    """Root-to-leaf node lists, leaves in index order."""
    has_child = [False] * len(parents)
    for p in parents[1:]:
        has_child[p] = True
    paths = []
    for leaf in (i for i, c in enumerate(has_child) if not c):
        path, n = [], leaf
        while n >= 0:
            path.append(n)
            n = parents[n]
        paths.append(path[::-1])
    return paths


def tree_depth(parents: list[int]) -> int:
    d = [0] * len(parents)
    for i in range(1, len(parents)):
        d[i] = d[parents[i]] + 1
    return max(d)


# ---------------------------------------------------------------------------------------------- inputs
def make_set(T: int, kind: str, seed: int, dtype: torch.dtype, device: str) -> dict:
    gen = torch.Generator(device="cpu").manual_seed(seed)
    H, HV, K, V = SHAPE["H"], SHAPE["HV"], SHAPE["K"], SHAPE["V"]
    if kind == "chain":
        parents = chain_tree(T)
    else:  # "tree": depth <= 15; "wide": depth <= 6 (bushier, like the trees of the H200 anchors)
        parents = proposal_tree(T, seed, max_depth=6 if kind == "wide" else 15)

    def rnd(*shape):
        return torch.randn(*shape, generator=gen).to(device)

    q = torch.nn.functional.normalize(rnd(1, T, H, K), dim=-1).to(dtype)
    k = torch.nn.functional.normalize(rnd(1, T, H, K), dim=-1).to(dtype)
    v = rnd(1, T, HV, V).to(dtype)
    g = -torch.nn.functional.softplus(rnd(1, T, HV) - 1.0) * 0.5  # log decay, mostly in (-1, 0)
    beta = torch.sigmoid(rnd(1, T, HV))
    h0 = rnd(1, HV, K, V) * 0.5
    par = torch.tensor([parents], dtype=torch.long, device=device)
    return dict(parents=parents, par=par, q=q, k=k, v=v, g=g, beta=beta, h0=h0, paths=root_paths(parents))


# --------------------------------------------------------------------------------------------- methods
def method_fused(s: dict, cfg=None, prebuilt: bool = False):
    from weaver.kernels import triton as wt

    tree = wt.build_tree_structure(s["par"]) if prebuilt else None

    def run():
        t = tree if prebuilt else wt.build_tree_structure(s["par"])
        o, _ = wt.gdn_tree(s["q"], s["k"], s["v"], s["g"], s["beta"], t, initial_state=s["h0"], config=cfg)
        return o

    return run


def fused_fp32_out(s: dict, cfg=None) -> torch.Tensor:
    """The fused kernel's o in fp32 (its own arithmetic error, before rounding o to bf16)."""
    from weaver.kernels import triton as wt

    o, _ = wt.gdn_tree(s["q"], s["k"], s["v"], s["g"], s["beta"], s["par"], initial_state=s["h0"], config=cfg,
                       out_dtype=torch.float32)  # fmt: skip
    return o


def method_prep(s: dict):
    """The prep launch alone (Grams, G, diagonal inverses, state products), structure prebuilt."""
    from weaver.kernels import triton as wt

    tree = wt.build_tree_structure(s["par"])
    return lambda: wt.gdn_tree(s["q"], s["k"], s["v"], s["g"], s["beta"], tree, initial_state=s["h0"],
                               run_solve=False)  # fmt: skip


def method_structure(s: dict):
    from weaver.kernels import triton as wt

    return lambda: wt.build_tree_structure(s["par"])


def _packed(s: dict):
    """All root-to-leaf paths' node ids concatenated, and cu_seqlens."""
    idx = [n for p in s["paths"] for n in p]
    cu = [0]
    for p in s["paths"]:
        cu.append(cu[-1] + len(p))
    dev = s["q"].device
    return torch.tensor(idx, device=dev), torch.tensor(cu, device=dev), cu


def _from_paths(s: dict, o_packed: torch.Tensor, cu: list[int]) -> torch.Tensor:
    """Per-node outputs [1, T, HV, V] taken from the first path holding each node."""
    out = torch.empty_like(s["v"])
    seen = set()
    for p, start in zip(s["paths"], cu[:-1]):
        for pos, n in enumerate(p):
            if n not in seen:
                seen.add(n)
                out[:, n] = o_packed[:, start + pos]
    return out


def method_per_branch(s: dict, fla):
    idx, _, cu = _packed(s)
    scale = SHAPE["K"] ** -0.5

    def run():
        x = [t.index_select(1, idx) for t in (s["q"], s["k"], s["v"], s["g"], s["beta"])]
        outs = []
        for a, b in zip(cu[:-1], cu[1:]):
            o, _ = fla.fused_recurrent_gated_delta_rule(
                q=x[0][:, a:b], k=x[1][:, a:b], v=x[2][:, a:b], g=x[3][:, a:b], beta=x[4][:, a:b],
                scale=scale, initial_state=s["h0"], output_final_state=False,
            )  # fmt: skip
            outs.append(o)
        return outs

    def extract(outs):
        return _from_paths(s, torch.cat(outs, dim=1), cu)

    return run, extract


def method_varlen(s: dict, fla):
    idx, cu_t, cu = _packed(s)
    h0_rep = s["h0"].expand(len(s["paths"]), -1, -1, -1).contiguous()  # outside the timed region
    scale = SHAPE["K"] ** -0.5

    def run():
        x = [t.index_select(1, idx) for t in (s["q"], s["k"], s["v"], s["g"], s["beta"])]
        o, _ = fla.fused_recurrent_gated_delta_rule(
            q=x[0], k=x[1], v=x[2], g=x[3], beta=x[4], scale=scale, initial_state=h0_rep,
            output_final_state=False, cu_seqlens=cu_t,
        )  # fmt: skip
        return o

    return run, lambda o: _from_paths(s, o, cu)


def method_snapshot(s: dict, fla, snap: torch.Tensor):
    """Nodes level by level; each level one fla step (B = nodes in the level, T = 1) from the parents'
    snapshots; every node's state is written to `snap` (slot = position in level order)."""
    parents = s["parents"]
    depth = [0] * len(parents)
    for i in range(1, len(parents)):
        depth[i] = depth[parents[i]] + 1
    order = sorted(range(len(parents)), key=lambda i: (depth[i], i))
    slot = {n: j for j, n in enumerate(order)}
    levels, start = [], 0
    for d in range(max(depth) + 1):
        n = sum(1 for x in depth if x == d)
        par_slots = torch.tensor([slot[parents[order[j]]] for j in range(start, start + n)] if d else [],
                                 dtype=torch.long, device=snap.device)  # fmt: skip
        levels.append((start, n, par_slots))
        start += n
    order_t = torch.tensor(order, device=s["q"].device)
    scale = SHAPE["K"] ** -0.5

    def run():
        x = [t.index_select(1, order_t) for t in (s["q"], s["k"], s["v"], s["g"], s["beta"])]
        o_lv = torch.empty_like(x[2])
        for a, n, ps in levels:
            init = s["h0"] if a == 0 else snap.index_select(0, ps)
            o, h = fla.fused_recurrent_gated_delta_rule(
                q=x[0][0, a : a + n, None], k=x[1][0, a : a + n, None], v=x[2][0, a : a + n, None],
                g=x[3][0, a : a + n, None], beta=x[4][0, a : a + n, None], scale=scale,
                initial_state=init, output_final_state=True,
            )  # fmt: skip
            snap[a : a + n].copy_(h)
            o_lv[0, a : a + n] = o[:, 0]
        return o_lv

    def extract(o_lv):
        out = torch.empty_like(o_lv)
        out[:, order_t] = o_lv
        return out

    return run, extract


def method_chunk_chain(s: dict, fla):
    def run():
        o, _ = fla.chunk_gated_delta_rule(
            s["q"], s["k"], s["v"], s["g"], s["beta"], scale=SHAPE["K"] ** -0.5, initial_state=s["h0"],
            output_final_state=False,
        )  # fmt: skip
        return o

    return run


# ---------------------------------------------------------------------------------------------- timing
def time_graphs(runs: list, reps: int, warmup: int, calls_per_graph: int | None = None) -> tuple[float, list[float]]:
    """Median device time (us) of one call. The calls (one per input set, each its own tree and tensors) are
    captured back to back into graphs of `calls_per_graph` calls (default: all in one graph, as the layers of
    a verify pass run); each replay is timed with events and divided by its number of calls."""
    n = len(runs) if calls_per_graph is None else calls_per_graph
    for run in runs:
        run()  # eager warm-up: compile / autotune outside the capture
    torch.cuda.synchronize()
    graphs = []
    for start in range(0, len(runs), n):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for run in runs[start : start + n]:
                run()
        graphs.append(g)
    for _ in range(warmup):
        for g in graphs:
            g.replay()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    torch.cuda._sleep(50_000_000)  # ~25 ms: the host queues all replays before the device reaches them
    for r in range(reps):
        ev[r][0].record()
        graphs[r % len(graphs)].replay()
        ev[r][1].record()
    torch.cuda.synchronize()
    us = sorted(a.elapsed_time(b) * 1e3 / n for a, b in ev)
    del graphs
    return us[len(us) // 2], us


def copy_bandwidth() -> float:
    """Device-to-device copy, bytes read + written per second (2 GiB buffer, median of 20)."""
    n = 1 << 29
    a, b = torch.empty(n, device="cuda"), torch.empty(n, device="cuda")
    a.uniform_()
    ts = []
    for _ in range(23):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        b.copy_(a)
        e1.record()
        torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1) * 1e-3)
    ts = sorted(ts[3:])
    return 2 * 4 * n / ts[len(ts) // 2]


def floor_bytes(T: int, dtype: torch.dtype) -> int:
    H, HV, K, V = SHAPE["H"], SHAPE["HV"], SHAPE["K"], SHAPE["V"]
    e = torch.tensor([], dtype=dtype).element_size()
    inputs = 2 * T * H * K * e + T * HV * V * e + 2 * T * HV * 4 + HV * K * V * 4 + T * 4
    outputs = T * HV * V * e + T * H * K * 4 + T * HV * V * 4 + T * HV * 4
    return inputs + outputs


# ---------------------------------------------------------------------------------------------- errors
def reference(s: dict) -> torch.Tensor:
    from weaver.ops.gdn import gdn_tree

    d = [s[n].double() for n in ("q", "k", "v", "g", "beta")]
    o, _ = gdn_tree(*d, s["par"], initial_state=None if s["h0"] is None else s["h0"].double())
    return o


def _identity(o):
    return o


def rel_err(ref: torch.Tensor, out: torch.Tensor) -> float:
    from weaver.testing import relative_error

    return relative_error(ref, out)


def norm_err(ref: torch.Tensor, out: torch.Tensor) -> float:
    from weaver.testing import norm_relative_error

    return norm_relative_error(ref, out)


# ------------------------------------------------------------------------------------------------- CLI
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--T", type=positive_int, nargs="+", default=list(DEFAULT_T), help="tree sizes")
    parser.add_argument("--kinds", nargs="+", default=["tree", "chain"], choices=["tree", "chain", "wide"])
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"], help="q/k/v dtype (timed)")
    parser.add_argument("--sets", type=positive_int, default=12, help="input sets rotated between replays")
    parser.add_argument("--reps", type=positive_int, default=200, help="timed graph replays per method")
    parser.add_argument("--warmup", type=int, default=3, help="untimed replays of each set")
    parser.add_argument("--methods", nargs="+", default=["fused", "fused_kernel", "structure", "prep",
                        "per_branch", "varlen", "snapshot", "chunk_chain"])  # fmt: skip
    parser.add_argument("--sweep", action="store_true", help="also time the fused kernel over configs")
    parser.add_argument("--sweep-T", type=positive_int, nargs="+", default=None, help="sizes to sweep (default: all)")
    parser.add_argument(
        "--sweep-from", type=int, default=0, help="sweep only the default and SWEEP[i:] (newest candidates last)"
    )
    parser.add_argument("--tag", default="", help="suffix of the result file names")
    parser.add_argument("--fp32-check", action="store_true", help="errors (and time) of fp32 inputs too")
    parser.add_argument("--out", default="benchmarks/results/kernels", help="directory for JSON + markdown")


SWEEP = [  # changes to the default config, one at a time (the first is the default itself)
    {}, dict(precision="tf32"), dict(inv_precision="tf32"), dict(BT=32), dict(BVP=32), dict(BVP=64),
    dict(prep_warps=8), dict(BV=16), dict(BV=64), dict(num_warps=8), dict(num_stages=2),
    dict(solve_order="left", lead=False), dict(split_prep=True), dict(solve_order="left", BVP=64, lead=False),
    dict(solve_order="left", split_prep=True, BVP=64, lead=False), dict(lead=False), dict(lead=True),  # 15, 16
]  # fmt: skip


def run(args: argparse.Namespace) -> int:
    if not torch.cuda.is_available():
        print("weaver bench kernels needs a CUDA GPU", file=sys.stderr)
        return 2
    import triton

    from weaver.kernels.triton.gdn_tree import default_config

    try:
        import fla
        import fla.ops.gated_delta_rule as fla_gdn

        fla_version = getattr(fla, "__version__", "?")
    except ImportError:
        fla_gdn, fla_version = None, None
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    bw = copy_bandwidth()
    command = "python -m weaver.bench.kernels " + " ".join(sys.argv[1:])
    env = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
               fla=fla_version, python=platform.python_version(), command=command,
               copy_bw_TBps=bw / 1e12, shape=SHAPE, dtype=args.dtype, sets=args.sets, reps=args.reps,
               date=time.strftime("%Y-%m-%d %H:%M:%S"))  # fmt: skip
    print(json.dumps(env), flush=True)
    rows, sweep_rows = [], []
    for T in args.T:
        for kind in args.kinds:
            sets = [make_set(T, kind, 1000 * T + i, dtype, DEVICE) for i in range(args.sets)]
            row = dict(T=T, kind=kind, leaves=sum(len(s["paths"]) for s in sets) / len(sets),
                       max_depth=max(tree_depth(s["parents"]) for s in sets),
                       floor_us=floor_bytes(T, dtype) / bw * 1e6)  # fmt: skip
            ref = reference(sets[0])
            row["err_bf16_rounding"] = rel_err(ref, ref.to(dtype)) if dtype != torch.float32 else 0.0
            row["norm_err_bf16_rounding"] = norm_err(ref, ref.to(dtype)) if dtype != torch.float32 else 0.0
            s0 = sets[0]
            try:  # the kernel's arithmetic error, before rounding o to bf16
                o32 = fused_fp32_out(s0)
                row["fused_err_fp32_out"], row["fused_norm_err_fp32_out"] = rel_err(ref, o32), norm_err(ref, o32)
            except Exception as e:
                print(f"T={T} {kind} fp32-out: {type(e).__name__}: {e}", flush=True)
            snap = torch.empty(T, SHAPE["HV"], SHAPE["K"], SHAPE["V"], device=DEVICE)
            for m in args.methods:
                if m not in ("fused", "fused_kernel", "structure", "prep") and fla_gdn is None:
                    continue
                if m == "chunk_chain" and kind != "chain":
                    continue
                try:
                    extract = _identity
                    if m in ("fused", "fused_kernel"):
                        runs = [method_fused(s, prebuilt=m == "fused_kernel") for s in sets]
                    elif m == "structure":
                        runs = [method_structure(s) for s in sets]
                        extract = None
                    elif m == "prep":
                        runs = [method_prep(s) for s in sets]
                        extract = None
                    elif m == "per_branch":
                        runs, ex = zip(*[method_per_branch(s, fla_gdn) for s in sets])
                        extract = ex[0]
                    elif m == "varlen":
                        runs, ex = zip(*[method_varlen(s, fla_gdn) for s in sets])
                        extract = ex[0]
                    elif m == "snapshot":
                        runs, ex = zip(*[method_snapshot(s, fla_gdn, snap) for s in sets])
                        extract = ex[0]
                    else:
                        runs = [method_chunk_chain(s, fla_gdn) for s in sets]
                    if extract is not None:
                        out = extract(runs[0]())
                        row[f"{m}_err"], row[f"{m}_norm_err"] = rel_err(ref, out), norm_err(ref, out)
                    row[f"{m}_us"], _ = time_graphs(list(runs), args.reps, args.warmup)
                    if m == "fused":  # one call per graph replay: what a lone call pays in launch overhead
                        row["fused_single_us"], _ = time_graphs(list(runs), args.reps, args.warmup, 1)
                except Exception as e:  # keep the rest of the table
                    row[f"{m}_error"] = f"{type(e).__name__}: {e}"[:300]
                    print(f"T={T} {kind} {m}: {row[f'{m}_error']}", flush=True)
            if args.fp32_check:
                try:
                    s32s = [make_set(T, kind, 1000 * T + i, torch.float32, DEVICE) for i in range(4)]
                    s32 = s32s[0]
                    ref32 = reference(s32)
                    row["fused_fp32_err"] = rel_err(ref32, method_fused(s32)())
                    runs32 = [method_fused(x, prebuilt=True) for x in s32s]
                    row["fused_fp32_us"], _ = time_graphs(runs32, args.reps // 2, 2)
                    if fla_gdn is not None:
                        pb_run, pb_extract = method_per_branch(s32, fla_gdn)
                        row["per_branch_fp32_err"] = rel_err(ref32, pb_extract(pb_run()))
                except Exception as e:
                    row["fp32_error"] = f"{type(e).__name__}: {e}"[:300]
                    print(f"T={T} {kind} fp32: {row['fp32_error']}", flush=True)
            if args.sweep and kind != "wide" and (args.sweep_T is None or T in args.sweep_T):
                try:  # the state products' share of the kernel
                    no_h0 = [dict(s, h0=None) for s in sets[:4]]
                    runs = [method_fused(s, prebuilt=True) for s in no_h0]
                    row["fused_kernel_no_h0_us"], _ = time_graphs(runs, 60, 2)
                except Exception as e:
                    print(f"T={T} {kind} no-h0: {type(e).__name__}: {e}", flush=True)
                base_cfg = default_config(T, SHAPE["V"], dtype)
                for change in [SWEEP[0], *SWEEP[max(1, args.sweep_from) :]]:
                    cfg = base_cfg._replace(**change)
                    if cfg.BT > max(16, triton.next_power_of_2(T)):
                        continue
                    rec = dict(T=T, kind=kind, **cfg._asdict())
                    try:
                        rec["err"] = rel_err(ref, method_fused(sets[0], cfg)())
                        rec["norm_err_fp32_out"] = norm_err(ref, fused_fp32_out(s0, cfg))
                        rec["us"], _ = time_graphs([method_fused(s, cfg, True) for s in sets[:4]], 60, 2)
                    except Exception as e:
                        rec["error"] = f"{type(e).__name__}: {e}"[:300]
                    sweep_rows.append(rec)
                    print("sweep", json.dumps(rec), flush=True)
            row["default_config"] = default_config(T, SHAPE["V"], dtype)._asdict()
            rows.append(row)
            print("row", json.dumps(row), flush=True)
            write_results(args.out, env, rows, sweep_rows, args.tag)  # after every row: a crash loses nothing
            del sets, snap
            torch.cuda.empty_cache()
    print(markdown(env, rows, sweep_rows), flush=True)
    return 0


def write_results(out_dir: str, env: dict, rows: list[dict], sweep_rows: list[dict], tag: str = "") -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tag = ("h200_" if "H200" in env["gpu"] else "") + env["dtype"] + (f"_{tag}" if tag else "")
    (out / f"kernels_{tag}.json").write_text(json.dumps(dict(env=env, rows=rows, sweep=sweep_rows), indent=1))
    (out / f"kernels_{tag}.md").write_text(markdown(env, rows, sweep_rows))


def markdown(env: dict, rows: list[dict], sweep_rows: list[dict]) -> str:
    def f(x, fmt="{:.1f}"):
        return fmt.format(x) if isinstance(x, (int, float)) and math.isfinite(x) else "-"

    base = ("per_branch", "varlen", "snapshot", "chunk_chain")
    lines = [
        f"# GDN tree verify per layer ({env['gpu']}, {env['dtype']} q/k/v)",
        "",
        f"torch {env['torch']}, triton {env['triton']}, fla {env['fla']}; B=1 H=16 HV=48 K=V=128; times in us, "
        f"per call: median over {env['reps']} replays of one CUDA graph holding {env['sets']} calls back to back, "
        f"each on its own input set (own tree and tensors; together larger than the L2), divided by the calls; "
        f"copy bandwidth {env['copy_bw_TBps']:.2f} TB/s; {env['date']}. Command: `{env['command']}`",
        "",
        "fused = structure build + kernel; kernel = structure prebuilt (shared by all layers of a verify); "
        "fused 1/graph = fused with one call per graph replay (adds the ~5 us of a lone graph launch). "
        "Errors: max|o - ref| / max|ref| and ||o - ref|| / ||ref|| vs float64 on the same inputs; `bf16 out` "
        "is that of the float64 reference rounded to bf16 (the floor of any bf16 output).",
        "",
        "| T | kind | leaves | depth | fused | fused 1/graph | kernel | structure | prep | per-branch | varlen "
        "| snapshot | chunk (chain) | floor | per-branch / fused | best baseline / fused |",
        "|" + "---:|" * 16,
    ]
    for r in rows:
        fu = r.get("fused_us", float("nan"))
        best = min((r[f"{m}_us"] for m in base if f"{m}_us" in r), default=float("nan"))  # chunk: chains only
        lines.append(
            f"| {r['T']} | {r['kind']} | {r['leaves']:.0f} | {r['max_depth']} | {f(fu)} "
            f"| {f(r.get('fused_single_us'))} | {f(r.get('fused_kernel_us'))} | {f(r.get('structure_us'))} "
            f"| {f(r.get('prep_us'))} | "
            + " | ".join(f(r.get(f"{m}_us")) for m in base)
            + f" | {f(r['floor_us'], '{:.2f}')} | {f(r.get('per_branch_us', float('nan')) / fu, '{:.1f}x')} "
            f"| {f(best / fu, '{:.1f}x')} |"
        )  # fmt: skip
    for metric, key in (("max|o - ref| / max|ref|", "err"), ("||o - ref|| / ||ref||", "norm_err")):
        lines += ["", f"Errors, {metric}:", "", "| T | kind | fused | per-branch | varlen | snapshot | chunk "
                  "| bf16 out | fused, fp32 o |", "|" + "---:|" * 9]  # fmt: skip
        for r in rows:
            errs = " | ".join(f(r.get(f"{m}_{key}"), "{:.1e}") for m in ("fused",) + base)
            lines.append(f"| {r['T']} | {r['kind']} | {errs} | {f(r.get(key + '_bf16_rounding'), '{:.1e}')} "
                         f"| {f(r.get('fused_' + key + '_fp32_out'), '{:.1e}')} |")  # fmt: skip
    if any("fused_fp32_err" in r for r in rows):
        lines += ["", "fp32 q/k/v (ieee dots):", "", "| T | kind | kernel us | err fused | err per-branch |",
                  "|---:|---|---:|---:|---:|"]  # fmt: skip
        for r in rows:
            lines.append(
                f"| {r['T']} | {r['kind']} | {f(r.get('fused_fp32_us'))} | "
                f"{f(r.get('fused_fp32_err'), '{:.1e}')} | {f(r.get('per_branch_fp32_err'), '{:.1e}')} |"
            )
    if sweep_rows:
        lines += [
            "",
            "Config sweep (kernel only, structure prebuilt; 4 sets, 60 replays):",
            "",
            "| T | kind | BT | BV | warps | stages | precision | prep precision | prep warps | BVP | solve "
            "| split prep | lead | us | err | norm err, fp32 o |",
            "|" + "---:|" * 16,
        ]
        for r in sweep_rows:
            lines.append(
                f"| {r['T']} | {r['kind']} | {r['BT']} | {r['BV']} | {r['num_warps']} | {r['num_stages']} | "
                f"{r['precision']} | {r['inv_precision']} | {r['prep_warps']} | {r['BVP']} | "
                f"{r.get('solve_order', 'right')} | {r.get('split_prep', False)} | {r.get('lead', False)} | "
                f"{f(r.get('us'))} "
                f"| {f(r.get('err'), '{:.1e}')} | {f(r.get('norm_err_fp32_out'), '{:.1e}')} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="weaver bench kernels", description=__doc__.split("\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
