"""Greedy top-1 over the vocabulary, on CUDA through a two-stage Triton reduction (weaver.kernels.triton.vocab_top1).

    logp, index = top1_logprob(x, options)   # = torch.log_softmax(x.float(), -1).max(-1), x [..., V]
    index = argmax_last(x, options)          # = x.argmax(-1)

The chain builder's drafts (and their log q) and the greedy target choice reduce rows of V = 49152 logits,
1 to ~65 rows at a time; inductor/aten run one program per row with a long serial loop (10-18 us on the
H200). The Triton kernel splits each row over ~24 programs and combines their partials in a second launch.
It is exposed as the custom op `weaver::vocab_top1` so compiled round stages call it as one opaque kernel
(its fake impl gives the output shapes); eager calls launch it directly. This module imports without
triton: the kernel module loads on first use, and both functions use torch unless CUDA and triton are
both there (`use_kernel`) and the rows are at least VOCAB_TOP1_MIN_V long.
"""

from __future__ import annotations

import torch

from weaver.kernels.dispatch import launch, use_kernel
from weaver.options import RuntimeOptions

__all__ = ["VOCAB_TOP1_DTYPES", "VOCAB_TOP1_MIN_V", "argmax_last", "top1_logprob", "vocab_top1_op"]

VOCAB_TOP1_MIN_V = 1024  # shorter rows: one torch reduction program a row is already short
VOCAB_TOP1_DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # what the kernel reads


@torch.library.custom_op("weaver::vocab_top1", mutates_args=())
def vocab_top1_op(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`weaver.kernels.triton.vocab_top1.vocab_top1` as a custom op: x [R, V] -> (logp [R] float32, index [R] int64)."""
    from weaver.kernels.triton.vocab_top1 import vocab_top1

    return vocab_top1(x)


@vocab_top1_op.register_fake
def _vocab_top1_fake(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x.new_empty(x.shape[0], dtype=torch.float32), x.new_empty(x.shape[0], dtype=torch.int64)


def _use_kernel(x: torch.Tensor, options: RuntimeOptions) -> bool:
    """Rows long enough to split, of a dtype the kernel reads, where the options allow the kernel."""
    long_rows = x.dim() >= 1 and x.shape[-1] >= VOCAB_TOP1_MIN_V
    return long_rows and x.dtype in VOCAB_TOP1_DTYPES and use_kernel(options, x)


def _kernel(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The op on x viewed as [R, V] (a copy only where the leading dims cannot be merged), outputs [...]."""
    logp, index = launch(vocab_top1_op, "weaver.kernels.triton.vocab_top1", "vocab_top1", x.reshape(-1, x.shape[-1]))
    return logp.view(x.shape[:-1]), index.view(x.shape[:-1])


def top1_logprob(x: torch.Tensor, options: RuntimeOptions) -> tuple[torch.Tensor, torch.Tensor]:
    """The best token of each row and its log-probability, for greedy drafts: x [..., V] -> (max log-softmax
    [...] float32, argmax [...] int64, the lowest index among equal maxima)."""
    if _use_kernel(x, options):
        return _kernel(x)
    best, index = torch.log_softmax(x.float(), dim=-1).max(dim=-1)
    return best, index


def argmax_last(x: torch.Tensor, options: RuntimeOptions) -> torch.Tensor:
    """`x.argmax(-1)` (int64, lowest index among equal maxima) for the greedy target choice over the vocabulary."""
    if _use_kernel(x, options):
        return _kernel(x)[1]
    return x.argmax(dim=-1)
