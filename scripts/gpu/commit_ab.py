"""H200, issue 19: the GDN commit of all layers in two launches (stacked states and verify scratch: the default)
against the per-layer commit (two kernels and two copies a GDN layer, as before), one process, at the Qwen3.6-27B
text shape with random bf16 weights: a chain-16 round captured one graph per stage (its stages' device times,
medians over the rounds), with the engine's caches built without their stacked GDN buffers for the per-layer side
(the layers then keep their own commit inputs and fold them one by one: `Decoder.commit`'s fallback). Also shows
whether writing the tree factors into the stacked scratch made the compiled verify slower.

    python3 scripts/gpu/commit_ab.py --out $OUT/commit_ab.json
    python3 scripts/gpu/commit_ab.py --model tiny-qwen3_5 --device cpu --new-tokens 8     # CPU smoke run
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import weaver
from weaver.bench import rounds
from weaver.models import decoder


def per_layer_caches(enabled: bool) -> None:
    """Make new caches without (True) or with (False) their stacked GDN buffers."""
    original = getattr(decoder.Decoder, "_stacked_allocate", None) or decoder.Decoder.allocate_cache
    decoder.Decoder._stacked_allocate = original

    def allocate(self, batch_size: int, capacity: int):
        cache = original(self, batch_size, capacity)
        cache.stacked_gdn = None  # the layers' views stay valid; the verify then keeps per-layer commit inputs
        return cache

    decoder.Decoder.allocate_cache = allocate if enabled else original


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3.6-27b-shape")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--budget", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    print(torch.cuda.get_device_name() if args.device == "cuda" else "cpu", torch.__version__, flush=True)
    llm = weaver.LLM.from_config(args.model, random_weights=True, seed=0, device=args.device, dtype="bf16",
                                 drafter="random:5", adapter=None)  # fmt: skip
    llm.engine.timing = True
    llm.engine.options = llm.engine.options.replace(cuda_graphs="stages")  # a device time per stage
    prompts = [[(7 * i + 3 * j) % llm.config.vocab_size for j in range(64)] for i in range(2)]
    bench_args = argparse.Namespace(new_tokens=args.new_tokens, temperature=0.0)
    rows = []
    for side in ("stacked", "per-layer"):
        per_layer_caches(side == "per-layer")
        llm.engine._caches.clear()  # fresh caches (and so fresh captured rounds) for this side
        llm.engine._captured.clear()
        row = rounds.measure(llm, prompts, "chain", args.budget, bench_args)
        caches = list(llm.engine._caches.values())
        row["side"], row["stacked_commit"] = side, all(c.gdn_tree is not None for c in caches)
        assert row["stacked_commit"] == (side == "stacked"), "the side did not take its commit path"
        rows.append(row)
        stages = " ".join(f"{k} {v:.3f}" for k, v in row["stage_ms"].items())
        print(f"{side:>9}: chain {args.budget} round {row['round_ms']:.3f} ms ({stages}), tau {row['tau']:.2f}",
              flush=True)
        if args.out:  # after each side: a run cut short keeps what it measured
            Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    per_layer_caches(False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
