"""H200, issue 19: the Weaver adapter step's heaviest launches at the paper's adapter width against their
alternatives, in one process (session 31's 27B profile: per weaver-64 round, 48 fused GEMVs 2.73 ms and 16 pool
scorings 0.85 ms of a 3.23 ms build).

1. The block's output projection + MLP (`adapter_finish`, released SwiGLU variant, MLP = width) on 4 node rows:
   the three fused GEMVs with one row a program (each re-reads its weight tile per row) and with all rows a
   program (`block_m`, session 44), against the torch reference compiled (cuBLAS) and eager, at widths 512 / 1024 /
   2048. Four weight sets in turn (128 MB at 2048, over the 50 MB L2), as a round's steps meet them cold.
   `--sweep`: then each of the three GEMVs alone with all rows a program, over (BLOCK_N, BLOCK_K, warps).
2. (Session 31's run, at 6dc24a3, also timed the pool scoring launch at d 2048 in 7 (BLOCK_K, BLOCK_D, warps)
   configs, through a loop over d written for it: the packaged single-slice config was the fastest (7.3 us), so the
   loop and the configs were deleted; call3_after/adapter_build_ab.txt keeps the table.)

Each side is checked against the torch reference first. Times: a CUDA graph of 16 calls (a round's steps),
median of replays, us per call.

    python3 scripts/gpu/adapter_build_ab.py | tee $OUT/adapter_build_ab.txt
"""

from __future__ import annotations

import argparse
import functools

import torch
import triton

from weaver.bench.kernels import time_graphs
from weaver.kernels.triton.adapter_finish import adapter_finish as finish_kernel
from weaver.kernels.triton.decode import fused_gemv, gemv_config
from weaver.ops.adapter_finish import adapter_finish as finish_ref

CALLS = 16
DEV = "cuda"  # the timed device (a CPU dry run of the script sets "cpu" under TRITON_INTERPRET=1)


def us(fn) -> float:
    """Median us per call of fn in a graph of CALLS calls."""
    return time_graphs([fn] * CALLS, reps=40, warmup=3)[0]


def finish_weights(width: int, gen: torch.Generator, dev: str) -> tuple:
    """One released-variant block's finish weights (o_proj, norm_mlp, gate_up_proj, down_proj, biases None)."""
    def w(*shape):
        return (torch.randn(*shape, generator=gen) / shape[-1] ** 0.5).to(dev, torch.bfloat16)
    norm = (1 + 0.1 * torch.randn(width, generator=gen)).to(dev, torch.bfloat16)
    return (w(width, width), norm, None, 1e-6, w(2 * width, width), None, w(width, width), None, True)


def rotating(calls: list):
    """One callable that runs the next of `calls` each time (weight sets met in turn, as a round's steps do)."""
    state = {"i": 0}

    def run():
        state["i"] += 1
        return calls[state["i"] % len(calls)]()
    return run


def finish_ab(rows: int) -> None:
    gen = torch.Generator().manual_seed(0)
    compiled_ref = torch.compile(finish_ref, dynamic=False)
    print(f"## adapter_finish, {rows} node rows, bf16, 4 weight sets in turn (us per call)")
    print(f"{'width':>6} {'MB/step':>8} {'GEMVs, 1 row':>13} {'GEMVs, all rows':>16} {'torch compiled':>15} "
          f"{'torch eager':>12} {'max |diff|':>11}")
    for width in (512, 1024, 2048):
        sets = [finish_weights(width, gen, DEV) for _ in range(4)]
        x = torch.randn(rows, width, generator=gen).to(DEV, torch.bfloat16)
        attn = torch.randn(rows, width, generator=gen).to(DEV, torch.bfloat16)
        ref = finish_ref(x, attn, *sets[0])
        one_row = dict(block_m=1)
        got = (finish_kernel(x, attn, *sets[0], **one_row), finish_kernel(x, attn, *sets[0]),
               compiled_ref(x, attn, *sets[0]))  # fmt: skip
        diff = max((g.float() - ref.float()).abs().max().item() for g in got)
        mb = sum(t.numel() * 2 for t in (sets[0][0], sets[0][4], sets[0][6])) / 2**20
        times = [us(rotating([functools.partial(fn, x, attn, *ws, **kw) for ws in sets]))
                 for fn, kw in ((finish_kernel, one_row), (finish_kernel, {}), (compiled_ref, {}), (finish_ref, {}))]
        print(f"{width:6d} {mb:8.1f} {times[0]:13.1f} {times[1]:16.1f} {times[2]:15.1f} {times[3]:12.1f} {diff:11.3g}",
              flush=True)


def gemv_calls(x: torch.Tensor, weights: list[torch.Tensor], block_m: int, cfg, row_tiles: bool = False, **kw):
    """fused_gemv(x, W, **kw) with launch cfg (None: gemv_config), block_m rows a program (or the row-tiled launch),
    the next W at every call."""
    return rotating([functools.partial(fused_gemv, x, w, **kw, config=cfg, row_tiles=row_tiles, block_m=block_m)
                     for w in weights])


def gemv_sweep(rows: int, widths: tuple[int, ...]) -> None:
    """Each finish GEMV alone (4 weight sets in turn), all rows a program: gemv_config's launch and the best five."""
    gen = torch.Generator().manual_seed(1)
    block_m = min(8, triton.next_power_of_2(rows))
    print(f"\n## the finish's GEMVs alone, {rows} rows, block_m {block_m} (us per call)")
    for width in widths:
        sets = [finish_weights(width, gen, DEV) for _ in range(4)]
        x = torch.randn(rows, width, generator=gen).to(DEV, torch.bfloat16)
        res = torch.randn(rows, width, generator=gen).to(DEV, torch.bfloat16)
        shapes = {  # name: (weight index in a set, fused_gemv options)
            "o_proj + residual": (0, dict(residual=res)),
            "norm + gate_up + swiglu": (4, dict(norm_weight=sets[0][1], eps=1e-6, norm_fp32=True, swiglu=True)),
            "down + residual": (6, dict(residual=res)),
        }
        for name, (i, kw) in shapes.items():
            weights = [ws[i] for ws in sets]
            n = weights[0].shape[0] // (2 if kw.get("swiglu") else 1)
            default = gemv_config(n, width, rows, torch.device(DEV), block_m)
            results = [(us(gemv_calls(x, weights, block_m, None, **kw)), default)]
            for bn in (1, 2, 4):
                for bk in (256, 512, 1024, 2048):
                    for warps in (1, 2, 4, 8):
                        if (bn, bk, warps) != default and bn * bk * block_m <= 32768:
                            results.append((us(gemv_calls(x, weights, block_m, (bn, bk, warps), **kw)),
                                            (bn, bk, warps)))  # fmt: skip
            best = sorted(results)[:5]
            tiled = ""
            if "norm_fp32" not in kw:  # the verify's row-tiled launch (tl.dot, 16-row tiles), which has no norm_fp32
                tiled = f"; row-tiled (tl.dot) {us(gemv_calls(x, weights, block_m, None, row_tiles=True, **kw)):.2f}"
            print(f"width {width} {name}: default {default} {results[0][0]:.2f} us{tiled}; best "
                  + ", ".join(f"{cfg} {t:.2f}" for t, cfg in best), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4, help="node rows per adapter step (w = budget / 16)")
    parser.add_argument("--sweep", type=int, nargs="*", default=[], metavar="WIDTH",
                        help="then sweep the launch of each finish GEMV alone at these widths")
    args = parser.parse_args()
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    finish_ab(args.rows)
    if args.sweep:
        gemv_sweep(args.rows, tuple(args.sweep))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
