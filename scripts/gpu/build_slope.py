"""Issue 19 (and the default model): what one adapter step adds to the weaver build, and what the build costs once.

Session 53 dropped the build's last adapter step (1 of 17 at budget 64) and the build did not get shorter at either
shape (scale/h100_session53_build), so the ~60 us a step that the profile's kernel sums suggest is not what a step
adds. This times `build_weaver` (budget 64, w 4, c 16, D 15, K 512, bf16; compiled and captured as the engine's build
stage, graphs of `--calls` builds) with its pop rounds forced to each of `--rounds` (the trees of fewer rounds are
smaller; timing only), then fits us = once + slope * rounds. The intercept is the once-a-build part (the pools'
top-K over 15 vocabulary rows, the adapter's prefix pass, the root's step, the tree's packing); the slope is a step.
Shapes as in `vocab_rows_ab.py`.

    python3 scripts/gpu/build_slope.py [--shapes smollm2 paper] [--calls 4] [--reps 40] [--rounds 1 4 8 12 16]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

import weaver.speculative.builders.weaver as builder_module

sys.path.insert(0, str(Path(__file__).parent))
from vocab_rows_ab import BUDGET, C, W, adapter_for, build_ab_args, inputs, side  # noqa: E402

ROUNDS = "--rounds"


def main() -> int:
    rounds = [16, 12, 8, 4, 1]
    if ROUNDS in sys.argv:  # ours, before the shared parser sees the rest
        at = sys.argv.index(ROUNDS)
        values = [a for a in sys.argv[at + 1 :] if not a.startswith("--")]
        rounds = [int(v) for v in values]
        del sys.argv[at : at + 1 + len(values)]
    args = build_ab_args(__doc__.splitlines()[0])
    natural = builder_module.weaver_search_rounds
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; weaver build, budget {BUDGET}, w {W}, c {C}, "
          f"bf16; median us per build (graphs of {args.calls}) with the pop rounds forced", flush=True)
    for shape in args.shapes:
        adapter = adapter_for(shape, "cuda")
        sets = inputs(adapter, args.calls, "cuda")
        points = []
        for r in rounds:
            builder_module.weaver_search_rounds = lambda *_, r=r: r
            us, trees = side(adapter, sets, args.reps)
            points.append((r, us))
            print(f"{shape:>8} rounds {r:>3} {us:9.1f} us  nodes {int(trees[0].valid.sum())}", flush=True)
        builder_module.weaver_search_rounds = natural
        if len(points) > 1:  # one round count: its time alone
            x = torch.tensor([p[0] for p in points], dtype=torch.float64)
            y = torch.tensor([p[1] for p in points], dtype=torch.float64)
            slope = float(((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum())
            print(f"{shape:>8} fit: once {float(y.mean()) - slope * float(x.mean()):.1f} us + {slope:.1f} us a round",
                  flush=True)
        del adapter
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
