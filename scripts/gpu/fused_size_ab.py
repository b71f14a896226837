"""H200: the fused Triton decode against the torch step (cuBLAS GEMVs) at a bandwidth-bound size, one process.

`models.fused_layer.FUSED_MAX_LAYER_BYTES` (256 MiB) sends layers larger than that to the torch path; this
measures the AR step of a random bf16 model (default the Qwen3-8B shape, 436 MB a layer) both ways:
`bench.rounds.measure` with the rule (torch step, compiled and captured), then with the rule lifted (the fused
step), and the same for SmolLM2's shape as the control where the fused step must stay ahead.

    python3 scripts/gpu/fused_size_ab.py --out $OUT/fused_size_ab.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import weaver
from weaver.bench import rounds
from weaver.models import fused_layer


def ar_step(model: str, lifted: bool, new_tokens: int) -> dict:
    """The `ar` row of a fresh random model, with the size rule in force or lifted."""
    saved = fused_layer.FUSED_MAX_LAYER_BYTES
    fused_layer.FUSED_MAX_LAYER_BYTES = 1 << 62 if lifted else saved
    llm = None
    try:
        llm = weaver.LLM.from_config(model, random_weights=True, seed=0, device="cuda", dtype="bf16")
        prompts = [[(7 * i + 3 * j) % llm.config.vocab_size for j in range(64)] for i in range(2)]
        row = rounds.measure(llm, prompts, "ar", 0, argparse.Namespace(new_tokens=new_tokens, temperature=0.0))
        row.update(model=model, fused=llm.engine.fast_decode is not None)
    finally:
        fused_layer.FUSED_MAX_LAYER_BYTES = saved
        del llm
        torch.cuda.empty_cache()
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["qwen3-8b-shape", "smollm2-shape"])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    rows = []
    for model in args.models:
        for lifted in (False, True):
            rows.append(ar_step(model, lifted, args.new_tokens))
            r = rows[-1]
            print(f"{model:<16} {'fused' if r['fused'] else 'torch'} step: {r['round_ms']:.3f} ms "
                  f"({r['tok_per_s']:.0f} tok/s)", flush=True)
            if args.out:  # after every row: a run cut short keeps what it measured
                Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
