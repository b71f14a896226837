"""Token shards of regenerated conversations: what the trainers read (prompt + the target's own reply).

A shard is one `.npz` file (numpy, no pickle): `tokens` uint16 (or int32 for vocabularies past 65,535) of all
sequences back to back, `offsets` int64 [N + 1] and `prompt_lens` int32 [N] (the loss covers positions at or
after a sequence's prompt length: the reply the target wrote). Shards are small (a few MB) so they travel as
files; `SequenceStore` concatenates them and picks deterministic batches, which resume and DDP rely on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from weaver.errors import WeaverError

__all__ = ["SequenceStore", "read_shard", "shard_paths", "write_shard"]

SHARD_GLOB = "shard_*.npz"


def write_shard(path: str | Path, sequences: list[list[int]], prompt_lens: list[int]) -> None:
    """Write sequences (token ids) and their prompt lengths atomically (tmp file, then rename)."""
    if len(sequences) != len(prompt_lens):
        raise ValueError(f"{len(sequences)} sequences but {len(prompt_lens)} prompt lengths")
    path = Path(path)
    flat = [t for s in sequences for t in s]
    dtype = np.uint16 if not flat or max(flat) < 1 << 16 else np.int32
    offsets = np.zeros(len(sequences) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(s) for s in sequences])
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, tokens=np.asarray(flat, dtype=dtype), offsets=offsets, prompt_lens=np.asarray(prompt_lens, np.int32))
    tmp.replace(path)


def read_shard(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tokens, offsets, prompt_lens) of one shard; a damaged file is a WeaverError naming it."""
    try:
        with np.load(path, allow_pickle=False) as z:
            tokens, offsets, prompt_lens = z["tokens"], z["offsets"], z["prompt_lens"]
    except (OSError, ValueError, KeyError) as exc:
        raise WeaverError(f"{path}: not a readable token shard ({exc})") from None
    if offsets.shape != (prompt_lens.shape[0] + 1,) or offsets[-1] != tokens.shape[0]:
        raise WeaverError(f"{path}: offsets do not match the tokens (damaged shard)")
    return tokens, offsets, prompt_lens


def shard_paths(data_dir: str | Path) -> list[Path]:
    """The shards of a regeneration directory, in order; none is a WeaverError."""
    paths = sorted(Path(data_dir).glob(SHARD_GLOB))
    if not paths:
        raise WeaverError(f"no token shards ({SHARD_GLOB}) in {data_dir}: run `weaver data regenerate` first")
    return paths


@dataclass
class Batch:
    """Right-padded sequences: tokens [B, T] long, lengths [B], prompt_lens [B] (all on the CPU)."""

    tokens: torch.Tensor
    lengths: torch.Tensor
    prompt_lens: torch.Tensor

    def to(self, device: torch.device | str) -> Batch:
        return Batch(self.tokens.to(device), self.lengths.to(device), self.prompt_lens.to(device))


class SequenceStore:
    """Every sequence of a directory of shards, kept long enough to train on (reply of >= min_reply tokens),
    cut to max_len tokens; `batch(step, ...)` draws a deterministic batch from (seed, step, micro, rank)."""

    def __init__(self, data_dir: str | Path, max_len: int = 1024, min_reply: int = 8, seed: int = 0) -> None:
        seqs, plens = [], []
        for path in shard_paths(data_dir):
            tokens, offsets, prompt_lens = read_shard(path)
            for i in range(prompt_lens.shape[0]):
                s = tokens[offsets[i] : offsets[i + 1]]
                p = int(prompt_lens[i])
                if min(len(s), max_len) - p >= min_reply:
                    seqs.append(s[:max_len].astype(np.int64))
                    plens.append(p)
        if not seqs:
            raise WeaverError(f"{data_dir}: no sequence has a reply of {min_reply}+ tokens within {max_len} tokens")
        self.sequences, self.prompt_lens, self.max_len, self.seed = seqs, plens, max_len, seed

    def __len__(self) -> int:
        return len(self.sequences)

    @property
    def num_tokens(self) -> int:
        return sum(len(s) for s in self.sequences)

    def batch(self, step: int, micro: int, rank: int, world: int, batch_size: int, grad_accum: int = 1,
              pad_id: int = 0) -> Batch:
        """Rank `rank`'s slice of the global batch of (step, micro): an epoch-wise permutation, so every
        sequence is seen once per epoch; the same arguments always give the same batch."""
        global_size = batch_size * world
        start = ((step * grad_accum + micro) * global_size) + rank * batch_size
        n = len(self.sequences)
        idx = [self._order((start + j) // n)[(start + j) % n] for j in range(batch_size)]
        rows = [self.sequences[i] for i in idx]
        t = max(len(r) for r in rows)
        tokens = torch.full((batch_size, t), pad_id, dtype=torch.long)
        for j, r in enumerate(rows):
            tokens[j, : len(r)] = torch.from_numpy(r)
        lengths = torch.tensor([len(r) for r in rows])
        return Batch(tokens, lengths, torch.tensor([self.prompt_lens[i] for i in idx]))

    def _order(self, epoch: int) -> np.ndarray:
        if getattr(self, "_epoch", None) != epoch:
            self._epoch, self._perm = epoch, np.random.default_rng([self.seed, epoch]).permutation(len(self.sequences))
        return self._perm
