"""A draft vocabulary: the drafter scores only the tokens the target writes most (FR-Spec's frequency-ranked head).

At a Qwen3.6-27B target the drafter's LM head over the full vocabulary (248,320 rows x 5120 in bf16: 2.5 GB) is the
largest single read of a draft. Restricted to the N most frequent tokens it reads N / V of that. Tokens outside
the set get logit -inf, so no builder proposes them; verification is untouched, so the output stays lossless and
only acceptance can drop (when the target's next token is outside the set).

A token map is a safetensors file with one int64 tensor `token_ids` (sorted, distinct) and the vocabulary size it
was built for in its metadata; `weaver data token-map` writes one from regenerated replies or from prompts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import torch

from weaver.errors import CheckpointError, GenerationConfigError

TOKEN_IDS = "token_ids"
MIN_SIZE = 32  # twice the children a weaver node pushes (16), so no tree needs a -inf token


def expand_logits(logits: torch.Tensor, token_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[..., N] logits over `token_ids` -> [..., vocab_size] with -inf elsewhere (what the builders read)."""
    full = logits.new_full((*logits.shape[:-1], vocab_size), float("-inf"))
    return full.index_copy_(-1, token_ids, logits)


def count_tokens(sequences: Iterable[Sequence[int]], vocab_size: int, chunk: int = 1 << 20) -> torch.Tensor:
    """[vocab_size] int64 occurrences of each token id over `sequences` (lists or arrays of ids), counted a
    `chunk` of tokens at a time: one bincount over the vocabulary per chunk, not per sequence."""
    counts = torch.zeros(vocab_size, dtype=torch.int64)
    pending: list[torch.Tensor] = []
    held = 0

    def flush() -> None:
        nonlocal held
        if pending:
            counts.add_(torch.bincount(torch.cat(pending), minlength=vocab_size)[:vocab_size])
            pending.clear()
            held = 0

    for seq in sequences:
        ids = torch.as_tensor(seq, dtype=torch.int64).flatten()
        pending.append(ids)
        held += ids.numel()
        if held >= chunk:
            flush()
    flush()
    return counts


def frequent_token_ids(counts: torch.Tensor, size: int, always: Iterable[int] = ()) -> torch.Tensor:
    """The `size` most frequent ids (ties: the lower id), always including `always` (e.g. EOS), sorted."""
    vocab_size = counts.numel()
    check_size(size, vocab_size)
    always = sorted({int(t) for t in always if 0 <= int(t) < vocab_size})
    score = counts.to(torch.float64).clone()
    score[always] = float("inf")
    # a stable descending sort keeps equal counts in id order
    order = torch.sort(score, descending=True, stable=True).indices[:size]
    return torch.sort(order).values


def check_size(size: int, vocab_size: int) -> None:
    """A draft vocabulary holds MIN_SIZE..vocab_size tokens."""
    if not MIN_SIZE <= size <= vocab_size:
        raise GenerationConfigError(
            f"a draft vocabulary needs {MIN_SIZE}..{vocab_size} tokens (this model's vocabulary), got {size}"
        )


def save_token_map(path: str | Path, token_ids: torch.Tensor, vocab_size: int) -> None:
    """Write a token map (module docstring) after checking it."""
    from safetensors.torch import save_file

    ids = check_token_ids(token_ids, vocab_size, str(path))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save_file({TOKEN_IDS: ids.contiguous()}, str(path), metadata={"vocab_size": str(vocab_size)})


def load_token_map(path: str | Path, vocab_size: int) -> torch.Tensor:
    """The checked `token_ids` of a token map built for a `vocab_size` vocabulary; anything else: CheckpointError."""
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such token map (write one with `weaver data token-map`)")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            if TOKEN_IDS not in f.keys():
                raise CheckpointError(f"{path}: not a token map (no {TOKEN_IDS!r} tensor; it has {list(f.keys())})")
            ids = f.get_tensor(TOKEN_IDS)
    except CheckpointError:
        raise
    except Exception as exc:  # safetensors raises its own error types for a damaged header
        raise CheckpointError(f"{path}: not a readable safetensors token map ({exc})") from None
    if meta.get("vocab_size") not in (None, str(vocab_size)):
        raise CheckpointError(f"{path}: built for a vocabulary of {meta['vocab_size']} tokens, this model has "
                              f"{vocab_size}")  # fmt: skip
    return check_token_ids(ids, vocab_size, str(path))


def check_token_ids(token_ids: torch.Tensor, vocab_size: int, where: str) -> torch.Tensor:
    """int64, 1-D, sorted, distinct, in range and of a usable size; else CheckpointError naming `where`."""
    ids = torch.as_tensor(token_ids)
    if ids.dim() != 1 or ids.dtype.is_floating_point:
        raise CheckpointError(f"{where}: token ids must be a 1-D integer tensor, got {ids.dtype} {tuple(ids.shape)}")
    ids = ids.to(torch.int64)
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise CheckpointError(f"{where}: token ids outside 0..{vocab_size - 1}")
    if ids.numel() > 1 and not bool((ids[1:] > ids[:-1]).all()):
        raise CheckpointError(f"{where}: token ids must be sorted and distinct")
    try:
        check_size(ids.numel(), vocab_size)
    except GenerationConfigError as exc:
        raise CheckpointError(f"{where}: {exc}") from None
    return ids


def resolve_draft_vocab(spec: str | None, vocab_size: int) -> torch.Tensor | None:
    """None, a token-map path, or "first:N" (ids 0..N-1: for timing a random-weight model, where any N rows cost
    the same) -> the token ids."""
    if spec is None:
        return None
    if spec.startswith("first:"):
        size = spec.split(":", 1)[1]
        if not size.isdigit():
            raise GenerationConfigError(f"expected first:<int>, got {spec!r}")
        check_size(int(size), vocab_size)
        return torch.arange(int(size))
    return load_token_map(spec, vocab_size)
