"""Issue 19: can a Triton GEMM at a verify's or a draft's few rows (16, 17, 65) read the 27B weights faster than
cuBLAS, as the one-row GEMV did (H100: 3.1 against 2.75 TB/s)?

Session 50's sweep of weaver's row-tiled kernel (`gemv_wide_ab.py --rows 17`) lost 1.20-1.41x to cuBLAS. That
kernel puts the input rows in the MMA's M dimension (32 rows, so no wgmma) and reads the weight as a transposed
[BLOCK_K, BLOCK_N] operand. cuBLAS's choice at these shapes (`nvjet_sm90_tst_384x16_...`) is the other way round:
weight rows are the M dimension (384-row tiles), the input rows the N (16). This kernel does the same: the
program's BLOCK_N weight rows are the left operand ([BLOCK_N, BLOCK_K], contiguous along K, tiles of >= 64 rows so
Hopper's wgmma applies), the input rows the right ([BLOCK_K, BLOCK_M], BLOCK_M >= M, so each weight tile is read
once for all rows), optionally split along K (SPLIT programs per column block, fp32 partials summed by one torch
reduction) for the N = 5,120 shapes whose column blocks alone do not fill the GPU.

An experiment, not a weaver kernel: if a shape wins here, the kernel moves to weaver.kernels with its reference and
tests, and `weaver.kernels.gemv.linear` takes it for those rows. Prints per shape and row count cuBLAS, cuBLASLt and
the best three configs (us per call, TB/s), and checks the best one against an fp32 product.

    python3 scripts/gpu/skinny_gemm_ab.py [--rows 16 17 65] [--shapes mlp.gate_up mlp.down] [--reps 20]
    TRITON_INTERPRET=1 python3 scripts/gpu/skinny_gemm_ab.py --check     # CPU: the kernel against torch, tiny shapes
"""

from __future__ import annotations

import argparse
import itertools
import os
from functools import partial

import torch
import triton
import triton.language as tl

H, I, V = 5120, 17408, 248320
SHAPES = {  # name: (out, in): the 27B verify's projections and the drafter's largest (gemv_wide_ab.py's list and more)
    "gdn.in_proj_qkvz": (2 * 2048 + 2 * 6144, H),
    "gdn.out_proj": (H, 6144),
    "attn.qkv (gated q)": (24 * 256 * 2 + 2 * 4 * 256, H),
    "mlp.gate_up": (2 * I, H),
    "mlp.down": (H, I),
    "drafter.fc": (H, 5 * H),
    "lm_head": (V, H),
}
SMEM = 220 * 1024  # operand tiles of every pipeline stage within an H100 / H200 SM's 227 KB


@triton.jit
def _skinny_gemm_kernel(
    x_ptr, w_ptr, out_ptr, M, N, K, K_SPLIT, stride_xm, stride_wn, stride_os, stride_om,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EXACT: tl.constexpr,
):  # fmt: skip
    """out[i_s, :M, n-block] = x[:, K slice i_s] @ W[n-block, K slice i_s]^T, computed as W_tile @ x_tile^T."""
    i_n = tl.program_id(0)
    i_s = tl.program_id(1)
    o_n = i_n * BLOCK_N + tl.arange(0, BLOCK_N)
    o_m = tl.arange(0, BLOCK_M)
    o_k0 = tl.arange(0, BLOCK_K)
    mask_n = o_n < N
    mask_m = o_m < M
    acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    k_lo = i_s * K_SPLIT
    for k0 in range(k_lo, tl.minimum(k_lo + K_SPLIT, K), BLOCK_K):
        o_k = k0 + o_k0
        mask_k = o_k < K
        w = tl.load(w_ptr + o_n[:, None] * stride_wn + o_k[None, :], mask=mask_n[:, None] & mask_k[None, :], other=0.0)
        xt = tl.load(x_ptr + o_m[None, :] * stride_xm + o_k[:, None], mask=mask_k[:, None] & mask_m[None, :], other=0.0)
        if EXACT:  # fp32 operands, or the interpreter (which would multiply bf16 bit patterns): exact fp32 products
            acc += tl.dot(w.to(tl.float32), xt.to(tl.float32), input_precision="ieee")
        else:
            acc += tl.dot(w, xt)
    p_out = out_ptr + i_s * stride_os + o_m[None, :] * stride_om + o_n[:, None]
    tl.store(p_out, acc.to(out_ptr.dtype.element_ty), mask=mask_n[:, None] & mask_m[None, :])


def skinny_gemm(
    x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, block_n: int, block_k: int, warps: int, stages: int,
    split: int, partials: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """out [M, N] = x [M, K] @ w [N, K]^T; with split > 1 through `partials` [split, M, N] fp32, then one sum."""
    m, k = x.shape
    n = w.shape[0]
    block_m = max(16, triton.next_power_of_2(m))
    k_split = triton.cdiv(triton.cdiv(k, split), block_k) * block_k
    split = triton.cdiv(k, k_split)
    target = out if split == 1 else partials[:split]
    exact = x.dtype == torch.float32 or os.environ.get("TRITON_INTERPRET") == "1"
    _skinny_gemm_kernel[(triton.cdiv(n, block_n), split)](
        x, w, target, m, n, k, k_split, x.stride(0), w.stride(0), target.stride(0) if split > 1 else 0,
        target.stride(-2), BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, EXACT=exact,
        num_warps=warps, num_stages=stages,
    )  # fmt: skip
    if split > 1:
        out.copy_(target.sum(0))
    return out


def configs(n: int, k: int, rows: int):
    """(BLOCK_N, BLOCK_K, warps, stages, split): wgmma-sized weight tiles (4 warps up to 128 rows, 8 for 256),
    pipelines within the SM's shared memory, K splits only where the column blocks alone leave SMs idle."""
    block_m = max(16, triton.next_power_of_2(rows))
    for bn, bk, stages, split in itertools.product((64, 128, 256), (64, 128, 256), (3, 4), (1, 2, 4, 8)):
        if stages * (bn + block_m) * bk * 2 > SMEM or bn * block_m > 256 * 64 or (bk == 256 and bn > 64):
            continue
        blocks = triton.cdiv(n, bn)
        if split > 1 and (blocks >= 264 or split * blocks > 700 or k // split < 4 * bk):
            continue
        yield bn, bk, 8 if bn == 256 else 4, stages, split


def us_per_call(fn, calls: int, reps: int) -> float:
    from weaver.bench.kernels import time_graphs

    return time_graphs([fn], reps, warmup=2)[0] / calls


def run(gemm, calls) -> None:
    for x, w, out in calls:
        gemm(x, w, out)


def cublas(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
    torch.matmul(x, w.t(), out=out)


def with_blas(library: str, fn):
    """fn() with `library` as torch's preferred BLAS, then the previous choice again."""
    previous = torch.backends.cuda.preferred_blas_library()
    torch.backends.cuda.preferred_blas_library(library)
    try:
        return fn()
    finally:
        torch.backends.cuda.preferred_blas_library(previous)


def sweep(name: str, rows: int, reps: int, gen: torch.Generator) -> None:
    n, k = SHAPES[name]
    dev = torch.device("cuda")
    copies = max(1, -(-400 * 2**20 // (n * k * 2)))  # >= 400 MB of weights: every call reads HBM, not L2
    ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16, generator=gen) * 0.02 for _ in range(copies)]
    x = torch.randn(rows, k, device=dev, dtype=torch.bfloat16, generator=gen)
    calls = [(x, w, torch.empty(rows, n, device=dev, dtype=torch.bfloat16)) for w in ws]
    partials = torch.empty(8, rows, n, device=dev, dtype=torch.float32)
    mb = n * k * 2 / 1e6
    base = us_per_call(partial(run, cublas, calls), copies, reps)
    lt = with_blas("cublaslt", lambda: us_per_call(partial(run, cublas, calls), copies, reps))
    results = []
    for cfg in configs(n, k, rows):
        gemm = partial(skinny_gemm, block_n=cfg[0], block_k=cfg[1], warps=cfg[2], stages=cfg[3], split=cfg[4],
                       partials=partials)  # fmt: skip
        try:
            results.append((us_per_call(partial(run, gemm, calls), copies, reps), cfg))
        except Exception as exc:  # noqa: BLE001 - a config the compiler refuses is skipped, with why
            print(f"  {name} {cfg}: {type(exc).__name__}: {str(exc)[:80]}", flush=True)
    results.sort()
    t, best = results[0]
    got = skinny_gemm(x, ws[0], torch.empty_like(calls[0][2]), *best, partials=partials).float()
    ref = x.float() @ ws[0].float().t()
    err = ((got - ref).abs().max() / ref.abs().max()).item()
    tops = "; ".join(f"{u:.1f} ({mb / u:.2f}) {c}" for u, c in results[:3])
    print(f"{name:20s} rows {rows:3d} [{n:6d} x {k:5d}] | cuBLAS {base:7.1f} ({mb / base:.2f}) | cuBLASLt {lt:7.1f} | "
          f"{tops} | best/cuBLAS {t / base:.3f}, rel err {err:.1e}", flush=True)


def check() -> None:
    """The kernel against torch on tiny fp32 shapes, every split and a ragged M, N and K (CPU interpreter or GPU)."""
    dev = torch.device("cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu")
    gen = torch.Generator(device=dev).manual_seed(0)
    worst = 0.0
    for m, n, k, split in itertools.product((1, 5, 17), (64, 100), (64, 200), (1, 2, 3)):
        x = torch.randn(m, k, device=dev, generator=gen)
        w = torch.randn(n, k, device=dev, generator=gen)
        out = torch.empty(m, n, device=dev)
        partials = torch.empty(8, m, n, device=dev)
        got = skinny_gemm(x, w, out, 64, 32 if k < 128 else 64, 4, 2, split, partials)
        err = ((got - x @ w.t()).abs().max() / (x @ w.t()).abs().max()).item()
        worst = max(worst, err)
        assert err < 1e-5, (m, n, k, split, err)
    print(f"skinny_gemm matches torch on {3 * 2 * 2 * 3} tiny fp32 cases (worst relative error {worst:.1e})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", default=["mlp.gate_up", "mlp.down", "gdn.in_proj_qkvz", "gdn.out_proj"])
    p.add_argument("--rows", nargs="+", type=int, default=[17])
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--check", action="store_true", help="only the correctness check on tiny shapes")
    args = p.parse_args()
    if args.check:
        return check()
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for rows in args.rows:
        for name in args.shapes:
            sweep(name, rows, args.reps, gen)


if __name__ == "__main__":
    main()
