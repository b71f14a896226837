"""Target-side sampling: logits -> processed distribution -> token, shared by every decoding rule.

Every rule (autoregressive, greedy/target-only/traversal verification, chain speculative sampling) sees
the *processed* target distribution `target_probs = process(logits; temperature, top_k, top_p)`, so the
rules are lossless with respect to exactly the distribution plain sampling would use.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from weaver.errors import GenerationConfigError
from weaver.kernels.vocab_top1 import argmax_last
from weaver.options import RuntimeOptions


@dataclass(frozen=True)
class SamplingParams:
    """How the target's next-token distribution is shaped; temperature 0 means greedy (argmax)."""

    temperature: float = 0.0
    top_p: float = 1.0  # nucleus mass kept, in (0, 1]
    top_k: int = 0  # 0 = no top-k cut

    def __post_init__(self) -> None:
        if not self.temperature >= 0.0:
            raise GenerationConfigError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise GenerationConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise GenerationConfigError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def process_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Float32 probabilities after temperature, top-k and top-p; greedy gives a one-hot on the argmax."""
    logits = logits.float()
    if params.greedy:
        probs = torch.zeros_like(logits)
        return probs.scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    logits = logits / params.temperature
    vocab = logits.shape[-1]
    if 0 < params.top_k < vocab:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        # Keep the smallest prefix whose mass reaches top_p: a token stays if the mass before it is < top_p.
        mass_before = sorted_probs.cumsum(-1) - sorted_probs
        keep_sorted = mass_before < params.top_p
        keep = torch.zeros_like(keep_sorted).scatter_(-1, order, keep_sorted)
        probs = probs * keep
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample_from_probs(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row, exactly distributed as `probs` (exponential race: argmax p / E, E ~ Exp(1)).

    No host sync and no data-dependent shapes, so it can sit inside a captured CUDA graph.
    """
    race = torch.empty_like(probs).exponential_(generator=generator)
    return torch.argmax(probs / race, dim=-1)


def sample_next_token(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None, options: RuntimeOptions
) -> torch.Tensor:
    """argmax for greedy (the vocabulary kernel where `options` allow), otherwise an exact sample of the
    processed distribution. logits: [..., V]."""
    if params.greedy:
        return argmax_last(logits, options)
    return sample_from_probs(process_logits(logits, params), generator)
