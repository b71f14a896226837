"""H200, issue 17: how fast regeneration and the drafter's training step run at SmolLM2-135M shapes (random weights,
random tokens), to size the real run's batch and anchors before spending a call on it.

    python3 scripts/gpu/train_calibrate.py [--quick]
Prints one line per setting: regeneration reply tokens/s per batch size; drafter steps/s, predictions/s and peak
memory per (batch, anchors, layers).
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np
import torch

import weaver
from weaver.train.batched_decode import decode_batch
from weaver.train.drafter_task import DrafterTask, DrafterTaskConfig
from weaver.train.loop import TrainConfig, train
from weaver.train.shards import SequenceStore, write_shard


def regen(llm, batch: int, prompt_len: int, new: int) -> None:
    gen = torch.Generator().manual_seed(0)
    vocab = llm.config.vocab_size
    prompts = [torch.randint(0, vocab, (prompt_len + i % 32,), generator=gen).tolist() for i in range(batch)]
    decode_batch(llm.model, prompts[:8], 8, eos=[-1])  # warm
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = decode_batch(llm.model, prompts, new, eos=[-1], sample=[i % 4 == 0 for i in range(batch)])
    torch.cuda.synchronize()
    dt = time.perf_counter() - t
    n = sum(len(r) for r in out)
    print(f"regen batch {batch} prompt ~{prompt_len} new {new}: {n / dt:,.0f} reply tok/s ({dt:.2f} s)", flush=True)


def drafter(llm, data: str, batch: int, anchors: int, layers: int, steps: int) -> None:
    store = SequenceStore(data, max_len=1024)
    cfg = DrafterTaskConfig(num_layers=layers, anchors=anchors, batch_size=batch)
    task = DrafterTask(llm.model, store, cfg)
    torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory() as out:
        t = time.perf_counter()
        train(task, TrainConfig(out_dir=out, steps=3, log_every=3, warmup_steps=1))
        torch.cuda.synchronize()
        warm = time.perf_counter() - t
        t = time.perf_counter()
        train(task, TrainConfig(out_dir=out + "/b", steps=steps, log_every=steps, warmup_steps=1))
        torch.cuda.synchronize()
        dt = time.perf_counter() - t
    sps = steps / dt
    print(f"drafter B {batch} N {anchors} L {layers}: {sps:.2f} steps/s, {sps * batch * anchors * 15:,.0f} pred/s, "
          f"peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB (first 3 steps {warm:.1f} s)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    llm = weaver.LLM.from_config("smollm2-shape", device="cuda", dtype="bf16")
    for b in (256, 512) if not args.quick else (512,):
        regen(llm, b, 120, 256)
    with tempfile.TemporaryDirectory() as data:
        rng = np.random.default_rng(0)
        seqs = [rng.integers(0, 49152, int(rng.integers(300, 900))).tolist() for _ in range(512)]
        write_shard(f"{data}/shard_00000.npz", seqs, [100] * len(seqs))
        for b, n, layers in ((16, 64, 4), (32, 128, 4), (32, 256, 4), (64, 128, 4)):
            try:
                drafter(llm, data, b, n, layers, steps=12)
            except torch.OutOfMemoryError:
                print(f"drafter B {b} N {n} L {layers}: out of memory", flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
