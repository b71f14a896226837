"""`weaver data token-map`: count the tokens a target writes and keep the N most frequent as a draft vocabulary.

Regenerated replies (`weaver data regenerate` shards: only the reply tokens count) are the target's own output,
which is what a drafter must predict; a prompts file is the fallback where no regeneration was run.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from weaver.speculative.draft_vocab import check_size, count_tokens, frequent_token_ids, save_token_map
from weaver.train.regenerate import read_prompt_messages
from weaver.train.shards import read_shard, shard_paths

__all__ = ["build_token_map", "cmd_token_map", "prompt_tokens", "reply_tokens"]


def reply_tokens(data_dir: str | Path, progress: bool = True) -> Iterator[np.ndarray]:
    """The reply tokens (after each prompt) of every sequence in a regeneration directory, int64 arrays."""
    for path in tqdm(shard_paths(data_dir), desc="count replies", unit="shard", disable=not progress):
        tokens, offsets, prompt_lens = read_shard(path)
        for i, plen in enumerate(prompt_lens):
            yield tokens[offsets[i] + plen : offsets[i + 1]].astype(np.int64)


def prompt_tokens(prompts: str | Path, tokenizer, progress: bool = True) -> Iterator[list[int]]:
    """The tokens of every message of a prompts JSONL (no chat template: its tokens are not the target's)."""
    for messages in tqdm(read_prompt_messages(prompts), desc="count prompts", unit="prompt", disable=not progress):
        for m in messages:
            yield tokenizer.encode(m["content"])


def build_token_map(
    out: str | Path, size: int, vocab_size: int, sequences: Iterable[Sequence[int]], always: list[int]
) -> dict:
    """Count `sequences`, keep the `size` most frequent ids (plus `always`), write the map; a summary dict."""
    counts = count_tokens(sequences, vocab_size)
    ids = frequent_token_ids(counts, size, always=always)
    save_token_map(out, ids, vocab_size)
    total = int(counts.sum())
    covered = int(counts[ids].sum())
    return {"out": str(out), "size": int(ids.numel()), "vocab_size": vocab_size, "tokens_counted": total,
            "coverage": covered / total if total else float("nan")}  # fmt: skip


def cmd_token_map(args) -> int:
    """The command: a regeneration directory (--data) or a prompts file (--prompts), the model's vocabulary."""
    import json

    from weaver.errors import GenerationConfigError
    from weaver.models.config import load_config
    from weaver.models.registry import resolve_model_dir
    from weaver.models.tokenizer import HFTokenizer

    if (args.data is None) == (args.prompts is None):
        raise GenerationConfigError("give exactly one of --data (regenerated replies) or --prompts")
    # a directory needs only its config (and tokenizer for --prompts), not its weights
    model_dir = Path(args.model) if Path(args.model).is_dir() else resolve_model_dir(args.model)
    cfg = load_config(model_dir)
    eos = list(cfg.eos_token_id or [])
    check_size(args.size, cfg.vocab_size)  # before counting, which takes a while
    if args.data is not None:
        sequences = reply_tokens(args.data, progress=not args.quiet)
    else:
        sequences = prompt_tokens(args.prompts, HFTokenizer(model_dir, config_eos=eos), progress=not args.quiet)
    summary = build_token_map(args.out, args.size, cfg.vocab_size, sequences, always=eos)
    print(json.dumps(summary))
    return 0

