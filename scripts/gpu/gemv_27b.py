"""Issue 19, where the AR step's time goes: every projection GEMV of one Qwen3.6-27B-shaped text forward
(64 layers + LM head, 51 GB of bf16 weights) in one CUDA graph, cuBLAS (torch.matmul) against weaver's Triton
`fused_gemv`, at M = 1, 17 and 65 rows; then per weight shape the best of a few GEMV tilings at M = 1.

Each weight shape has its own tensor per layer (48 GDN + 16 attention), so repeated launches read HBM, not L2.
Prints ms per forward and TB/s (weight bytes / time); the floor is the bytes over the measured copy bandwidth.

    python3 scripts/gpu/gemv_27b.py [--rows 1 17 65] [--reps 20]
"""

from __future__ import annotations

import argparse
from functools import partial

import torch

from weaver.bench.kernels import copy_bandwidth, time_graphs
from weaver.kernels.triton.decode import fused_gemv

H, I, V = 5120, 17408, 248320
SHAPES = {  # name: (out, in, layers holding one)
    "gdn.in_proj_qkvz": (2 * 2048 + 2 * 6144, H, 48),  # the model fuses qkvz and ba into one GEMV
    "gdn.in_proj_ba": (96, H, 48),
    "gdn.out_proj": (H, 6144, 48),
    "attn.qkv (gated q)": (24 * 256 * 2 + 2 * 4 * 256, H, 16),
    "attn.o_proj": (H, 24 * 256, 16),
    "mlp.gate_up": (2 * I, H, 64),
    "mlp.down": (H, I, 64),
    "lm_head": (V, H, 1),
}
TILINGS = [(2, 512, 1), (4, 256, 1), (8, 128, 1), (16, 64, 1), (8, 512, 4), (16, 256, 4), (32, 128, 4), (16, 512, 8),
           (32, 256, 8), (64, 128, 8)]


def timed_graph(fn, reps: int) -> float:
    """Median ms of one replay of fn captured in a CUDA graph (`bench.kernels.time_graphs`)."""
    return time_graphs([fn], reps, warmup=2)[0] / 1e3


def run(gemv, calls) -> None:
    """Every (x, weight, out) of the list through one GEMV implementation."""
    for x, w, out in calls:
        gemv(x, w, out)


def cublas_gemv(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
    torch.matmul(x, w.t(), out=out)


def fused_gemv_into(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, config=None) -> None:
    fused_gemv(x, w, out=out, config=config)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", nargs="+", type=int, default=[1, 17, 65])
    p.add_argument("--reps", type=int, default=20)
    args = p.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    weights = {name: [torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(count)]
               for name, (n, k, count) in SHAPES.items()}
    total = sum(w.numel() * w.element_size() for ws in weights.values() for w in ws)
    bw = copy_bandwidth() / 1e12  # TB/s, bytes read + written
    print(f"weights {total / 1e9:.2f} GB; copy bandwidth {bw:.2f} TB/s; floor {total / bw / 1e9:.2f} ms")
    for m in args.rows:
        xs = {k: torch.randn(m, k, device=dev, dtype=torch.bfloat16) for k in {s[1] for s in SHAPES.values()}}
        calls = [(xs[w.shape[1]], w, torch.empty(m, w.shape[0], device=dev, dtype=torch.bfloat16))
                 for ws in weights.values() for w in ws]
        cublas = timed_graph(partial(run, cublas_gemv, calls), args.reps)
        triton_ms = timed_graph(partial(run, fused_gemv_into, calls), args.reps)
        print(f"M={m:3d}: cuBLAS {cublas:.2f} ms ({total / cublas / 1e9:.2f} TB/s), fused_gemv {triton_ms:.2f} ms "
              f"({total / triton_ms / 1e9:.2f} TB/s)")
    print("per shape at M=1 (ms for all its layers; TB/s): cuBLAS | fused_gemv default | best tiling")
    x1 = {k: torch.randn(1, k, device=dev, dtype=torch.bfloat16) for k in {s[1] for s in SHAPES.values()}}
    best_sum = 0.0
    for name, ws in weights.items():
        n, k = ws[0].shape
        calls = [(x1[k], w, torch.empty(1, n, device=dev, dtype=torch.bfloat16)) for w in ws]
        nbytes = sum(w.numel() * 2 for w in ws)
        cub = timed_graph(partial(run, cublas_gemv, calls), args.reps)
        dflt = timed_graph(partial(run, fused_gemv_into, calls), args.reps)
        best = (dflt, None)
        for cfg in TILINGS:
            try:
                t = timed_graph(partial(run, partial(fused_gemv_into, config=cfg), calls), args.reps)
            except Exception as exc:  # noqa: BLE001 - a tiling the compiler refuses is skipped, with why
                print(f"  {name} {cfg}: {type(exc).__name__}")
                continue
            best = min(best, (t, cfg), key=lambda b: b[0])
        best_sum += min(best[0], cub)
        print(f"  {name:20s} [{n:6d} x {k:5d}] x{len(ws):2d}: {cub:6.3f} ({nbytes / cub / 1e9:.2f}) | "
              f"{dflt:6.3f} ({nbytes / dflt / 1e9:.2f}) | {best[0]:6.3f} ({nbytes / best[0] / 1e9:.2f}) {best[1]}")
    print(f"sum of the best per shape (cuBLAS or a tiling): {best_sum:.2f} ms ({total / best_sum / 1e9:.2f} TB/s)")


if __name__ == "__main__":
    main()
