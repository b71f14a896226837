"""Issue 19, the AR step's last slow GEMV: the 27B down projection (K = 17,408) reads at ~2.7 TB/s where the
one-tile shapes read at 3.0-3.2 (kernels/h100_session45_split_gemv), and it is ~4.1 of the AR step's 18.7 ms.

Hypothesis: `_gemv_kernel` walks K in a loop of BLOCK_K tiles (17,408 = 8,192 + 8,192 + 1,024 of a third, masked
tile), so a program has one tile's loads in flight at a time and pays one memory round trip per tile, while the
one-tile shapes issue all of their loads at once. Two variants keep every load of a row independent:
- `tiles`: K = NUM x BLOCK_K + TAIL exactly (TAIL a power of two or 0, no masked lanes), the NUM tiles unrolled
  (tl.static_range) so the compiler may issue all loads before the reductions;
- `splitk`: SPLIT programs a weight row, each such a span of K, fp32 partials [SPLIT, N] summed by torch (two
  launches, as cuBLAS's split-K GEMV with its reduce kernel).
Timed against cuBLAS and today's `fused_gemv` rule at M = 1, over >= 400 MB of weight copies a shape (every call
reads HBM), one CUDA graph per list. Prints us per call and TB/s, best three per variant, and the max relative error
against an fp32 matmul. An A/B script: if a variant wins, it goes into `_gemv_kernel` and this file is deleted.

    python3 scripts/gpu/gemv_tail_ab.py [--shapes mlp.down gdn.out_proj] [--reps 20]
"""

from __future__ import annotations

import argparse
import itertools

import torch
import triton
import triton.language as tl

from weaver.bench.kernels import time_graphs
from weaver.kernels.triton.decode import fused_gemv, gemv_config

H, I = 5120, 17408
SHAPES = {"mlp.down": (H, I), "gdn.out_proj": (H, 6144), "gdn.in_proj_qkvz": (16384, H), "attn.qkv": (14336, H)}


@triton.jit
def _row_dot(x_ptr, w_rows, o_n, n_ok, k0, BLOCK_N: tl.constexpr, WIDTH: tl.constexpr):
    """sum over WIDTH columns from k0 of w[o_n, :] * x: one unmasked (along K) load of each operand."""
    cols = k0 + tl.arange(0, WIDTH)
    xk = tl.load(x_ptr + cols).to(tl.float32)
    w = tl.load(w_rows + cols[None, :], mask=n_ok[:, None], other=0.0).to(tl.float32)
    return tl.sum(w * xk[None, :], axis=1)


@triton.jit
def _tiles_kernel(x_ptr, w_ptr, out_ptr, N, stride_wn, K_SPAN: tl.constexpr, SPLIT: tl.constexpr,
                  NUM: tl.constexpr, BLOCK_K: tl.constexpr, TAIL: tl.constexpr, BLOCK_N: tl.constexpr):  # fmt: skip
    """out[pid_k, o_n] (fp32 partials when SPLIT > 1, else the rounded output) = the K span pid_k of W[o_n] . x,
    the span's NUM tiles and its tail all issued without a loop-carried dependence."""
    o_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = o_n < N
    base = tl.program_id(1) * K_SPAN
    w_rows = w_ptr + o_n[:, None] * stride_wn
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for t in tl.static_range(NUM):
        acc += _row_dot(x_ptr, w_rows, o_n, n_ok, base + t * BLOCK_K, BLOCK_N, BLOCK_K)
    if TAIL > 0:
        acc += _row_dot(x_ptr, w_rows, o_n, n_ok, base + NUM * BLOCK_K, BLOCK_N, TAIL)
    out = out_ptr + tl.program_id(1) * N + o_n
    if SPLIT == 1:
        tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=n_ok)
    else:
        tl.store(out, acc, mask=n_ok)


def split_span(k: int, split: int, block_k: int) -> tuple[int, int, int] | None:
    """(span, NUM, TAIL) with k = split x span and span = NUM x block_k + TAIL, TAIL a power of two below block_k
    (or 0); None where k does not split so."""
    if k % split:
        return None
    span = k // split
    num, tail = divmod(span, block_k)
    if tail & (tail - 1) or (num == 0 and tail == 0):
        return None
    return span, num, tail


def tiles_gemv(x, w, out, partial, split: int, block_k: int, block_n: int, warps: int) -> None:
    span, num, tail = split_span(w.shape[1], split, block_k)
    n = w.shape[0]
    grid = (triton.cdiv(n, block_n), split)
    _tiles_kernel[grid](x, w, out if split == 1 else partial, n, w.stride(0), K_SPAN=span, SPLIT=split, NUM=num,
                        BLOCK_K=block_k, TAIL=tail, BLOCK_N=block_n, num_warps=warps)  # fmt: skip
    if split > 1:
        torch.sum(partial[:split], dim=0, out=partial[split])
        out.copy_(partial[split])


def sweep_shape(name: str, n: int, k: int, reps: int, dev: torch.device) -> None:
    """cuBLAS, today's fused_gemv and every valid variant configuration at one [n, k] weight shape."""
    copies = max(4, (400 << 20) // (2 * n * k) + 1)
    gen = torch.Generator(device=dev).manual_seed(0)
    ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16, generator=gen) * 0.02 for _ in range(copies)]
    x = torch.randn(1, k, device=dev, dtype=torch.bfloat16, generator=gen)
    outs = [torch.empty(1, n, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
    partial = torch.empty(9, n, device=dev, dtype=torch.float32)
    ref = x.float() @ ws[0].float().t()
    gb = 2 * n * k / 1e9

    def timed(fn) -> float:
        return time_graphs([lambda: [fn(w, o) for w, o in zip(ws, outs, strict=True)]], reps, warmup=2)[0] / copies

    def err() -> float:
        return ((outs[0].float() - ref).abs().max() / ref.abs().max()).item()

    cublas = timed(lambda w, o: torch.matmul(x, w.t(), out=o))
    rule = (1, 8192, 8) if k > 8192 else gemv_config(n, k, 1, dev)  # down: session 45's best
    today = timed(lambda w, o: fused_gemv(x, w, out=o, config=rule))
    print(f"{name} [{n} x {k}] copies {copies}: cuBLAS {cublas:.1f} us ({gb / cublas * 1e3:.2f} TB/s); "
          f"fused_gemv {rule} {today:.1f} ({gb / today * 1e3:.2f}), err {err():.1e}", flush=True)  # fmt: skip
    for split in (1, 2, 4):
        results = []
        for block_k, block_n, warps in itertools.product((1024, 2048, 4096, 8192, 16384), (1, 2), (4, 8, 16)):
            if split_span(k, split, block_k) is None or block_n * block_k // (32 * warps) > 128:
                continue
            us = timed(lambda w, o: tiles_gemv(x, w, o, partial, split, block_k, block_n, warps))  # noqa: B023
            results.append((us, block_k, block_n, warps, err()))
        results.sort()
        best = "; ".join(f"{us:.1f} ({gb / us * 1e3:.2f}) K{bk} N{bn} w{wp} err {e:.1e}"
                         for us, bk, bn, wp, e in results[:3])  # fmt: skip
        if results:
            print(f"  split {split}: {best} | best/cuBLAS {results[0][0] / cublas:.3f}, "
                  f"best/fused_gemv {results[0][0] / today:.3f}", flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES))
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    dev = torch.device("cuda")
    print(torch.cuda.get_device_name(dev), torch.__version__, triton.__version__, flush=True)
    for name in args.shapes:
        sweep_shape(name, *SHAPES[name], args.reps, dev)


if __name__ == "__main__":
    main()
