"""H200, issue 17: the captured prefill through the torch forward (as before session 27) against the fused verify
kernels (the prompt as a chain through `FastVerifier`), one process, SmolLM2's shape with random bf16 weights: the
target prefill (`ar`) and the speculative prefill of a captured chain round (target + drafter context), per
prompt bucket, median ms of `reps` calls with the device synchronised (host copies of the prompt and the first
token's read-back included, as a generation pays them). The only difference between the two sides is
`Engine.fast_prefill` (None: the torch forward), set before the engine's first prefill.

    python3 scripts/gpu/prefill_ab.py --out $OUT/prefill_ab.json
    python3 scripts/gpu/prefill_ab.py --device cpu --lengths 12 --reps 2      # CPU smoke run (no graphs there)
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

import weaver
from weaver.bench.scale import median_ms
from weaver.speculative.engine import RoundStats
from weaver.speculative.round import RoundConfig
from weaver.speculative.sampling import SamplingParams


def measure(model: str, fused: bool, lengths: list[int], reps: int, device: str) -> list[dict]:
    llm = weaver.LLM.from_config(model, random_weights=True, seed=0, device=device, dtype="bf16",
                                 drafter="random:4", adapter=None)  # fmt: skip
    engine, vocab = llm.engine, llm.config.vocab_size
    if not fused:
        engine.fast_prefill = None
    chain = RoundConfig(method="chain", budget=15, rule="greedy", params=SamplingParams())
    rows = []
    for n in lengths:
        ids = [(31 * j + 7) % vocab for j in range(n)]
        t0 = time.perf_counter()
        target = median_ms(lambda n=n, ids=ids: engine.prefill(engine.cache_for(n + 200), ids), llm.model.device,
                           reps=reps)  # fmt: skip

        def speculative(ids: list[int] = ids) -> None:  # a chain generation's start: its captured prefill
            gen = engine.generate(ids, chain, 200, seed=0, stats=RoundStats())
            next(gen)
            gen.close()

        spec = median_ms(speculative, llm.model.device, reps=reps)
        rows.append({"fused": fused, "prompt": n, "target_ms": target, "speculative_ms": spec,
                     "first_calls_s": time.perf_counter() - t0})  # fmt: skip
        print(f"{'fused' if fused else 'torch':>5} prompt {n:>4}: target {target:.3f} ms, speculative "
              f"{spec:.3f} ms (with compile / capture {rows[-1]['first_calls_s']:.0f} s)", flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-shape")
    parser.add_argument("--lengths", type=int, nargs="+", default=[40, 100, 200, 450])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    print(torch.cuda.get_device_name() if args.device == "cuda" else "cpu", torch.__version__, flush=True)
    rows = []
    for fused in (False, True):
        rows += measure(args.model, fused, args.lengths, args.reps, args.device)
        if args.out:  # after each side: a run cut short keeps what it measured
            Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
