"""`weaver data regenerate`: the target writes the assistant turns the trainers learn from (self-distillation).

The drafter and the adapter must predict what *this* target says, so their data is the target's own replies to
the training prompts: greedy for part of them and sampled at T=1 for the rest (the two regimes they will be
verified under). Batched through the target's own static cache (`weaver.train.batched_decode`: row-chunked
prefill, then one CUDA-graphed [B, 1] step for every row): transformers' `generate` ran at ~4.8k reply tokens/s
at batch 512 on an H200 (launch-bound per step), which made data the bottleneck of training.
Each chunk of prompts becomes one shard (`weaver.train.shards`); a rerun skips the shards already written, so an
interrupted run resumes where it stopped.
"""

from __future__ import annotations

import gzip
import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from weaver.errors import WeaverError
from weaver.train.batched_decode import decode_batch
from weaver.train.shards import write_shard

__all__ = ["RegenerateConfig", "read_prompt_messages", "regenerate"]


@dataclass
class RegenerateConfig:
    """What to generate and how much; the defaults suit SmolLM2-135M on one H200."""

    batch_size: int = 256
    max_new_tokens: int = 512
    max_prompt_tokens: int = 512
    sampled_fraction: float = 0.5  # share of prompts answered by sampling at T=1 (the rest greedy)
    shard_size: int = 2048  # prompts per shard (and per resume unit)
    limit: int | None = None  # use the first `limit` prompts only
    seed: int = 0
    max_seconds: float | None = None  # start no new shard after this long (a bounded GPU lease)

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.max_new_tokens < 1 or self.max_prompt_tokens < 1 or self.shard_size < 1:
            raise ValueError("batch_size, max_new_tokens, max_prompt_tokens and shard_size must be positive")
        if not 0.0 <= self.sampled_fraction <= 1.0:
            raise ValueError(f"sampled_fraction must lie in [0, 1], got {self.sampled_fraction}")


def read_prompt_messages(path: str | Path) -> list[list[dict]]:
    """The `messages` of every line of a prompts JSONL (`weaver data build`'s train_prompts.jsonl; .gz too)."""
    path = Path(path)
    if not path.is_file():
        raise WeaverError(f"{path}: no such prompts file (write one with `weaver data build`)")
    out = []
    raw = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text(encoding="utf-8")
    for n, line in enumerate(raw.split("\n"), 1):
        if not line.strip():
            continue
        try:
            messages = json.loads(line)["messages"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise WeaverError(f"{path}:{n}: not a prompt record with `messages`") from None
        if not messages or messages[-1].get("role") != "user":
            raise WeaverError(f"{path}:{n}: the conversation must end with a user turn")
        out.append(messages)
    if not out:
        raise WeaverError(f"{path}: no prompts")
    return out


def _prompt_ids(tokenizer, messages: list[dict]) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if not isinstance(ids, list):  # transformers 5 may hand back a BatchEncoding
        ids = ids["input_ids"]
    return [int(t) for t in ids]


def regenerate(model_dir: str | Path, prompts_path: str | Path, out_dir: str | Path, cfg: RegenerateConfig,
               device: str = "cuda", dtype: torch.dtype = torch.bfloat16, progress: bool = True) -> dict:
    """Write shard_00000.npz, ... into out_dir (skipping shards already there) and return a summary dict."""
    from tqdm.auto import tqdm
    from transformers import AutoTokenizer

    from weaver.models.fuse import fuse_projections
    from weaver.models.loading import load_model

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    conversations = read_prompt_messages(prompts_path)[: cfg.limit]
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = fuse_projections(load_model(model_dir, device, dtype))
    eos = sorted({int(t) for t in model.config.eos_token_id} | {tokenizer.eos_token_id})  # every id that ends a reply
    shards = [conversations[i : i + cfg.shard_size] for i in range(0, len(conversations), cfg.shard_size)]
    summary = {"prompts": len(conversations), "shards": len(shards), "skipped_long": 0, "written": 0,
               "reply_tokens": 0, "seconds": 0.0}
    bar = tqdm(total=len(conversations), unit="prompt", disable=not progress, desc="regenerate")
    start = time.perf_counter()
    for k, chunk in enumerate(shards):
        path = out_dir / f"shard_{k:05d}.npz"
        if cfg.max_seconds is not None and time.perf_counter() - start > cfg.max_seconds:
            summary["stopped_at_budget"] = True
            break
        if path.exists():
            bar.update(len(chunk))
            continue
        torch.manual_seed(cfg.seed * 100_003 + k)
        encoded = [_prompt_ids(tokenizer, m) for m in chunk]
        keep = [i for i, p in enumerate(encoded) if len(p) <= cfg.max_prompt_tokens]
        summary["skipped_long"] += len(chunk) - len(keep)
        n_sampled = round(cfg.sampled_fraction * len(keep))
        sampled = {i: j < n_sampled for j, i in enumerate(keep)}
        members = sorted(keep, key=lambda i: len(encoded[i]))  # similar lengths share a batch: less padding
        sequences, prompt_lens = [], []
        for b in range(0, len(members), cfg.batch_size):
            rows = members[b : b + cfg.batch_size]
            batch = [encoded[i] for i in rows]
            replies = decode_batch(model, batch, cfg.max_new_tokens, eos, sample=[sampled[i] for i in rows])
            for p, r in zip(batch, replies, strict=True):
                sequences.append(p + r)
                prompt_lens.append(len(p))
                summary["reply_tokens"] += len(r)
            bar.update(len(batch))
            bar.set_postfix(tok_s=f"{summary['reply_tokens'] / (time.perf_counter() - start):.0f}")
        bar.update(len(chunk) - len(keep))
        write_shard(path, sequences, prompt_lens)
        summary["written"] += 1
    bar.close()
    summary["seconds"] = round(time.perf_counter() - start, 2)
    (out_dir / "regenerate.json").write_text(json.dumps({**summary, "config": cfg.__dict__}, indent=2) + "\n")
    return summary
