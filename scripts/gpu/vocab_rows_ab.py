"""Issue 19 (and the default model): the weaver build with the RoPE adapter's node rows read from the vocabulary's
tables (session 37: q / k rotated in the pop kernel) against the per-round candidate table it replaced (a gather of
1 + D*K rows and a rotation pass, then the pop reading table rows), in one process.

The table side is rebuilt here exactly as `WeaverAdapter.begin_round` built it before session 37 (the kernel still
reads table rows for the older adapter variant, so only the round's setup differs). Both sides: `build_weaver`
(budget 64, w 4, c 16) torch.compile'd as the engine's build stage (dynamic=False) and captured in CUDA graphs of
`--calls` builds over as many input sets, median device us per build (`weaver.bench.kernels.time_graphs`). Each
side's trees are checked against the other's first (bf16: the rotation rounds once in the kernel, per op in torch,
so a near-tie may flip; the count of differing trees is printed).

Shapes: `smollm2` (d_rank 512, 8 heads, MLP 1024, vocab 49,152, target width 576: the shipped adapter's) and
`paper` (d_rank 2048, 16 heads, MLP 2048, vocab 248,320, target width 5,120: `weaver bench scale`'s 27B round).

    python3 scripts/gpu/vocab_rows_ab.py [--shapes smollm2 paper] [--calls 4] [--reps 40] | tee $OUT/vocab_rows_ab.txt
"""

from __future__ import annotations

import argparse

import torch

from weaver.bench.kernels import time_graphs
from weaver.models.config import ModelConfig
from weaver.options import RuntimeOptions
from weaver.speculative.builders.weaver import build_weaver
from weaver.speculative.weaver import RELEASED, WeaverAdapter

SHAPES = {  # name: (vocab, target width, d_rank, heads, mlp)
    "smollm2": (49152, 576, 512, 8, 1024),
    "paper": (248320, 5120, 2048, 16, 2048),
}
DEPTH, BUDGET, W, C = 15, 64, 4, 16


def adapter_for(shape: str, dev: str) -> WeaverAdapter:
    """A random released-variant adapter at `shape`, bound (vocabulary tables filled) in bf16 on `dev`."""
    vocab, ht, d, heads, mlp = SHAPES[shape]
    target = ModelConfig(vocab_size=vocab, hidden_size=ht, intermediate_size=4 * ht, num_hidden_layers=1)
    ad = WeaverAdapter.random(target, d_rank=d, num_heads=heads, mlp_dim=mlp, max_depth=DEPTH, pool_size=512,
                              **RELEASED)  # fmt: skip
    ad = ad.to(dev, torch.bfloat16).eval().requires_grad_(False)
    gen = torch.Generator(device=dev).manual_seed(0)
    embed = torch.randn(vocab, ht, device=dev, dtype=torch.bfloat16, generator=gen)
    head = torch.randn(vocab, ht, device=dev, dtype=torch.bfloat16, generator=gen) * 0.05
    ad.bind(embed, head, options=RuntimeOptions())
    assert ad.vocab_qkv is not None, "no vocabulary tables: the A/B needs them"
    return ad


def with_table(adapter: WeaverAdapter) -> None:
    """The adapter's rounds build the pre-session-37 candidate table (an instance attribute over the method)."""
    plain = WeaverAdapter.begin_round

    def begin_round(*args, root=None, **kwargs):
        state = plain(adapter, *args, root=root, **kwargs)
        k = state.pool_ids.shape[2]
        rows = 1 + state.depth * k
        tokens = torch.cat([root.long()[:, None], state.pool_ids.flatten(1).clamp(min=0)], dim=1)
        depth = torch.arange(rows, device=tokens.device).sub(1).div(k, rounding_mode="floor").add(1).clamp(min=0)
        rope = adapter._rope(adapter.node_positions(depth, state.depth)[None])
        state.cand_x = adapter.vocab_x[tokens]
        state.cand_qkv = adapter.blocks[0].rotate_rows(adapter.vocab_qkv[tokens], rope)
        state.cand_rope = None
        return state

    adapter.begin_round = begin_round


def inputs(adapter: WeaverAdapter, sets: int, dev: str) -> list[tuple]:
    """`sets` rounds' (root, marginals, target_hidden, draft_hidden), random."""
    vocab, ht = adapter._embed.shape
    gen = torch.Generator(device=dev).manual_seed(1)
    out = []
    for _ in range(sets):
        root = torch.randint(0, vocab, (1,), device=dev, generator=gen)
        logits = torch.randn(1, DEPTH, vocab, device=dev, generator=gen) * 3
        th = torch.randn(1, ht, device=dev, dtype=torch.bfloat16, generator=gen)
        dh = torch.randn(1, DEPTH, ht, device=dev, dtype=torch.bfloat16, generator=gen)
        out.append((root, logits, th, dh))
    return out


def side(adapter: WeaverAdapter, sets: list[tuple], reps: int) -> tuple[float, list]:
    """Median us per compiled build over the input sets, and each set's tree (eager)."""
    def build(root, logits, th, dh):
        return build_weaver(root, logits, BUDGET, adapter=adapter, target_hidden=th, draft_hidden=dh, w=W, c=C)

    trees = [build(*s) for s in sets]
    compiled = torch.compile(build, dynamic=False)
    runs = [lambda s=s: compiled(*s) for s in sets]
    us, _ = time_graphs(runs, reps=reps, warmup=3)
    torch._dynamo.reset()
    return us, trees


def build_ab_args(description: str) -> argparse.Namespace:
    """The build A/B scripts' shared command line (shapes, input sets, repetitions)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--calls", type=int, default=4, help="input sets (builds per graph)")
    ap.add_argument("--reps", type=int, default=40)
    return ap.parse_args()


def main() -> int:
    args = build_ab_args(__doc__.splitlines()[0])
    dev = "cuda"
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; weaver build, budget {BUDGET}, w {W}, c {C}, "
          f"D {DEPTH}, K 512, bf16; median us per build (graphs of {args.calls})")
    print(f"{'shape':>8} {'vocab rows (new)':>17} {'round table (old)':>18} {'old / new':>10} {'trees differing':>16}")
    for shape in args.shapes:
        adapter = adapter_for(shape, dev)
        sets = inputs(adapter, args.calls, dev)
        new_us, new_trees = side(adapter, sets, args.reps)
        with_table(adapter)
        old_us, old_trees = side(adapter, sets, args.reps)
        differ = sum(not (torch.equal(a.tokens, b.tokens) and torch.equal(a.parents, b.parents))
                     for a, b in zip(new_trees, old_trees, strict=True))  # fmt: skip
        print(f"{shape:>8} {new_us:>17.1f} {old_us:>18.1f} {old_us / new_us:>10.3f} {differ:>11} of {len(sets)}")
        del adapter
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
