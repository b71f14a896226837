"""The `chain` builder (the DFlash baseline): the argmax of each marginal, one draft per depth."""

from __future__ import annotations

import torch

from weaver.kernels.vocab_top1 import top1_logprob
from weaver.options import DEFAULT_OPTIONS, RuntimeOptions
from weaver.speculative.builders import check_inputs
from weaver.speculative.tree import DraftTree

__all__ = ["build_chain"]


def build_chain(
    root: torch.Tensor,  # [B] long
    marginals_logits: torch.Tensor,  # [B, D, V]
    budget: int,
    *,
    options: RuntimeOptions = DEFAULT_OPTIONS,
    **context: object,  # the other builders' inputs and options (unused)
) -> DraftTree:
    """D' = min(D, budget) drafts, the argmax of each marginal, draft_logprobs = its log q. Output N = D' + 1."""
    check_inputs(root, marginals_logits, budget)
    depth = min(marginals_logits.shape[1], budget)
    best_logq, drafts = top1_logprob(marginals_logits[:, :depth], options)  # [B, D'] max log-softmax, argmax
    return DraftTree.chain(root, drafts, best_logq)
