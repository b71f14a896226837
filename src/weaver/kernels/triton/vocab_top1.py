"""Greedy top-1 of vocabulary rows in two stages: argmax and max log-softmax of [R, V] logits.

    logp, index = vocab_top1(x)   # = log_softmax(x.float(), -1).max(-1), with the index of torch.argmax

The drafter's marginals and the target's greedy choice reduce rows of V = 49152 (or 151936) logits, 1 to
~65 rows a call. Inductor/aten give each row one program with a long serial loop (10-18 us on the H200);
here stage 1 splits every row into C = cdiv(V, CHUNK) chunks, one program each, that write the chunk's
(max, lowest argmax, sum exp(x - chunk max)) to fp32/int64 scratch [R, C]; stage 2, one program per row,
combines them: M = max of the maxima, the lowest index among chunks whose max is M (chunks are in index
order and each holds its lowest argmax, so that is torch.argmax's answer), and
sum_c s_c * exp(m_c - M), whose -log is the max log-softmax (x_argmax - logsumexp x). fp32 throughout;
16-bit inputs are widened on load. H200, in a captured round at V = 49152 (benchmarks/results/rounds/h200_v15):
2.2-2.4 us for stage 1 and 1.2 us for stage 2.

-inf entries (masked logits) add nothing to the sums; a chunk of only -inf keeps its max -inf, its first
index and a zero sum (its exp runs against 0, not -inf, so no NaN). A row of only -inf gives index 0 and
logp NaN, as the torch path does. NaN and +inf logits are not handled.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from weaver.kernels.triton._utils import check_device, next_pow2, pdl_launch, pdl_wait
from weaver.kernels.vocab_top1 import VOCAB_TOP1_DTYPES

__all__ = ["combine_chunks", "vocab_top1", "vocab_top1_config"]


@triton.jit
def _chunk_kernel(x, part_max, part_idx, part_sum, V, C, stride_x, CHUNK: tl.constexpr, PDL: tl.constexpr = False):
    """Program (row r, chunk c): max, lowest argmax and sum exp(x - max) of x[r, c*CHUNK : (c+1)*CHUNK]."""
    if PDL:  # programmatic dependent launch: nothing is read before the wait
        pdl_wait()
    i_r = tl.program_id(0).to(tl.int64)
    i_c = tl.program_id(1)
    o_v = i_c * CHUNK + tl.arange(0, CHUNK)
    b_x = tl.load(x + i_r * stride_x + o_v, mask=o_v < V, other=float("-inf")).to(tl.float32)
    m, idx = tl.max(b_x, 0, return_indices=True, return_indices_tie_break_left=True)
    m_ref = tl.where(m == float("-inf"), 0.0, m)  # an all -inf chunk: exp(-inf - 0) = 0, not exp(NaN)
    s = tl.sum(tl.exp(b_x - m_ref), 0)
    tl.store(part_max + i_r * C + i_c, m)
    tl.store(part_idx + i_r * C + i_c, i_c.to(tl.int64) * CHUNK + idx.to(tl.int64))
    tl.store(part_sum + i_r * C + i_c, s)


@triton.jit
def combine_chunks(part_max, part_sum, i_r, C, BLOCK_C: tl.constexpr):
    """Row i_r's C chunk partials (max m_c, sum exp(x - m_c)): (the maxima [BLOCK_C], M = their max, M_ref = M or 0
    when M is -inf, total = sum_c s_c exp(m_c - M_ref)); logsumexp = M_ref + log(total), -inf for an all -inf row."""
    o_c = tl.arange(0, BLOCK_C)
    m_c = o_c < C
    b_max = tl.load(part_max + i_r * C + o_c, mask=m_c, other=float("-inf"))
    b_sum = tl.load(part_sum + i_r * C + o_c, mask=m_c, other=0.0)
    M = tl.max(b_max, 0)
    M_ref = tl.where(M == float("-inf"), 0.0, M)
    total = tl.sum(b_sum * tl.exp(b_max - M_ref), 0)  # >= 1 when M is finite: the max's chunk adds exp(0)
    return b_max, M, M_ref, total


@triton.jit
def _combine_kernel(part_max, part_idx, part_sum, logp, index, C, BLOCK_C: tl.constexpr, PDL: tl.constexpr = False):
    """Program (row r): the row's max log-softmax and lowest argmax from its C chunk partials."""
    if PDL:  # programmatic dependent launch: nothing is read before the wait
        pdl_wait()
    i_r = tl.program_id(0).to(tl.int64)
    o_c = tl.arange(0, BLOCK_C)
    b_max, M, M_ref, total = combine_chunks(part_max, part_sum, i_r, C, BLOCK_C)
    b_idx = tl.load(part_idx + i_r * C + o_c, mask=o_c < C, other=2**62)
    first = tl.min(tl.where(b_max == M, b_idx, 2**62), 0)  # lanes past C hold 2**62: a real chunk wins
    tl.store(logp + i_r, (M - M_ref) - tl.log(total))  # -log(total) = M - logsumexp; NaN for all -inf rows
    tl.store(index + i_r, first)


def vocab_top1_config(V: int) -> tuple[int, int, int]:
    """(CHUNK, chunks per row, stage-1 warps): 2048-entry chunks (24 a row at V = 49152), 16 per thread."""
    chunk = min(2048, next_pow2(V, 128))
    return chunk, triton.cdiv(V, chunk), 4


def vocab_top1(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Max log-softmax and argmax of each row, for greedy drafting and acceptance at full-vocabulary width.

    Args:
        x: [R, V] float32, bfloat16 or float16 logits, V >= 1; any row stride (a slice of a wider tensor is
            read in place), last dim of unit stride (else it is copied).
    Returns:
        logp [R] float32 = max_v x - logsumexp_v x, and index [R] int64 = argmax, the lowest index among
        equal maxima (as torch.argmax).
    """
    if x.dim() != 2:
        raise ValueError(f"x must be [R, V], got shape {tuple(x.shape)}")
    if x.dtype not in VOCAB_TOP1_DTYPES:
        raise ValueError(f"x must be float32, bfloat16 or float16, got {x.dtype}")
    R, V = x.shape
    if V < 1:
        raise ValueError("x must have at least one entry a row")
    check_device(x)
    if x.stride(1) != 1:
        x = x.contiguous()
    logp = torch.empty(R, dtype=torch.float32, device=x.device)
    index = torch.empty(R, dtype=torch.int64, device=x.device)
    if R == 0:
        return logp, index
    chunk, C, num_warps = vocab_top1_config(V)
    part_max = torch.empty(R, C, dtype=torch.float32, device=x.device)
    part_idx = torch.empty(R, C, dtype=torch.int64, device=x.device)
    part_sum = torch.empty(R, C, dtype=torch.float32, device=x.device)
    pdl = pdl_launch(x.device)
    _chunk_kernel[(R, C)](x, part_max, part_idx, part_sum, V, C, x.stride(0), CHUNK=chunk, num_warps=num_warps, **pdl)
    _combine_kernel[(R,)](part_max, part_idx, part_sum, logp, index, C, BLOCK_C=next_pow2(C, 2), num_warps=1, **pdl)
    return logp, index
