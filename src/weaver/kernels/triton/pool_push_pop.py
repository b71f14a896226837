"""The Weaver adapter step's tail and the builder's next pop in ONE Triton launch, two launches a step fewer.

    step, node, grow, score, x, q, mask = pool_push_pop(y, norm_w, norm_b, eps, table, pool_ids, pool_prior, pool, c,
                                                        f_score, f_item, f_logp, node_ids, grow, score, depth,
                                                        count, nodes, logps, valid, n, max_depth, w, visible, ...,
                                                        tickets)

It computes what `pool_top(..., push=)` (`weaver.kernels.triton.pool_top`) followed by `frontier_pop_inputs`
(`weaver.kernels.triton.weaver_frontier`) compute, from the same jit functions; the tests compare the two. The
launch is the pool scoring's grid (node rows x K blocks). Programs hand the later phases over by tickets, int32
counters that are zero between launches (the last arriver resets its own): each program stores its slice of a
row's logits and takes the row's ticket; the one that draws the last runs the row's log-softmax, top c and push
(`row_top`), then takes its batch row's ticket; the one that draws the last of those runs the batch row's pop and
its nodes' inputs (`pop_row`). A CTA barrier precedes each ticket, and the tickets are atomics with acquire-release
order at GPU scope, so the last arriver sees every store made before the others drew theirs; its loads of what
this launch wrote bypass L1. Under the interpreter the programs run one after another, so the last in order draws
the last ticket.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from weaver.kernels.triton._utils import pdl_launch, pdl_wait
from weaver.kernels.triton.pool_top import logits_slice, row_top, tail_launch_args
from weaver.kernels.triton.weaver_frontier import POP_WARPS, pop_launch_args, pop_row

__all__ = ["pool_push_pop"]


@triton.jit
def _pool_push_pop_kernel(
    y, norm_w, norm_b, table, ids, prior, pool, logits, W, K, D, eps,
    stride_y, stride_t, stride_ib, stride_id, stride_pb, stride_pd,
    t_logits, t_ids, t_pool, out_lp, out_tok, out_ix, f_score, f_item, f_logp, node_ids, grow, score, depth,
    t_w, t_k, c, t_stride_ib, t_stride_id, stride_fs, stride_fi, stride_fl,
    p_f_score, p_f_item, p_f_logp, count, nodes, logps, valid, step, node_out, grow_out, score_out,
    F, N, DEPTH, P_W, B, p_stride_fs, p_stride_fi, p_stride_fl, stride_nb, stride_lb, stride_vb,
    visible, prefix, cand_x, cand_qkv, k_buf, v_buf, x_out, q_out, mask_out, rope_cos, rope_sin,
    P, S_TOT, DM, HD,
    stride_visb, stride_viss, stride_cxb, stride_cxr, stride_cqb, stride_cqr,
    stride_kb, stride_kh, stride_ks, stride_vvb, stride_vvh, stride_vvs,
    tickets,
    HAS_BIAS: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_KALL: tl.constexpr,
    BLOCK_C: tl.constexpr, BLOCK_F: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_S: tl.constexpr,
    BLOCK_DI: tl.constexpr, ROPE: tl.constexpr, PDL: tl.constexpr = False,
):  # fmt: skip
    if PDL:  # programmatic dependent launch: nothing is read before the wait
        pdl_wait()
    i_r = tl.program_id(0)
    logits_slice(i_r, tl.program_id(1), y, norm_w, norm_b, table, ids, prior, pool, logits, W, K, D, eps,
                 stride_y, stride_t, stride_ib, stride_id, stride_pb, stride_pd, HAS_BIAS, BLOCK_K, BLOCK_D)
    tl.debug_barrier()  # every thread's logits are stored before the ticket
    if tl.atomic_add(tickets + i_r, 1, sem="acq_rel", scope="gpu") == tl.num_programs(1) - 1:
        tl.store(tickets + i_r, 0)
        row_top(i_r, t_logits, t_ids, t_pool, out_lp, out_tok, out_ix, f_score, f_item, f_logp, node_ids, grow, score,
                depth, t_w, t_k, c, t_stride_ib, t_stride_id, stride_fs, stride_fi, stride_fl, BLOCK_KALL, BLOCK_C,
                True, True)  # fmt: skip
        tl.debug_barrier()  # the row's children are pushed before its batch row's ticket
        i_b = i_r // W
        p_ticket = tickets + tl.num_programs(0) + i_b
        if tl.atomic_add(p_ticket, 1, sem="acq_rel", scope="gpu") == W - 1:
            tl.store(p_ticket, 0)
            pop_row(
                i_b.to(tl.int64), p_f_score, p_f_item, p_f_logp, count, nodes, logps, valid, step, node_out, grow_out,
                score_out, F, N, DEPTH, P_W, B, p_stride_fs, p_stride_fi, p_stride_fl, stride_nb, stride_lb, stride_vb,
                visible, prefix, cand_x, cand_qkv, k_buf, v_buf, x_out, q_out, mask_out, rope_cos, rope_sin,
                P, S_TOT, DM, HD, stride_visb, stride_viss, stride_cxb, stride_cxr, stride_cqb, stride_cqr,
                stride_kb, stride_kh, stride_ks, stride_vvb, stride_vvh, stride_vvs, BLOCK_F, BLOCK_W, BLOCK_S,
                BLOCK_DI, ROPE, True,
            )  # fmt: skip


def pool_push_pop(
    y: torch.Tensor, norm_weight: torch.Tensor, norm_bias: torch.Tensor | None, eps: float, table: torch.Tensor,
    pool_ids: torch.Tensor, pool_prior: torch.Tensor, pool: torch.Tensor, c: int,
    f_score: torch.Tensor, f_item: torch.Tensor, f_logp: torch.Tensor, node_ids: torch.Tensor, grow: torch.Tensor,
    score: torch.Tensor, depth: torch.Tensor,
    count: torch.Tensor, nodes: torch.Tensor, logps: torch.Tensor, valid: torch.Tensor, n: int, max_depth: int,
    w: int, visible: torch.Tensor, prefix_mask: torch.Tensor, cand_x: torch.Tensor, cand_qkv: torch.Tensor,
    k_buf: torch.Tensor, v_buf: torch.Tensor, layer: int, prefix_len: int, rope_cos: torch.Tensor | None,
    rope_sin: torch.Tensor | None,
    tickets: torch.Tensor,  # [>= B w + B] int32, zero (and left zero)
) -> tuple[torch.Tensor, ...]:
    """`pool_top(y, ..., c, push=(f_score, ..., depth))`, then `frontier_pop_inputs(f_score, ..., count, ...)`: the next
    pop's seven outputs (module docstring)."""
    push = (f_score, f_item, f_logp, node_ids, grow, score, depth)
    _, logits_args, top_args, grid, (block_k, block_d, block_kall, block_c) = tail_launch_args(
        y, norm_weight, norm_bias, eps, table, pool_ids, pool_prior, pool, c, push)  # fmt: skip
    outs, pop_args, pop_blocks = pop_launch_args(f_score, f_item, f_logp, count, nodes, logps, valid, n, max_depth, w,
                                                 visible, prefix_mask, cand_x, cand_qkv, k_buf, v_buf, layer,
                                                 prefix_len, rope_cos, rope_sin)  # fmt: skip
    b = f_score.shape[0]
    if grid[0] != b * w:
        raise ValueError(f"pool_push_pop: the tail's {grid[0]} node rows must be the pop's B w = {b} x {w}")
    if tickets.dtype != torch.int32 or tickets.numel() < grid[0] + b or not tickets.is_contiguous():
        raise ValueError(f"pool_push_pop: tickets must be a contiguous int32 tensor of >= {grid[0] + b} zeros")
    if grid[0] == 0:
        return outs
    blocks = dict(BLOCK_F=pop_blocks["BLOCK_F"], BLOCK_W=pop_blocks["BLOCK_W"], BLOCK_S=pop_blocks["BLOCK_S"],
                  BLOCK_DI=pop_blocks["BLOCK_D"], ROPE=pop_blocks["ROPE"])  # fmt: skip
    _pool_push_pop_kernel[grid](
        *logits_args, *top_args, *pop_args, tickets, HAS_BIAS=norm_bias is not None, BLOCK_K=block_k,
        BLOCK_D=block_d, BLOCK_KALL=block_kall, BLOCK_C=block_c, **blocks, num_warps=POP_WARPS,
        **pdl_launch(y.device),
    )  # fmt: skip
    return outs
