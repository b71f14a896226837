"""H200, issue 19: the Weaver adapter step's two heaviest launches at the paper's adapter width, each against its
alternatives, in one process (session 31's 27B profile: per weaver-64 round, 48 fused GEMVs 2.73 ms and 16 pool
scorings 0.85 ms of a 3.23 ms build).

1. The block's output projection + MLP (`adapter_finish`, released SwiGLU variant, MLP = width) on 4 node rows:
   the three fused per-row GEMVs against the torch reference compiled (cuBLAS) and eager, at widths 512 / 1024 /
   2048. Four weight sets in turn (128 MB at 2048, over the 50 MB L2), as a round's steps meet them cold.
2. The pool scoring launch (`pool_top`'s first kernel) at d 2048, K 512, 4 rows, over a [248,320, 2048] bf16
   table (W_lm @ lm_head_query_in at the Qwen3.6 vocabulary): (BLOCK_K, BLOCK_D, warps) variants, and the
   packaged config with every candidate among the first 4,096 rows (does the spread of the rows cost?).

Every variant is checked against its torch reference first. Times: a CUDA graph of 16 calls (a round's steps),
median of replays, us per call.

    python3 scripts/gpu/adapter_build_ab.py | tee $OUT/adapter_build_ab.txt
"""

from __future__ import annotations

import argparse

import torch

from weaver.bench.kernels import time_graphs
from weaver.kernels.triton.adapter_finish import adapter_finish as finish_kernel
from weaver.kernels.triton.pool_top import pool_logits_config, pool_top
from weaver.ops.adapter_finish import adapter_finish as finish_ref
from weaver.ops.pool_top import pool_top as pool_top_ref

CALLS = 16


def us(fn) -> float:
    """Median us per call of fn in a graph of CALLS calls."""
    return time_graphs([fn] * CALLS, reps=40, warmup=3)[0]


def finish_weights(width: int, gen: torch.Generator, dev: str) -> tuple:
    """One released-variant block's finish weights (o_proj, norm_mlp, gate_up_proj, down_proj, biases None)."""
    def w(*shape):
        return (torch.randn(*shape, generator=gen) / shape[-1] ** 0.5).to(dev, torch.bfloat16)
    norm = (1 + 0.1 * torch.randn(width, generator=gen)).to(dev, torch.bfloat16)
    return (w(width, width), norm, None, 1e-6, w(2 * width, width), None, w(width, width), None, True)


def cycling(fn, x: torch.Tensor, attn: torch.Tensor, sets: list[tuple]):
    """fn(x, attn, *weights) with the next weight set at every call."""
    state = {"i": 0}

    def run():
        state["i"] += 1
        return fn(x, attn, *sets[state["i"] % len(sets)])
    return run


def finish_ab(rows: int) -> None:
    gen = torch.Generator().manual_seed(0)
    compiled_ref = torch.compile(finish_ref, dynamic=False)
    print(f"## adapter_finish, {rows} node rows, bf16, 4 weight sets in turn (us per call)")
    print(f"{'width':>6} {'MB/step':>8} {'fused GEMVs':>12} {'torch compiled':>15} {'torch eager':>12} "
          f"{'max |diff|':>11}")
    for width in (512, 1024, 2048):
        sets = [finish_weights(width, gen, "cuda") for _ in range(4)]
        x = torch.randn(rows, width, generator=gen).to("cuda", torch.bfloat16)
        attn = torch.randn(rows, width, generator=gen).to("cuda", torch.bfloat16)
        ref = finish_ref(x, attn, *sets[0])
        diff = (finish_kernel(x, attn, *sets[0]).float() - ref.float()).abs().max().item()
        diff = max(diff, (compiled_ref(x, attn, *sets[0]).float() - ref.float()).abs().max().item())
        mb = sum(t.numel() * 2 for t in (sets[0][0], sets[0][4], sets[0][6])) / 2**20
        times = [us(cycling(fn, x, attn, sets)) for fn in (finish_kernel, compiled_ref, finish_ref)]
        print(f"{width:6d} {mb:8.1f} {times[0]:12.1f} {times[1]:15.1f} {times[2]:12.1f} {diff:11.3g}", flush=True)


def pool_ab(rows: int, d: int, k: int, vocab: int) -> None:
    gen = torch.Generator().manual_seed(1)
    table = (torch.randn(vocab, d, generator=gen) / d**0.5).to("cuda", torch.bfloat16)
    y = torch.randn(rows, d, generator=gen).to("cuda", torch.bfloat16)
    norm_w = (1 + 0.1 * torch.randn(d, generator=gen)).to("cuda", torch.bfloat16)
    depths = 15
    spread = torch.stack([torch.randperm(vocab, generator=gen)[:k] for _ in range(depths)])[None].cuda()
    near = torch.stack([torch.randperm(4096, generator=gen)[:k] for _ in range(depths)])[None].cuda()
    prior = torch.randn(1, depths, k, generator=gen).cuda()
    pool = torch.randint(0, depths, (rows,), generator=gen).cuda()
    print(f"\n## pool scoring: {rows} rows, d {d}, K {k}, table [{vocab}, {d}] bf16 (us per call)")
    print(f"{'ids':>8} {'BLOCK_K':>7} {'BLOCK_D':>7} {'warps':>5} {'us':>8} {'GB/s':>7} {'top-c equal':>11}")
    packaged = pool_logits_config(d, k)
    variants = [("spread", packaged), ("spread", (8, 1024, 4)), ("spread", (16, 512, 4)), ("spread", (16, 1024, 8)),
                ("spread", (32, 256, 4)), ("spread", (32, 512, 8)), ("spread", (64, 256, 8)), ("near", packaged)]
    for where, config in variants:
        ids = spread if where == "spread" else near
        ref_lp, ref_tok, _ = pool_top_ref(y, norm_w, None, 1e-6, table, ids, prior, pool, 8)
        lp, tok, _ = pool_top(y, norm_w, None, 1e-6, table, ids, prior, pool, 8, config=config)
        same = bool((tok == ref_tok).all()) and torch.allclose(lp, ref_lp, atol=2e-2)
        t = us(lambda ids=ids, config=config: pool_top(y, norm_w, None, 1e-6, table, ids, prior, pool, 8,
                                                       config=config))
        gbs = rows * k * d * 2 / (t * 1e-6) / 1e9
        print(f"{where:>8} {config[0]:7d} {config[1]:7d} {config[2]:5d} {t:8.1f} {gbs:7.0f} {str(same):>11}",
              flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4, help="node rows per adapter step (w = budget / 16)")
    parser.add_argument("--vocab", type=int, default=248320)
    args = parser.parse_args()
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    finish_ab(args.rows)
    pool_ab(args.rows, 2048, 512, args.vocab)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
