"""Top-k of short rows in one Triton program per row, for the device tree builders' tiny selections.

The weaver builder on the device pops the best w of ~520 frontier scores and keeps the best c of ~512
child log-probs, 16 times a round. torch.topk on CUDA runs a radix select (`gatherTopK`, ~10 us) and a
sort (`bitonicSortKVInPlace`, ~4 us) for those few hundred values; this kernel holds the whole row in
registers and does k rounds of "the largest entry not taken yet" (one block reduction each). H200, CUDA
graph replay, torch 2.11 / triton 3.6: [4, 520] float64 k=4 2.5 us (torch.topk 15.2), [32, 512] float32
k=8 3.1 us (14.9); at the limits, [64, 8192] k=64 45 us (53.5).

Ordering: each float becomes an integer key whose signed order is the float order (flip the magnitude
bits of negatives); -0.0 is keyed as +0.0 and every NaN as the largest key, as torch.topk orders them.
Taken entries and the tail lanes (>= N) get a sentinel below every real key, so they are never picked
while untaken entries remain (k <= N), and the k indices are distinct even among -inf entries. Ties go
to the lowest index. Values are decoded from the keys: x[idx], except that -0.0 comes back as +0.0 and
NaN as the canonical NaN.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from weaver.kernels.topk import TOPK_MAX_K, TOPK_MAX_N
from weaver.kernels.triton._utils import check_device, next_pow2, pdl_launch, pdl_wait

__all__ = ["select_top", "small_topk", "topk_config"]


@triton.jit
def select_top(b_x, m_n, k, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, IS64: tl.constexpr):
    """The k largest of b_x [BLOCK_N] (lanes with m_n False never win): values [BLOCK_K] (b_x's dtype; lanes
    >= k are junk) and indices [BLOCK_K] int32, sorted descending, ties to the lowest index (module doc)."""
    o_n = tl.arange(0, BLOCK_N)
    o_k = tl.arange(0, BLOCK_K)
    if IS64:
        b_bits = b_x.to(tl.int64, bitcast=True)
        b_key = b_bits ^ ((b_bits >> 63) & 0x7FFFFFFFFFFFFFFF)
        nan_key = tl.full([BLOCK_N], 0x7FFFFFFFFFFFFFFF, tl.int64)
        none = tl.full([BLOCK_N], -(2**63), tl.int64)
    else:
        b_bits = b_x.to(tl.int32, bitcast=True)
        b_key = b_bits ^ ((b_bits >> 31) & 0x7FFFFFFF)
        nan_key = tl.full([BLOCK_N], 0x7FFFFFFF, tl.int32)
        none = tl.full([BLOCK_N], -(2**31), tl.int32)
    b_key = tl.where(b_x == 0, 0, b_key)  # -0.0 ties with +0.0
    b_key = tl.where(b_x != b_x, nan_key, b_key)  # NaN above +inf
    b_key = tl.where(m_n, b_key, none)  # every real key (-inf: 0x807f.. / 0x800f..) is above `none`
    out_key = tl.zeros([BLOCK_K], dtype=b_key.dtype)
    out_idx = tl.zeros([BLOCK_K], dtype=tl.int32)
    for i in range(k):
        m, idx = tl.max(b_key, 0, return_indices=True, return_indices_tie_break_left=True)
        out_key = tl.where(o_k == i, m, out_key)
        out_idx = tl.where(o_k == i, idx, out_idx)
        b_key = tl.where(o_n == idx, none, b_key)
    # keys back to floats (the key map is its own inverse on the sign-bit-kept integers)
    if IS64:
        out_bits = out_key ^ ((out_key >> 63) & 0x7FFFFFFFFFFFFFFF)
        out_val = out_bits.to(tl.float64, bitcast=True)
    else:
        out_bits = out_key ^ ((out_key >> 31) & 0x7FFFFFFF)
        out_val = out_bits.to(tl.float32, bitcast=True)
    return out_val, out_idx


@triton.jit
def small_topk_kernel(x, values, indices, N, k, stride_x, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      IS64: tl.constexpr, PDL: tl.constexpr = False):  # fmt: skip
    if PDL:  # programmatic dependent launch: nothing is read before the wait
        pdl_wait()
    i_r = tl.program_id(0).to(tl.int64)
    o_n = tl.arange(0, BLOCK_N)
    o_k = tl.arange(0, BLOCK_K)
    m_n = o_n < N
    b_x = tl.load(x + i_r * stride_x + o_n, mask=m_n, other=0)
    out_val, out_idx = select_top(b_x, m_n, k, BLOCK_N, BLOCK_K, IS64)
    m_k = o_k < k
    tl.store(values + i_r * k + o_k, out_val, mask=m_k)
    tl.store(indices + i_r * k + o_k, out_idx.to(tl.int64), mask=m_k)


def topk_config(n: int, k: int) -> tuple[int, int, int]:
    """(BLOCK_N, BLOCK_K, num_warps) of the launch: the whole row in one block, 4 warps (8 past 2048)."""
    block_n = next_pow2(n, 32)
    return block_n, next_pow2(k, 2), 4 if block_n <= 2048 else 8


def small_topk(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Largest k entries of each row, sorted descending: `torch.topk(x, k, dim=1)` for short rows.

    Args:
        x: [R, N] float32 or float64, N <= TOPK_MAX_N; any row stride (a column slice of a wider tensor is
            read in place), last dim of unit stride (else it is copied).
        k: 1 <= k <= min(N, TOPK_MAX_K).
    Returns:
        values [R, k] in x's dtype and indices [R, k] int64. Ties: the lowest index first; indices are
        distinct (rows of -inf give the lowest untaken ones); -0.0 comes back as +0.0.
    """
    if x.dim() != 2:
        raise ValueError(f"x must be [R, N], got shape {tuple(x.shape)}")
    if x.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"x must be float32 or float64, got {x.dtype}")
    R, N = x.shape
    if N > TOPK_MAX_N or not 1 <= k <= min(N, TOPK_MAX_K):
        raise ValueError(f"need N <= {TOPK_MAX_N} and 1 <= k <= min(N, {TOPK_MAX_K}), got N={N}, k={k}")
    check_device(x)
    if x.stride(1) != 1:
        x = x.contiguous()
    values = torch.empty(R, k, dtype=x.dtype, device=x.device)
    indices = torch.empty(R, k, dtype=torch.int64, device=x.device)
    if R == 0:
        return values, indices
    BLOCK_N, BLOCK_K, num_warps = topk_config(N, k)
    small_topk_kernel[(R,)](
        x, values, indices, N, k, x.stride(0), BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, IS64=x.dtype == torch.float64,
        num_warps=num_warps, **pdl_launch(x.device),
    )  # fmt: skip
    return values, indices
