"""H200, issue 19: the hybrid verify uncompiled (as the engine ran it before) against torch.compile'd (as it runs
now), in one process, at the Qwen3.6-27B text shape with random bf16 weights: `bench.scale.verify_row` (the
verify stage alone, captured in a CUDA graph, median of 30 replays) for a 16-node chain and a 64-node
proposal-shaped tree, each shape uncompiled then compiled.

    python3 scripts/gpu/hybrid_verify_ab.py --out $OUT/verify_ab.json
    python3 scripts/gpu/hybrid_verify_ab.py --model tiny-qwen3_5 --device cpu --context 16    # CPU smoke
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

import weaver
from weaver.bench.scale import verify_row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3.6-27b-shape")
    parser.add_argument("--shapes", nargs="+", default=["chain:16", "tree:64"], help="kind:non-root nodes")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--device", default="cuda", help="cpu: a plumbing smoke run (no compile there)")
    parser.add_argument("--modes", nargs="+", default=["eager", "compiled"], choices=["eager", "compiled"],
                        help="which sides to time per shape (compiling one 27B shape takes ~2 minutes)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    llm = weaver.LLM.from_config(args.model, random_weights=True, seed=0, device=args.device, dtype="bf16",
                                 drafter="random:1", adapter=None)
    print(torch.cuda.get_device_name() if args.device == "cuda" else "cpu", torch.__version__, flush=True)
    rows = []
    for shape in args.shapes:
        kind, n = shape.split(":")
        for compiled in (mode == "compiled" for mode in args.modes):
            t0 = time.perf_counter()
            row = verify_row(llm, kind, int(n), args.context, compiled=compiled)
            row["wall_s"] = time.perf_counter() - t0
            rows.append(row)
            print(f"verify {kind:<5} N={n:>3} {'compiled' if row['compiled'] else 'eager':>8}: {row['ms']:.3f} ms "
                  f"(row took {row['wall_s']:.0f} s)", flush=True)
            if args.out:  # after every row: a run cut short keeps what it measured
                Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
