"""The DDTree selection (`weaver.ops.ddtree_select`) in one Triton program per row: every level, then the final
best-`nodes` pick, without leaving the program.

The reference makes two launches a level (the candidate sums, a top-k) and a sort: ~30 launches at budget 16,
most of the builder's time on the H200 (rounds/h200_v29_tuning: build 0.235 ms). Here a level's candidates are
only the pairs (i, j) with (i + 1)(j + 1) <= L_d (parent rank i in level d-1, token rank j): both lists are
sorted descending, so a pair outside that hyperbola has at least L_d others that score at least as much and sit
at lower flat indices i * k + j, and the top L_d (ties to the lower flat index) never takes it. The pairs, in
ascending flat order, are a small host table (`pair_table`; 50 at budget 16, 280 at 64), so lane order is flat
order and `select_top`'s lowest-lane tie-break is the reference's. A level's scores go to the output row and
the next level reads its parents' back from there (one block barrier between levels).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from weaver.kernels.ddtree_select import DDTREE_KERNEL_MAX_NODES
from weaver.kernels.triton._utils import check_device, next_pow2, pdl_launch, pdl_wait
from weaver.kernels.triton.topk import select_top
from weaver.ops.ddtree_select import level_sizes

__all__ = ["ddtree_select", "pair_table"]


@functools.lru_cache(maxsize=16)
def pair_table(nodes: int, k: int, device: torch.device) -> torch.Tensor:
    """The flat indices i * k + j (ascending, int32) of every pair with (i + 1)(j + 1) <= nodes, i < nodes, j < k:
    the candidates any level can keep. Built on the first (uncaptured) call of a shape, then reused."""
    flat = [i * k + j for i in range(nodes) for j in range(min(k, nodes // (i + 1)))]
    return torch.tensor(flat, dtype=torch.int32, device=device)


@triton.jit
def ddtree_select_kernel(
    lq, pairs, score, flat, order, P, D, K, NODES, M, stride_lb, stride_ld,
    BLOCK_P: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_M: tl.constexpr, PDL: tl.constexpr = False,
):  # fmt: skip
    if PDL:  # programmatic dependent launch: nothing is read before the wait
        pdl_wait()
    i_b = tl.program_id(0).to(tl.int64)
    o_p = tl.arange(0, BLOCK_P)
    o_l = tl.arange(0, BLOCK_L)
    p_flat = tl.load(pairs + o_p, mask=o_p < P, other=0)
    p_i = p_flat // K
    p_j = p_flat % K
    row_s = score + i_b * M
    row_f = flat + i_b * M
    l_prev = 1
    col_prev = 0
    col = 0
    for d in range(0, D):
        size = tl.minimum(NODES - d, l_prev * K)
        m_p = (o_p < P) & (p_i < l_prev) & ((p_i + 1) * (p_j + 1) <= size)
        base = tl.load(row_s + col_prev + p_i, mask=m_p & (d > 0), other=0.0)  # level 0: the root, score 0
        top = tl.load(lq + i_b * stride_lb + d * stride_ld + p_j, mask=m_p, other=0.0)
        vals, lanes = select_top(base + top, m_p, size, BLOCK_P, BLOCK_L, True)
        m_l = o_l < size
        picked = tl.load(pairs + lanes, mask=m_l, other=0)
        tl.store(row_s + col + o_l, vals, mask=m_l)
        tl.store(row_f + col + o_l, picked.to(tl.int64), mask=m_l)
        tl.debug_barrier()  # this level's scores are the next level's parents
        col_prev = col
        col += size
        l_prev = size
    o_m = tl.arange(0, BLOCK_M)
    m_m = o_m < M
    every = tl.load(row_s + o_m, mask=m_m, other=0.0)
    _, best = select_top(every, m_m, NODES, BLOCK_M, BLOCK_L, True)
    tl.store(order + i_b * NODES + o_l, best.to(tl.int64), mask=o_l < NODES)


def ddtree_select(top_lq: torch.Tensor, nodes: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`weaver.ops.ddtree_select.ddtree_select` in one launch: top_lq [B, D, k] float64, sorted descending per
    depth; 1 <= nodes <= DDTREE_KERNEL_MAX_NODES (a level's pick holds `nodes` values in registers).
    Returns score [B, M] float64, flat [B, M] int64, order [B, nodes]."""
    if top_lq.dim() != 3 or top_lq.dtype != torch.float64:
        raise ValueError(f"top_lq must be [B, D, k] float64, got {tuple(top_lq.shape)} {top_lq.dtype}")
    b, depth, k = top_lq.shape
    sizes = level_sizes(depth, k, nodes)
    if not 1 <= nodes <= DDTREE_KERNEL_MAX_NODES or not sizes:
        raise ValueError(
            f"need 1 <= nodes <= {DDTREE_KERNEL_MAX_NODES} and D, k >= 1, got nodes={nodes}, D={depth}, k={k}"
        )
    check_device(top_lq)
    if top_lq.stride(2) != 1:
        top_lq = top_lq.contiguous()
    m = sum(sizes)
    pairs = pair_table(nodes, k, top_lq.device)
    score = torch.empty(b, m, dtype=torch.float64, device=top_lq.device)
    flat = torch.empty(b, m, dtype=torch.int64, device=top_lq.device)
    order = torch.empty(b, nodes, dtype=torch.int64, device=top_lq.device)
    if b == 0:
        return score, flat, order
    ddtree_select_kernel[(b,)](
        top_lq, pairs, score, flat, order, pairs.numel(), len(sizes), k, nodes, m, top_lq.stride(0),
        top_lq.stride(1), BLOCK_P=next_pow2(pairs.numel(), 32), BLOCK_L=next_pow2(nodes, 2),
        BLOCK_M=next_pow2(m, 32), num_warps=4 if m <= 1024 else 8, **pdl_launch(top_lq.device),
    )  # fmt: skip
    return score, flat, order
