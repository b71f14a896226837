"""Issue 19: can weaver's skinny GEMM (`weaver.kernels.triton.skinny`: the weight rows as wgmma's M, a cp.async
pipeline, optional split-K) read the 27B weights faster than cuBLAS at a verify's 17 or 65 rows, as the one-row
GEMV did at one (H100: 3.1 against 2.75 TB/s)?

Session 50's sweep of the row-tiled kernel (`gemv_wide_ab.py --rows 17`: mma.sync on register-staged loads) lost
1.20-1.41x. This sweeps the skinny kernel's tiles per shape and row count against cuBLAS and cuBLASLt (gate_up as the
model runs it: with SwiGLU, against cuBLAS + torch's SwiGLU), prints the best three (us per call, TB/s), checks the
best against an fp32 product, and with --table writes the best configs as a tuning table (`skinny_gemm` entries
added to this GPU's packaged table, if any: RuntimeOptions.tuning's format, with each shape's time and cuBLAS's, so
that `gemv.linear` routes only the shapes it won) for `round_profile.py --tuning TABLE`, the rounds' A/B.

    python3 scripts/gpu/skinny_gemm_ab.py [--rows 17 65] [--shapes mlp.gate_up mlp.down] [--table t.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
from functools import partial

import torch
import triton
from gemv_wide_ab import us_per_call, with_blas  # scripts/gpu: the one-row sweep's timing and BLAS switch

from weaver.kernels.triton import tuning
from weaver.kernels.triton.skinny import SkinnyTiles, skinny_gemm

H, I, V = 5120, 17408, 248320
SHAPES = {  # name: (weight rows, K, swiglu): the 27B round's projections through weaver.kernels.gemv.linear
    "gdn.in_proj (qkv, z, b, a)": (2 * 2048 + 2 * 6144 + 2 * 48, H, False),
    "gdn.out_proj / attn.o_proj": (H, 6144, False),
    "attn.qkv (gated q)": (24 * 256 * 2 + 2 * 4 * 256, H, False),
    "mlp.gate_up": (2 * I, H, True),
    "mlp.down": (H, I, False),
    "lm_head": (V, H, False),
    "drafter.fc (commit)": (H, 5 * H, False),  # the published drafter's context: 5 target layers' features
    "drafter.context_kv (commit)": (5 * 2 * 8 * 128, H, False),  # 5 layers' K and V, 8 kv heads of 128
}
SMEM = 220 * 1024  # operand tiles of every pipeline stage within an H100 / H200 SM's 227 KB


def configs(n: int, k: int, rows: int, swiglu: bool):
    """wgmma-sized weight tiles (4 or 8 warps for 128 rows, 8 for 256), the deepest pipeline (4 or 3 stages) within
    shared memory (a SwiGLU tile reads gate and up rows), each fp32 accumulator under 128 registers a thread (ptxas
    for sm_90, triton 3.6: one of 128 spills, a SwiGLU's two of 64 do not), K splits only for the shapes whose
    64-row column blocks leave SMs idle. One pipeline depth per tile keeps the sweep within a device call."""
    block_m = max(16, triton.next_power_of_2(rows))
    wide = swiglu or triton.cdiv(n, 64) >= 264
    for bn, bk in itertools.product((64, 128, 256), (64, 128)):
        for warps in {64: (4,), 128: (4, 8), 256: (8,)}[bn]:
            if bn * block_m >= 128 * 32 * warps:  # an accumulator of 128 registers a thread spills
                continue
            fits = [s for s in (4, 3) if s * ((2 if swiglu else 1) * bn + block_m) * bk * 2 <= SMEM]
            if not fits:
                continue
            for split in (1,) if wide else (1, 2, 4):
                if split > 1 and (split * triton.cdiv(n, bn) > 700 or k // split < 4 * bk):
                    continue
                yield SkinnyTiles(bn, bk, warps, fits[0], split)


def cublas(calls, swiglu: bool) -> None:
    """What gemv.linear's F.linear path runs: the GEMM, and for a [gate; up] weight torch's SwiGLU."""
    for x, w in calls:
        y = torch.matmul(x, w.t())
        if swiglu:
            gate, up = y.chunk(2, dim=-1)
            torch.nn.functional.silu(gate) * up


def skinny(calls, swiglu: bool, tiles: SkinnyTiles) -> None:
    for x, w in calls:
        skinny_gemm(x, w, swiglu, tiles)


def sweep(name: str, rows: int, reps: int, gen: torch.Generator, table: dict) -> None:
    n, k, swiglu = SHAPES[name]
    dev = torch.device("cuda")
    copies = max(1, -(-400 * 2**20 // (n * k * 2)))  # >= 400 MB of weights: every call reads HBM, not L2
    ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16, generator=gen) * 0.02 for _ in range(copies)]
    x = torch.randn(rows, k, device=dev, dtype=torch.bfloat16, generator=gen)
    calls = [(x, w) for w in ws]
    mb = n * k * 2 / 1e6
    base = us_per_call(partial(cublas, calls, swiglu), copies, reps)
    lt = with_blas("cublaslt", lambda: us_per_call(partial(cublas, calls, swiglu), copies, reps))
    results = []
    for tiles in configs(n, k, rows, swiglu):
        try:
            results.append((us_per_call(partial(skinny, calls, swiglu, tiles), copies, reps), tiles))
        except Exception as exc:  # noqa: BLE001 - a config the compiler refuses is skipped, with why
            print(f"  {name} {tuple(tiles)}: {type(exc).__name__}: {str(exc)[:80]}", flush=True)
    results.sort()
    t, best = results[0]
    ref = x.float() @ ws[0].float().t()
    if swiglu:
        gate, up = ref.chunk(2, dim=-1)
        ref = torch.nn.functional.silu(gate) * up
    err = ((skinny_gemm(x, ws[0], swiglu, best).float() - ref).abs().max() / ref.abs().max()).item()
    n_out = n // 2 if swiglu else n
    key = tuning.gemm_rows_key(n_out, k, rows, x.dtype, x.dtype, False, swiglu, False, False)
    table.setdefault("skinny_gemm", {})[key] = {"config": list(best), "us": round(t, 2), "cublas_us": round(base, 2)}
    tops = "; ".join(f"{u:.1f} ({mb / u:.2f}) {tuple(c)}" for u, c in results[:3])
    print(f"{name:26s} rows {rows:3d} [{n:6d} x {k:5d}]{' swiglu' if swiglu else ''} | cuBLAS {base:7.1f} "
          f"({mb / base:.2f}) | cuBLASLt {lt:7.1f} | {tops} | best/cuBLAS {t / base:.3f}, rel err {err:.1e}",
          flush=True)  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", default=list(SHAPES))
    p.add_argument("--rows", nargs="+", type=int, default=[17, 65])
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--table", default=None, help="write the best configs here as a tuning table (JSON)")
    args = p.parse_args()
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    table: dict = {}
    packaged = tuning.table_path()  # this GPU's packaged table (H200): kept, so the A/B changes only the GEMMs
    if packaged:
        with open(packaged) as f:
            table = json.load(f).get("best", {})
    for rows in args.rows:
        for name in args.shapes:
            sweep(name, rows, args.reps, gen, table)
            if args.table:  # after every shape: a cut run still leaves a table
                with open(args.table, "w") as f:
                    json.dump({"device": torch.cuda.get_device_name(), "best": table}, f, indent=1)


if __name__ == "__main__":
    main()
