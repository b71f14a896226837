"""H200: launch configurations of the fused decode kernels at SmolLM2 shapes (CUDA-graph timed medians).

    python3 scripts/gpu/decode_sweep.py > $OUT/decode_sweep.txt
Prints, per GEMV shape, the default `gemv_config` time and the best few configurations, then the
attention kernel per BLOCK_S. Used to tune `weaver.kernels.triton.decode.gemv_config`.
"""

from __future__ import annotations

import functools
import itertools

import torch
from triton.testing import do_bench_cudagraph

from weaver.kernels.triton.decode import decode_attention, fused_gemv, gemv_config

HIDDEN, INTER, VOCAB, H, HKV, D = 576, 1536, 49152, 9, 3, 64
SHAPES = {  # name: (N rows of W, K, kwargs)
    "qkv+norm": ((H + 2 * HKV) * D, HIDDEN, dict(norm=True)),
    "o+res": (HIDDEN, H * D, dict(residual=True)),
    "gate_up+norm+swiglu": (2 * INTER, HIDDEN, dict(norm=True, swiglu=True)),
    "down+res": (HIDDEN, INTER, dict(residual=True)),
    "lm_head+norm": (VOCAB, HIDDEN, dict(norm=True, fp32=True)),
}


def time_us(fn) -> float:
    return do_bench_cudagraph(fn, rep=30, return_mode="median") * 1e3


def main() -> None:
    dev = torch.device("cuda")
    bf = torch.bfloat16
    for name, (n, k, kw) in SHAPES.items():
        x = torch.randn(1, k, device=dev, dtype=bf)
        w = torch.randn(n, k, device=dev, dtype=bf) / k**0.5
        nw = torch.ones(k, device=dev, dtype=bf) if kw.get("norm") else None
        n_out = n // 2 if kw.get("swiglu") else n
        res = torch.randn(1, n_out, device=dev, dtype=bf) if kw.get("residual") else None
        out_dtype = torch.float32 if kw.get("fp32") else None

        args = dict(norm_weight=nw, residual=res, swiglu=bool(kw.get("swiglu")), out_dtype=out_dtype)

        def run(cfg, x=x, w=w, args=args):
            return functools.partial(fused_gemv, x, w, **args, config=cfg)

        default = gemv_config(n_out, k, 1, dev)
        results = []
        for bn, bk, warps in itertools.product([2, 4, 8, 16, 32, 64], [64, 128, 256, 512], [1, 2, 4, 8]):
            if bn * bk > 16384:
                continue
            results.append((time_us(run((bn, bk, warps))), (bn, bk, warps)))
        results.sort()
        bytes_moved = n * k * 2
        print(f"{name:22s} N={n:6d} K={k:5d}: default {default} {time_us(run(default)):6.2f} us | best "
              + ", ".join(f"{cfg} {t:.2f}" for t, cfg in results[:4])
              + f" | weights {bytes_moved / 1e6:.2f} MB", flush=True)
    for length in (32, 300, 1000):
        qkv = torch.randn(1, (H + 2 * HKV) * D, device=dev, dtype=bf)
        ck = torch.randn(1, HKV, 2048, D, device=dev, dtype=bf)
        cv = torch.randn_like(ck)
        lengths = torch.tensor([length], device=dev)
        inv = 1.0 / (10000 ** (torch.arange(0, D, 2, device=dev).float() / D))
        times = {bs: time_us(functools.partial(decode_attention, qkv, ck, cv, lengths, inv, H, HKV, block_s=bs))
                 for bs in (16, 32, 64, 128)}
        print(f"attention length {length:5d}: " + ", ".join(f"BLOCK_S={b} {t:.2f} us" for b, t in times.items()),
              flush=True)


if __name__ == "__main__":
    main()
