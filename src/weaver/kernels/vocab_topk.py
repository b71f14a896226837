"""Top-k log-probabilities over the vocabulary, on CUDA through a two-stage Triton kernel
(weaver.kernels.triton.vocab_topk).

    logp, index = top_logprobs(x, k, options)   # = topk(x, k) values - logsumexp(x) (float32), and indices

The ddtree builder keeps each depth's k best drafter tokens with their log q. torch.topk over V = 49152 is a
multi-block radix select plus a sort (~20 launches) and the logsumexp a few more; the kernel is two launches.
Exposed as the custom op `weaver::vocab_topk` so compiled round stages call it as one opaque kernel; eager
calls launch it directly. This module imports without triton: the kernel module loads on first use, and the
torch expression runs unless `use_kernel(options, x)`, the rows are long and k <= VOCAB_TOPK_MAX_K.
"""

from __future__ import annotations

import torch

from weaver.kernels.dispatch import launch, use_kernel
from weaver.options import RuntimeOptions

__all__ = ["VOCAB_TOPK_DTYPES", "VOCAB_TOPK_MAX_K", "VOCAB_TOPK_MIN_V", "top_logprobs", "vocab_topk_op"]

VOCAB_TOPK_DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # what the kernel reads
VOCAB_TOPK_MAX_K = 64  # k rounds of a block reduction per stage: past this a radix select is the better plan
VOCAB_TOPK_MIN_V = 1024  # shorter rows: torch's single-block top-k is already one short launch


@torch.library.custom_op("weaver::vocab_topk", mutates_args=())
def vocab_topk_op(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`weaver.kernels.triton.vocab_topk.vocab_topk` as a custom op: x [R, V] -> (logp [R, k], index [R, k])."""
    from weaver.kernels.triton.vocab_topk import vocab_topk

    return vocab_topk(x, k)


@vocab_topk_op.register_fake
def _vocab_topk_fake(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    return x.new_empty(x.shape[0], k, dtype=torch.float32), x.new_empty(x.shape[0], k, dtype=torch.int64)


def top_logprobs(x: torch.Tensor, k: int, options: RuntimeOptions) -> tuple[torch.Tensor, torch.Tensor]:
    """The k largest logits of each row as log-probabilities (descending) and their indices: x [..., V] ->
    ([..., k] float32, [..., k] int64). Ties: the kernel lists the lowest index first (torch.topk on CUDA
    promises no order)."""
    v = x.shape[-1]
    fits = x.dtype in VOCAB_TOPK_DTYPES and v >= VOCAB_TOPK_MIN_V and 1 <= k <= min(v, VOCAB_TOPK_MAX_K)
    if fits and use_kernel(options, x):
        logp, index = launch(vocab_topk_op, "weaver.kernels.triton.vocab_topk", "vocab_topk", x.reshape(-1, v), k)
        return logp.view(*x.shape[:-1], k), index.view(*x.shape[:-1], k)
    top, index = torch.topk(x, k, dim=-1)
    return top.float() - torch.logsumexp(x.float(), dim=-1, keepdim=True), index
