"""Issue 19, the AR step's GEMVs: can weaver's Triton `fused_gemv` match cuBLAS at the Qwen3.6-27B shapes at M = 1
once a program loads long K tiles (session 44's adapter rule: whole input rows, few warps)?

The 2026-12-03 study (`gemv_27b.py`, scale/h200_gemv) tried 10 short-tile configs (BLOCK_K <= 512) and trailed
cuBLAS on every large shape. This sweeps BLOCK_N x BLOCK_K x warps with BLOCK_K up to 8,192 per shape. Each shape
gets enough weight copies (>= 400 MB) that every call reads HBM, not L2, as the 64 layers of a forward do.
Prints per shape cuBLAS and the best three configs (us per call, TB/s), checks the best one's output, and times
the same torch.matmul with cuBLASLt as torch's preferred BLAS.

With --exact the one-row sweep adds `gemv_long_rows` at every shape without a SwiGLU (session 57: on an H200 the
looped, masked tiles read 3.0-3.6 TB/s against cuBLAS's 3.4-4.1): K covered exactly by unrolled BLOCK_K tiles and
power-of-two pieces (5,120 = 4,096 + 1,024), no masked lanes, so fewer registers a program and more programs (more
bytes in flight) an SM; configs print as ("exact", BLOCK_N, BLOCK_K, warps).

--kinds picks what the one-row sweep runs: `loop` (fused_gemv's tiles, the default), `exact` (as --exact) and
`tma` (`gemv_tma`: weight tiles through TMA into shared memory, STAGES in flight; TmaTiles(BLOCK_N, BLOCK_K,
STAGES, warps)).

--norm times gemv_tma with and without its RMSNorm (`norm_weight`: statistics from the x tiles its loop loads) at
the shapes a norm precedes (GDN in_proj, attention qkv, gate_up + SwiGLU): the AR step's ~125 add + norm kernels
(~0.44 ms) could go into the GEMVs if the norm costs the GEMV nothing (sessions 46-47: on the register-tiled GEMV it
cost 2.7-4.3 ms a step).

With --rows M > 1 (a verify's 17 or 65 rows) it sweeps the row-tiled kernel instead (`GemmTiles`: BLOCK_M x
BLOCK_N x BLOCK_K, warps, stages; tl.dot on the tensor cores) against cuBLAS at M rows: can the verify's GEMMs
leave cuBLAS as the AR step's did?

    python3 scripts/gpu/gemv_wide_ab.py [--shapes mlp.down gdn.out_proj] [--reps 20] [--rows 17]
    python3 scripts/gpu/gemv_wide_ab.py --kinds exact tma     # the kernels without registers-held tiles only
    python3 scripts/gpu/gemv_wide_ab.py --norm                # gemv_tma with and without its RMSNorm
"""

from __future__ import annotations

import argparse
import itertools
from functools import partial

import torch

from weaver.bench.kernels import time_graphs
from weaver.kernels.gemv import long_row_tiles
from weaver.kernels.triton.decode import GemmTiles, fused_gemv
from weaver.kernels.triton.gemv_tiles import gemv_long_rows
from weaver.kernels.triton.gemv_tma import TmaTiles, gemv_tma

H, I, V = 5120, 17408, 248320
SHAPES = {  # name: (out, in): the 27B AR step's projections (gemv_27b.py's list)
    "gdn.in_proj_qkvz": (2 * 2048 + 2 * 6144, H),
    "gdn.out_proj": (H, 6144),
    "attn.qkv (gated q)": (24 * 256 * 2 + 2 * 4 * 256, H),
    "mlp.gate_up": (2 * I, H),
    "mlp.down": (H, I),
    "lm_head": (V, H),
}
BLOCK_N = (1, 2, 4, 8)
BLOCK_K = (512, 1024, 2048, 4096, 8192)
WARPS = (2, 4, 8)
MAX_PER_THREAD = 128  # weight elements a thread holds per tile


def us_per_call(fn, calls: int, reps: int) -> float:
    """Median us of one call, from a CUDA graph of the whole list."""
    return time_graphs([fn], reps, warmup=2)[0] / calls


def run(gemv, calls) -> None:
    for x, w, out in calls:
        gemv(x, w, out)


def cublas(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
    torch.matmul(x, w.t(), out=out)


def exact_gemv(x: torch.Tensor, w: torch.Tensor, config) -> torch.Tensor:
    """gemv_long_rows under an ("exact", BLOCK_N, BLOCK_K, warps) config; it allocates its own output."""
    _, bn, bk, warps = config
    return gemv_long_rows(x, w, block_k=bk, block_n=bn, num_warps=warps)


def own_output(x: torch.Tensor, w: torch.Tensor, config) -> torch.Tensor | None:
    """The kernels that allocate their output, as launched (None for fused_gemv's configs, which write `out`)."""
    if isinstance(config, TmaTiles):
        return gemv_tma(x, w, tiles=config)
    if config[0] == "exact":
        return exact_gemv(x, w, config)
    return None


def triton_gemv(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, config) -> None:
    if isinstance(config, TmaTiles) or config[0] == "exact":  # timed as launched (no copy into `out`)
        own_output(x, w, config)
    elif isinstance(config, GemmTiles):
        fused_gemv(x, w, out=out, tiles=config)
    else:
        fused_gemv(x, w, out=out, config=config)


def cublaslt_us(fn, calls: int, reps: int) -> float:
    """us_per_call of a torch.matmul list with cuBLASLt as torch's preferred BLAS (then back to the default): at a
    verify's rows torch's default library may not pick the best skinny-M kernel."""
    default = torch.backends.cuda.preferred_blas_library()
    torch.backends.cuda.preferred_blas_library("cublaslt")
    try:
        return us_per_call(fn, calls, reps)
    finally:
        torch.backends.cuda.preferred_blas_library(default)


def cublas_swiglu(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
    """What the torch path runs for an MLP's fused [gate; up]: the GEMM, then silu(gate) * up."""
    gate, up = torch.matmul(x, w.t()).chunk(2, dim=-1)
    torch.mul(torch.nn.functional.silu(gate), up, out=out)


def triton_swiglu(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, config) -> None:
    fused_gemv(x, w, out=out, config=config, swiglu=True)


def swiglu_ab(reps: int, dev: torch.device, gen: torch.Generator) -> None:
    """mlp.gate_up with SwiGLU in the GEMV's epilogue (weaver.kernels.gemv) against cuBLAS + the torch SwiGLU; the
    built-in rule (config None) first, then the other one- and two-row configs with long tiles."""
    n, k = SHAPES["mlp.gate_up"]
    ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16, generator=gen) * 0.02 for _ in range(2)]
    x = torch.randn(1, k, device=dev, dtype=torch.bfloat16, generator=gen)
    calls = [(x, w, torch.empty(1, n // 2, device=dev, dtype=torch.bfloat16)) for w in ws]
    base = us_per_call(partial(run, cublas_swiglu, calls), len(ws), reps)
    rows = [f"cuBLAS + torch SwiGLU {base:.1f}"]
    for cfg in (None, (1, 8192, 4), (1, 8192, 8), (2, 8192, 8), (1, 4096, 4), (2, 4096, 8)):
        t = us_per_call(partial(run, partial(triton_swiglu, config=cfg), calls), len(ws), reps)
        rows.append(f"{cfg or 'rule'} {t:.1f}")
    ref = torch.nn.functional.silu((x.float() @ ws[0].float().t())[:, : n // 2]) * (x.float() @ ws[0].float().t())[
        :, n // 2 :]  # fmt: skip
    err = ((fused_gemv(x, ws[0], swiglu=True).float() - ref).abs().max() / ref.abs().max()).item()
    print(f"mlp.gate_up + SwiGLU, us per call: {'; '.join(rows)}; rel err {err:.1e}", flush=True)


def weight_copies(n: int, k: int, dev: torch.device, gen: torch.Generator) -> list[torch.Tensor]:
    """Random [n, k] bf16 weights, enough copies (>= 400 MB) that a timed list of calls reads HBM, not L2."""
    copies = max(1, -(-400 * 2**20 // (n * k * 2)))
    return [torch.randn(n, k, device=dev, dtype=torch.bfloat16, generator=gen) * 0.02 for _ in range(copies)]


def tma_calls(x: torch.Tensor, ws: list, swiglu: bool, tiles: TmaTiles, norm_weight: torch.Tensor | None) -> None:
    for w in ws:
        gemv_tma(x, w, swiglu, tiles, norm_weight)


def tma_norm_ab(reps: int, dev: torch.device, gen: torch.Generator) -> None:
    """gemv_tma plain against gemv_tma with norm_weight (same tiles, same weights), us per call, at the three
    shapes a norm precedes; the SwiGLU epilogue on gate_up as the model would run it."""
    for name, swiglu in (("gdn.in_proj_qkvz", False), ("attn.qkv (gated q)", False), ("mlp.gate_up", True)):
        n, k = SHAPES[name]
        ws = weight_copies(n, k, dev, gen)
        copies = len(ws)
        x = torch.randn(1, k, device=dev, dtype=torch.bfloat16, generator=gen)
        g = torch.randn(k, device=dev, dtype=torch.bfloat16, generator=gen) * 0.1
        rows = []
        for tiles in (TmaTiles(), TmaTiles(16, 128, 8), TmaTiles(16, 256, 4)):
            plain, normed = (us_per_call(partial(tma_calls, x, ws, swiglu, tiles, w), copies, reps) for w in (None, g))
            rows.append(f"{tuple(tiles)} {plain:.1f} -> {normed:.1f}")
        print(f"{name:20s}{' + SwiGLU' if swiglu else ''}: gemv_tma plain -> with its norm, us per call: "
              f"{'; '.join(rows)}", flush=True)  # fmt: skip


def exact_configs(k: int):
    """("exact", BLOCK_N, BLOCK_K, warps) for gemv_long_rows where BLOCK_K tiles and pieces cover k exactly, once
    per distinct cover (at K = 5,120 BLOCK_K 8,192 and 4,096 both load 4,096 + 1,024)."""
    seen = set()
    for bn, bk, warps in itertools.product((1, 2), (1024, 2048, 4096, 8192), (4, 8)):
        tiles = long_row_tiles(k, bk)
        pieces = None if tiles is None else (bk,) * tiles[0] + tiles[1]
        if pieces is not None and (bn, pieces, warps) not in seen and bn * bk <= MAX_PER_THREAD * 32 * warps:
            seen.add((bn, pieces, warps))
            yield "exact", bn, bk, warps


def tma_configs():
    """gemv_tma's tilings: BLOCK_N 8-32 rows, 128- or 256-wide tiles, 4-8 of them in flight a program."""
    for bn, (bk, stages) in itertools.product((8, 16, 32), ((128, 8), (256, 4), (256, 6))):
        yield TmaTiles(bn, bk, stages, 4)


def configs(k: int, rows: int):
    """(BLOCK_N, BLOCK_K, warps) within the register budget, BLOCK_K no wider than K's power of two; for several
    rows, row tiles that hold them in one or two M tiles."""
    if rows > 1:  # session 50 (H100, 17 rows): 1.20-1.41x cuBLAS (session 51's skinny GEMM: docs/performance.md)
        block_m = (32, 64) if rows > 32 else (32,) if rows > 16 else (16,)
        for bm, bn, bk, warps, stages in itertools.product(block_m, (32, 64, 128), (128, 256), (4, 8), (3, 5)):
            if (bm, bn) != (64, 128):
                yield GemmTiles(bm, bn, bk, warps, stages)
        return
    for bn, bk, warps in itertools.product(BLOCK_N, BLOCK_K, WARPS):
        if bk <= max(512, 1 << (k - 1).bit_length()) and bn * bk <= MAX_PER_THREAD * 32 * warps:
            yield bn, bk, warps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", default=list(SHAPES))
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--swiglu", action="store_true", help="only the gate_up + SwiGLU comparison")
    p.add_argument("--rows", type=int, default=1, help="input rows (a verify's 17 or 65: the row-tiled kernel)")
    p.add_argument("--exact", action="store_true", help="one row: also gemv_long_rows' exact cover of K")
    p.add_argument("--norm", action="store_true", help="only gemv_tma with and without its RMSNorm")
    p.add_argument("--kinds", nargs="+", choices=("loop", "exact", "tma"), default=["loop"],
                   help="one row: which kernels to sweep (--exact adds exact)")
    args = p.parse_args()
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)
    print(torch.cuda.get_device_name(), torch.__version__)
    if args.swiglu:
        return swiglu_ab(args.reps, dev, gen)
    if args.norm:
        return tma_norm_ab(args.reps, dev, gen)
    tiles = "(BLOCK_M, BLOCK_N, BLOCK_K, warps, stages)" if args.rows > 1 else "(BLOCK_N, BLOCK_K, warps)"
    print(f"rows {args.rows}; shape      [  out x    in]  copies | cuBLAS us (TB/s) | best configs {tiles}")
    for name in args.shapes:
        n, k = SHAPES[name]
        ws = weight_copies(n, k, dev, gen)
        copies = len(ws)
        x = torch.randn(args.rows, k, device=dev, dtype=torch.bfloat16, generator=gen)
        calls = [(x, w, torch.empty(args.rows, n, device=dev, dtype=torch.bfloat16)) for w in ws]
        mb = n * k * 2 / 1e6
        base = us_per_call(partial(run, cublas, calls), copies, args.reps)
        lt = cublaslt_us(partial(run, cublas, calls), copies, args.reps)
        results = []
        kinds = set(args.kinds) | ({"exact"} if args.exact else set()) if args.rows == 1 else {"loop"}
        sweeps = {"loop": partial(configs, k, args.rows), "exact": partial(exact_configs, k), "tma": tma_configs}
        for cfg in itertools.chain.from_iterable(sweeps[kind]() for kind in sorted(kinds)):
            try:
                results.append((us_per_call(partial(run, partial(triton_gemv, config=cfg), calls), copies, args.reps),
                                cfg))  # fmt: skip
            except Exception as exc:  # noqa: BLE001 - a config the compiler refuses is skipped, with why
                print(f"  {name} {cfg}: {type(exc).__name__}: {str(exc)[:80]}")
        results.sort()
        best = results[0][1]
        ref = x.float() @ ws[0].float().t()
        got = own_output(x, ws[0], best)
        if got is None:
            got = torch.empty_like(calls[0][2])
            triton_gemv(x, ws[0], got, best)
        got = got.float()
        err = ((got - ref).abs().max() / ref.abs().max()).item()
        tops = "; ".join(f"{t:.1f} ({mb / t:.2f}) {tuple(c)}" for t, c in results[:3])
        print(f"{name:20s} [{n:6d} x {k:5d}] {copies:6d} | {base:7.1f} ({mb / base:.2f}) | {tops} | "
              f"best/cuBLAS {results[0][0] / base:.3f}, rel err {err:.1e} | cuBLASLt {lt:.1f}", flush=True)


if __name__ == "__main__":
    main()
