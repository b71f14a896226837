"""The DDTree selection and tree (`weaver.ops.ddtree_select`) in one Triton program per row: every level, the final
best-`nodes` pick and the tree's fields, without leaving the program.

The reference makes two launches a level (the candidate sums, a top-k) and a sort: ~30 launches at budget 16,
most of the builder's time on the H200 (rounds/h200_v29_tuning: build 0.235 ms). Here a level's candidates are
only the pairs (i, j) with (i + 1)(j + 1) <= L_d (parent rank i in level d-1, token rank j): both lists are
sorted descending, so a pair outside that hyperbola has at least L_d others that score at least as much and sit
at lower flat indices i * k + j, and the top L_d (ties to the lower flat index) never takes it. The pairs, in
ascending flat order, are a small host table (`pair_table`; 50 at budget 16, 280 at 64), so lane order is flat
order and `select_top`'s lowest-lane tie-break is the reference's. A level's scores go to the output row and
the next level reads its parents' back from there (one block barrier between levels). Each entry's parent column
and depth go to a scratch row; after the pick, a scratch row of node ids by entry gives every node its parent's
node id (two more barriers), and the nodes' tokens and log q are gathered from the inputs.
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

__all__ = ["ddtree_select", "ddtree_select_warps", "ddtree_tree", "pair_table"]


@functools.lru_cache(maxsize=16)
def pair_table(nodes: int, k: int, device: torch.device) -> torch.Tensor:
    """The flat indices i * k + j (ascending, int32) of every pair with (i + 1)(j + 1) <= nodes, i < nodes, j < k:
    the candidates any level can keep. Built on the first (uncaptured) call of a shape, then reused."""
    flat = [i * k + j for i in range(nodes) for j in range(min(k, nodes // (i + 1)))]
    return torch.tensor(flat, dtype=torch.int32, device=device)


@triton.jit
def ddtree_select_kernel(
    lq, ids, root, pairs, score, flat, order, cpar, cdep, pos, tokens, parents, depth, valid, logq,
    P, D, K, NODES, M, stride_lb, stride_ld, stride_ib, stride_id,
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
    for d in range(0, D):  # the levels
        size = tl.minimum(NODES - d, l_prev * K)
        m_p = (o_p < P) & (p_i < l_prev) & ((p_i + 1) * (p_j + 1) <= size)
        base = tl.load(row_s + col_prev + p_i, mask=m_p & (d > 0), other=0.0)  # level 0: the root, score 0
        top = tl.load(lq + i_b * stride_lb + d * stride_ld + p_j, mask=m_p, other=0.0)
        vals, lanes = select_top(base + top, m_p, size, BLOCK_P, BLOCK_L, True)
        m_l = o_l < size
        picked = tl.load(pairs + lanes, mask=m_l, other=0)
        tl.store(row_s + col + o_l, vals, mask=m_l)
        tl.store(row_f + col + o_l, picked.to(tl.int64), mask=m_l)
        tl.store(cpar + i_b * M + col + o_l, tl.where(d > 0, col_prev + picked // K, -1), mask=m_l)
        tl.store(cdep + i_b * M + col + o_l, tl.zeros([BLOCK_L], tl.int32) + d + 1, mask=m_l)
        tl.debug_barrier()  # this level's scores are the next level's parents
        col_prev = col
        col += size
        l_prev = size
    # the best NODES entries of every level, best first; their node ids (1 ..) by candidate column
    o_m = tl.arange(0, BLOCK_M)
    m_m = o_m < M
    every = tl.load(row_s + o_m, mask=m_m, other=0.0)
    best_s, best = select_top(every, m_m, NODES, BLOCK_M, BLOCK_L, True)
    m_n = o_l < NODES
    tl.store(order + i_b * NODES + o_l, best.to(tl.int64), mask=m_n)
    tl.store(pos + i_b * M + o_m, tl.zeros([BLOCK_M], tl.int32), mask=m_m)
    tl.debug_barrier()
    tl.store(pos + i_b * M + best, o_l + 1, mask=m_n)
    tl.debug_barrier()
    # the tree: node r + 1 is entry best[r]; an entry scored -inf is a pad node
    ok = m_n & (best_s > float("-inf"))
    dep = tl.load(cdep + i_b * M + best, mask=m_n, other=1)
    par = tl.load(cpar + i_b * M + best, mask=m_n, other=-1)
    node_par = tl.load(pos + i_b * M + tl.maximum(par, 0), mask=m_n & (par >= 0), other=0)
    rank = tl.load(row_f + best, mask=m_n, other=0) % K
    tok = tl.load(ids + i_b * stride_ib + (dep - 1) * stride_id + rank, mask=m_n, other=0)
    lq_node = tl.load(lq + i_b * stride_lb + (dep - 1) * stride_ld + rank, mask=m_n, other=0.0)
    row = i_b * (NODES + 1) + 1 + o_l
    tl.store(tokens + row, tl.where(ok, tok, 0), mask=m_n)
    tl.store(parents + row, tl.where(ok, node_par, -1).to(tl.int64), mask=m_n)
    tl.store(depth + row, tl.where(ok, dep, 0).to(tl.int64), mask=m_n)
    tl.store(valid + row, ok.to(tl.int8), mask=m_n)
    tl.store(logq + row, tl.where(ok, lq_node.to(tl.float32), 0.0), mask=m_n)
    first = o_l == 0  # node 0: the root
    root_tok = tl.load(root + i_b + o_l * 0, mask=first, other=0)
    row0 = i_b * (NODES + 1) + o_l
    tl.store(tokens + row0, root_tok, mask=first)
    tl.store(parents + row0, tl.full([BLOCK_L], -1, tl.int64), mask=first)
    tl.store(depth + row0, tl.zeros([BLOCK_L], tl.int64), mask=first)
    tl.store(valid + row0, tl.full([BLOCK_L], 1, tl.int8), mask=first)
    tl.store(logq + row0, tl.zeros([BLOCK_L], tl.float32), mask=first)


def ddtree_select_warps(m: int) -> int:
    """Warps of the one program: its ~10 * nodes block reductions are serial, and one warp reduces with shuffles
    only (no shared-memory round trip and barrier per reduction), so the fewest warps that hold the M entries'
    keys in registers (<= 32 a thread)."""
    return 1 if m <= 512 else 4


def _launch(top_lq: torch.Tensor, top_ids: torch.Tensor, root: torch.Tensor, nodes: int) -> tuple[torch.Tensor, ...]:
    """One launch: (score, flat, order, tokens, parents, depth, valid, logq), the last five [B, 1 + nodes]."""
    if top_lq.dim() != 3 or top_lq.dtype != torch.float64:
        raise ValueError(f"top_lq must be [B, D, k] float64, got {tuple(top_lq.shape)} {top_lq.dtype}")
    b, depth, k = top_lq.shape
    if top_ids.shape != top_lq.shape or root.shape != (b,):
        raise ValueError(f"top_ids must be [B, D, k] like top_lq and root [B], got {tuple(top_ids.shape)}, "
                         f"{tuple(root.shape)}")  # fmt: skip
    sizes = level_sizes(depth, k, nodes)
    if not 1 <= nodes <= DDTREE_KERNEL_MAX_NODES or not sizes:
        raise ValueError(
            f"need 1 <= nodes <= {DDTREE_KERNEL_MAX_NODES} and D, k >= 1, got nodes={nodes}, D={depth}, k={k}"
        )
    check_device(top_lq, top_ids, root)
    top_lq = top_lq if top_lq.stride(2) == 1 else top_lq.contiguous()
    top_ids = (top_ids if top_ids.stride(2) == 1 else top_ids.contiguous()).long()
    root = root.long().contiguous()
    m, n, dev = sum(sizes), nodes + 1, top_lq.device
    pairs = pair_table(nodes, k, dev)
    score = torch.empty(b, m, dtype=torch.float64, device=dev)
    flat = torch.empty(b, m, dtype=torch.int64, device=dev)
    order = torch.empty(b, nodes, dtype=torch.int64, device=dev)
    scratch = torch.empty(3, b, m, dtype=torch.int32, device=dev)  # parent column, depth, node id per entry
    tokens, parents, depth_out = (torch.empty(b, n, dtype=torch.int64, device=dev) for _ in range(3))
    valid = torch.empty(b, n, dtype=torch.int8, device=dev)
    logq = torch.empty(b, n, dtype=torch.float32, device=dev)
    if b:
        ddtree_select_kernel[(b,)](
            top_lq, top_ids, root, pairs, score, flat, order, scratch[0], scratch[1], scratch[2], tokens,
            parents, depth_out, valid, logq, pairs.numel(), len(sizes), k, nodes, m, top_lq.stride(0),
            top_lq.stride(1), top_ids.stride(0), top_ids.stride(1), BLOCK_P=next_pow2(pairs.numel(), 32),
            BLOCK_L=next_pow2(nodes, 2), BLOCK_M=next_pow2(m, 32), num_warps=ddtree_select_warps(m),
            **pdl_launch(dev),
        )  # fmt: skip
    return score, flat, order, tokens, parents, depth_out, valid.view(torch.bool), logq


def ddtree_select(top_lq: torch.Tensor, nodes: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`weaver.ops.ddtree_select.ddtree_select` in one launch: top_lq [B, D, k] float64, sorted descending per
    depth; 1 <= nodes <= DDTREE_KERNEL_MAX_NODES (a level's pick holds `nodes` values in registers).
    Returns score [B, M] float64, flat [B, M] int64, order [B, nodes]."""
    ids = torch.zeros(top_lq.shape, dtype=torch.int64, device=top_lq.device)  # no tree wanted: any tokens
    root = torch.zeros(top_lq.shape[:1], dtype=torch.int64, device=top_lq.device)
    return _launch(top_lq, ids, root, nodes)[:3]


def ddtree_tree(
    top_lq: torch.Tensor, top_ids: torch.Tensor, root: torch.Tensor, nodes: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`weaver.ops.ddtree_select.ddtree_tree` in the same launch: tokens, parents, depth [B, 1 + nodes] int64,
    valid bool, log q float32."""
    return _launch(top_lq, top_ids, root, nodes)[3:]
