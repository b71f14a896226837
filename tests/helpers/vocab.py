"""Vocabulary-row logits for the vocab_top1 / vocab_topk kernel tests, on the kernel tests' device."""

from __future__ import annotations

import torch

from helpers import triton_env

NEG_INF = float("-inf")


def logits(R: int, V: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """[R, V] logits of a language-model scale (std 3)."""
    gen = torch.Generator().manual_seed(seed)
    return (3 * torch.randn(R, V, generator=gen)).to(dtype).to(triton_env.DEVICE)


def random_rows(R: int, V: int, dtype: torch.dtype, kind: str, seed: int) -> torch.Tensor:
    """`logits`, then "ties": few distinct values (many equal entries, within and across chunks); "neg_inf": up to
    ~90% of each row masked, at least one finite entry kept; "random": as they are."""
    x = logits(R, V, dtype, seed)
    if kind == "ties":
        return x.round().clamp(-2, 2)
    if kind == "neg_inf":
        gen = torch.Generator().manual_seed(seed)
        drop = torch.rand(R, V, generator=gen) < torch.rand(R, 1, generator=gen) * 0.9
        drop[:, torch.randint(0, V, (1,), generator=gen)] = False
        return x.masked_fill(drop.to(x.device), NEG_INF)
    return x
