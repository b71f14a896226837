"""Issue 19 (and the default model): session 53's two changes to the weaver build's kernel loop, each against the loop
before it, in one process.

  before:  every pop round runs an adapter step (the last round's children are never popped: dead work), and a
           step ends in three launches (the tail's two, `pool_top` with its push, and the next `frontier_pop_inputs`);
  no-dead: the last round pops alone (one adapter step of 17 fewer at budget 64, w 4);
  fused:   no-dead, and the tail, its push and the next pop in one launch (`weaver.kernels.triton.pool_push_pop`):
           two launches a step fewer. This is the shipped loop (`grow_kernels`).

`build_weaver` (budget 64, w 4, c 16, D 15, K 512, bf16) torch.compile'd as the engine's build stage and captured in
CUDA graphs of `--calls` builds over as many input sets, median device us per build (`weaver.bench.kernels.
time_graphs`, PDL as the engine launches). Every variant's trees are checked against the shipped loop's first
(eager). Shapes as in `vocab_rows_ab.py`: `smollm2` (the shipped adapter's) and `paper` (the 27B round's).

    python3 scripts/gpu/build_fusion_ab.py [--quick] [--shapes smollm2 paper] [--calls 4] [--reps 40]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

import weaver.speculative.builders.weaver as builder_module
from weaver.kernels.weaver_frontier import frontier_pop_inputs
from weaver.speculative.builders.frontier import grow_kernels

sys.path.insert(0, str(Path(__file__).parent))
from vocab_rows_ab import BUDGET, C, W, adapter_for, build_ab_args, inputs, side  # noqa: E402


def unfused_loop(dead_step: bool):
    """The kernel loop with a pop launch every round (three launches a step); with `dead_step` the last round's
    adapter step too (the loop before session 53)."""

    def grow(adapter, state, frontier, rounds, c, options) -> None:
        for i in range(rounds):
            step, node, grow_, score, *node_in = frontier_pop_inputs(
                *frontier.push_args(), *frontier.pop_args()[3:], state.visible, state.prefix_mask, state.cand_x,
                state.cand_qkv, state.k, state.v, 0, state.prefix_len, options, state.cand_rope,
            )  # fmt: skip
            if i == rounds - 1 and not dead_step:
                break
            adapter.step_top_prepared(state, step, c, node_in, push=(*frontier.push_args(), node, grow_, score))

    return grow


VARIANTS = {"before": unfused_loop(True), "no-dead": unfused_loop(False), "fused": grow_kernels}
ORDER = ("fused", "before", "no-dead", "fused")
QUICK = "--quick"  # fused and before alone (a call short of device time)


def main() -> int:
    quick = QUICK in sys.argv
    if quick:
        sys.argv.remove(QUICK)
    args = build_ab_args(__doc__.splitlines()[0])
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; weaver build, budget {BUDGET}, w {W}, c {C}, "
          f"bf16; median us per build (graphs of {args.calls}); trees differing from fused's", flush=True)
    for shape in args.shapes:
        adapter = adapter_for(shape, "cuda")
        sets = inputs(adapter, args.calls, "cuda")
        results = {}
        for name in ORDER[: 2 if quick else None]:  # the shipped loop first and last: drift
            builder_module.grow_kernels = VARIANTS[name]
            us, trees = side(adapter, sets, args.reps)
            results.setdefault(name, []).append(us)
            ref = results.setdefault("trees", trees)
            differ = sum(not (torch.equal(a.tokens, b.tokens) and torch.equal(a.parents, b.parents))
                         for a, b in zip(ref, trees, strict=True))  # fmt: skip
            print(f"{shape:>8} {name:>8} {us:9.1f} us  trees differing {differ} of {len(sets)}", flush=True)
        builder_module.grow_kernels = grow_kernels
        base = results["before"][0]
        no_dead = f"before / no-dead {base / results['no-dead'][0]:.3f}, " if "no-dead" in results else ""
        print(f"{shape:>8} {no_dead}before / fused {base / min(results['fused']):.3f}", flush=True)
        del adapter
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
