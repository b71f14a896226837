"""Top-k log-probabilities of vocabulary rows in two stages: `torch.topk` of [R, V] logits minus each row's
logsumexp, for the ddtree builder's per-depth candidates.

    logp, index = vocab_topk(x, k)   # = (topk(x, k).values.float() - logsumexp(x.float()), topk(...).indices)

The drafter's marginals are R = 15-16 rows (up to ~128) of V = 49152 logits. torch.topk on CUDA is a
multi-block radix select (~20 launches, ~55 us at k = 15 on the H200) and the logsumexp another few. Here
stage 1 splits every row into C = cdiv(V, CHUNK) chunks, one program each, that write the chunk's top k
(k rounds of "the largest key not taken yet", `weaver.kernels.triton.topk.select_top`) with their global
indices, the chunk's max and its sum exp(x - max); stage 2, one program per row, picks the row's top k
from the C * k candidates the same way and subtracts M + log(sum_c s_c exp(m_c - M)). fp32 throughout;
16-bit inputs are widened on load.

Ties: the lowest index first. The candidates lie chunk by chunk, each chunk's sorted with ties by index, so
among equal values a lower candidate position is a lower vocabulary index, and stage 2's ties (the lowest
position) are the row's. Only the last chunk can be partial: its empty slots come last in the candidate
list as -inf, behind every real entry (k <= V). A row of only -inf gives NaN log-probs, as the torch
expression does. NaN and +inf logits are not handled.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from weaver.kernels.triton._utils import check_device, next_pow2, pdl_launch, pdl_wait
from weaver.kernels.triton.topk import select_top
from weaver.kernels.triton.vocab_top1 import combine_chunks
from weaver.kernels.vocab_topk import VOCAB_TOPK_DTYPES, VOCAB_TOPK_MAX_K

__all__ = ["vocab_topk", "vocab_topk_config"]


@triton.jit
def _chunk_topk_kernel(x, part_val, part_idx, part_max, part_sum, V, C, k, stride_x, CHUNK: tl.constexpr,
                       BLOCK_K: tl.constexpr, PDL: tl.constexpr = False):  # fmt: skip
    """Program (row r, chunk c): the top k of x[r, c*CHUNK : (c+1)*CHUNK] (global indices), max, sum exp(x - max)."""
    if PDL:  # programmatic dependent launch: nothing is read before the wait
        pdl_wait()
    i_r = tl.program_id(0).to(tl.int64)
    i_c = tl.program_id(1)
    o_v = i_c * CHUNK + tl.arange(0, CHUNK)
    m_v = o_v < V
    b_x = tl.load(x + i_r * stride_x + o_v, mask=m_v, other=float("-inf")).to(tl.float32)
    m = tl.max(b_x, 0)
    m_ref = tl.where(m == float("-inf"), 0.0, m)  # an all -inf chunk: exp(-inf - 0) = 0, not exp(NaN)
    tl.store(part_max + i_r * C + i_c, m)
    tl.store(part_sum + i_r * C + i_c, tl.sum(tl.exp(b_x - m_ref), 0))
    top, pos = select_top(b_x, m_v, k, CHUNK, BLOCK_K, False)
    o_k = tl.arange(0, BLOCK_K)
    valid = o_k < V - i_c * CHUNK  # a partial last chunk: slots past its entries are -inf, listed last
    out = (i_r * C + i_c) * k + o_k
    tl.store(part_val + out, tl.where(valid, top, float("-inf")), mask=o_k < k)
    tl.store(part_idx + out, i_c.to(tl.int64) * CHUNK + pos.to(tl.int64), mask=o_k < k)


@triton.jit
def _combine_topk_kernel(part_val, part_idx, part_max, part_sum, logp, index, C, k, BLOCK_N: tl.constexpr,
                         BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr = False):  # fmt: skip
    """Program (row r): the row's top k from its C * k candidates, minus the row's logsumexp."""
    if PDL:  # programmatic dependent launch: nothing is read before the wait
        pdl_wait()
    i_r = tl.program_id(0).to(tl.int64)
    _, _, M_ref, total = combine_chunks(part_max, part_sum, i_r, C, BLOCK_C)
    lse = M_ref + tl.log(total)  # -inf for a row of only -inf
    o_n = tl.arange(0, BLOCK_N)
    m_n = o_n < C * k
    b_val = tl.load(part_val + i_r * C * k + o_n, mask=m_n, other=float("-inf"))
    top, pos = select_top(b_val, m_n, k, BLOCK_N, BLOCK_K, False)
    o_k = tl.arange(0, BLOCK_K)
    m_k = o_k < k
    tl.store(logp + i_r * k + o_k, top - lse, mask=m_k)
    tl.store(index + i_r * k + o_k, tl.load(part_idx + i_r * C * k + pos, mask=m_k, other=0), mask=m_k)


def vocab_topk_config(V: int, k: int) -> tuple[int, int, int, int]:
    """(CHUNK, chunks per row, stage-1 warps, stage-2 warps): 2048-entry chunks (24 a row at V = 49152), many
    programs a row; stage 2 is one program whose k reductions are serial: the fewest warps that hold its C * k
    candidates (a warp reduces with shuffles, no shared-memory round trip)."""
    chunk = min(2048, next_pow2(V, 128))
    C = triton.cdiv(V, chunk)
    n = next_pow2(C * k, 32)
    return chunk, C, 4, 1 if n <= 512 else 4


def vocab_topk(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k most likely tokens of each row and their log-probabilities, sorted descending.

    Args:
        x: [R, V] float32, bfloat16 or float16 logits; any row stride, last dim of unit stride (else copied).
        k: 1 <= k <= min(V, VOCAB_TOPK_MAX_K).
    Returns:
        logp [R, k] float32 = top-k logits - logsumexp of the row, index [R, k] int64 (ties: lowest index first).
    """
    if x.dim() != 2:
        raise ValueError(f"x must be [R, V], got shape {tuple(x.shape)}")
    if x.dtype not in VOCAB_TOPK_DTYPES:
        raise ValueError(f"x must be float32, bfloat16 or float16, got {x.dtype}")
    R, V = x.shape
    if not 1 <= k <= min(V, VOCAB_TOPK_MAX_K):
        raise ValueError(f"need 1 <= k <= min(V, {VOCAB_TOPK_MAX_K}), got V={V}, k={k}")
    check_device(x)
    if x.stride(1) != 1:
        x = x.contiguous()
    logp = torch.empty(R, k, dtype=torch.float32, device=x.device)
    index = torch.empty(R, k, dtype=torch.int64, device=x.device)
    if R == 0:
        return logp, index
    chunk, C, warps_1, warps_2 = vocab_topk_config(V, k)
    part_val = torch.empty(R, C * k, dtype=torch.float32, device=x.device)
    part_idx = torch.empty(R, C * k, dtype=torch.int64, device=x.device)
    part_max = torch.empty(R, C, dtype=torch.float32, device=x.device)
    part_sum = torch.empty(R, C, dtype=torch.float32, device=x.device)
    pdl, block_k = pdl_launch(x.device), next_pow2(k, 2)
    _chunk_topk_kernel[(R, C)](x, part_val, part_idx, part_max, part_sum, V, C, k, x.stride(0), CHUNK=chunk,
                               BLOCK_K=block_k, num_warps=warps_1, **pdl)  # fmt: skip
    _combine_topk_kernel[(R,)](part_val, part_idx, part_max, part_sum, logp, index, C, k,
                               BLOCK_N=next_pow2(C * k, 32), BLOCK_C=next_pow2(C, 2), BLOCK_K=block_k,
                               num_warps=warps_2, **pdl)  # fmt: skip
    return logp, index
