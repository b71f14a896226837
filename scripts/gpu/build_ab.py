"""H200, issue 17: the ddtree build's two parts, each against what it replaces, median device us per call (CUDA graphs
of 10 back-to-back calls, `weaver.bench.kernels.time_graphs`), bf16 drafter logits of SmolLM2's vocabulary:

  top:    torch.topk + logsumexp (the builder before session 28) against the two-stage `vocab_topk` kernel at
          each stage-2 warp count (the shipped rule marked *), rows D = 15 / 16 depths, k = budget;
  select: the one-launch ddtree selection + tree (`ddtree_tree`) at 1 / 2 / 4 / 8 warps (shipped rule *).

    python3 scripts/gpu/build_ab.py --out $OUT/build_ab.json
"""

from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path

import torch

import weaver.kernels.triton.ddtree_select as select_mod
import weaver.kernels.triton.vocab_topk as topk_mod
from weaver.bench.kernels import time_graphs
from weaver.speculative.builders import trie_size

CALLS = 10


def _fixed(value, *args):
    """A config function's stand-in: `value` whatever the shape."""
    return value


def timed(fn, reps: int) -> float:
    return time_graphs([fn] * CALLS, reps=reps, warmup=3, calls_per_graph=CALLS)[0]


def top_rows(vocab: int, depth: int, budgets: list[int], reps: int) -> list[dict]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = (3 * torch.randn(depth, vocab, generator=gen, device="cuda")).bfloat16()
    shipped = topk_mod.vocab_topk_config
    rows = []
    for k in budgets:
        def torch_top(k: int = k) -> None:
            top, _ = torch.topk(x, k, dim=-1)
            _ = top.float() - torch.logsumexp(x.float(), dim=-1, keepdim=True)

        row = {"part": "top", "rows": depth, "k": k, "torch_us": timed(torch_top, reps)}
        chunk, C, w1, w2 = shipped(vocab, k)
        for warps in (1, 2, 4):
            topk_mod.vocab_topk_config = functools.partial(_fixed, (chunk, C, w1, warps))
            try:
                row[f"kernel_w{warps}{'*' if warps == w2 else ''}_us"] = timed(
                    functools.partial(topk_mod.vocab_topk, x, k), reps)  # fmt: skip
            finally:
                topk_mod.vocab_topk_config = shipped
        rows.append(row)
        print(row, flush=True)
    return rows


def select_rows(depth: int, budgets: list[int], reps: int) -> list[dict]:
    shipped = select_mod.ddtree_select_warps
    rows = []
    for budget in budgets:
        k = budget
        nodes = trie_size(budget, depth, k)
        lq = torch.randn(1, depth, k, device="cuda", dtype=torch.float64).sort(dim=-1, descending=True).values - 3
        ids = torch.randint(0, 49152, (1, depth, k), device="cuda")
        root = torch.zeros(1, dtype=torch.int64, device="cuda")
        m = sum(select_mod.level_sizes(depth, k, nodes))
        row = {"part": "select", "budget": budget, "nodes": nodes, "entries": m, "shipped_warps": shipped(m)}
        for warps in (1, 2, 4, 8):
            select_mod.ddtree_select_warps = functools.partial(_fixed, warps)
            try:
                row[f"w{warps}_us"] = timed(functools.partial(select_mod.ddtree_tree, lq, ids, root, nodes), reps)
            finally:
                select_mod.ddtree_select_warps = shipped
        rows.append(row)
        print(row, flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--budgets", type=int, nargs="+", default=[15, 16, 32, 64])
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    rows = []
    for depth in (15, 16):
        rows += top_rows(args.vocab, depth, args.budgets, args.reps)
    rows += select_rows(15, args.budgets + [128], args.reps)
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
