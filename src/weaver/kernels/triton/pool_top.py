"""The Weaver adapter step's tail in two Triton launches: pool scoring, then log-softmax + top-c children.

    top_lp, top_tok, top_ix = pool_top(y, norm_w, norm_b, eps, table, pool_ids, pool_prior, pool, c)

Per node row r (batch row b = r // W, pool row p = pool[r]) this is `weaver.ops.pool_top.pool_top`, with its
rounding points (norm in fp32 cast to y's dtype, the residual product in the table's dtype):

    q       = out_norm(y[r])                                        [d]
    logits  = pool_prior[b, p] + table[pool_ids[b, p]] @ q          [K]   (table = W_lm @ lm_head_query_in;
                                                                           -inf where an id < 0)
    top_lp, top_ix = topk(log_softmax(logits), c);  top_tok = pool_ids[b, p, top_ix]   (all three returned)

On the H200 the torch path is ~10 small kernels per adapter step (norm pieces, two gathers, a batched
GEMV, the prior add, log-softmax, top-k, the token gather), 17 steps a round. Launch 1 spreads the K
gathered rows over (row, K-block) programs; launch 2 holds a row's K logits in one program for the
log-sum-exp and the c selection rounds (`topk.select_top`: ties to the lowest pool index). With `push`, launch 2
also does the device builder's push for its row (`weaver.ops.weaver_frontier.frontier_push`; each row's children
own their frontier columns), so the builder's step needs no launch of its own for it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from weaver.kernels.triton._utils import check_device, pdl_launch, pdl_wait
from weaver.kernels.triton.decode import _round
from weaver.kernels.triton.topk import select_top
from weaver.kernels.triton.weaver_frontier import push_children

__all__ = ["pool_top", "pool_top_push"]


@triton.jit
def _pool_logits_kernel(
    y, norm_w, norm_b, table, ids, prior, pool, logits,
    W, K, D, eps,
    stride_y, stride_t, stride_ib, stride_id, stride_pb, stride_pd,
    HAS_BIAS: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr, PDL: tl.constexpr = False,
):
    if PDL:  # programmatic dependent launch: nothing is read before the wait
        pdl_wait()
    i_r = tl.program_id(0)
    i_k = tl.program_id(1)
    i_b = i_r // W
    p = tl.load(pool + i_r)
    o_d = tl.arange(0, BLOCK_D)
    m_d = o_d < D
    b_x = tl.load(y + i_r * stride_y + o_d, mask=m_d, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(b_x * b_x, axis=0) / D + eps)
    b_q = b_x * rstd * tl.load(norm_w + o_d, mask=m_d, other=0.0).to(tl.float32)
    if HAS_BIAS:
        b_q += tl.load(norm_b + o_d, mask=m_d, other=0.0).to(tl.float32)
    b_q = _round(b_q, y.dtype.element_ty)  # WeaverNorm hands back y's dtype
    o_k = i_k * BLOCK_K + tl.arange(0, BLOCK_K)
    m_k = o_k < K
    b_ids = tl.load(ids + i_b * stride_ib + p * stride_id + o_k, mask=m_k, other=0)
    m_id = b_ids >= 0  # a padded candidate (id < 0) scores -inf
    p_rows = table + tl.maximum(b_ids, 0).to(tl.int64)[:, None] * stride_t + o_d[None, :]
    b_rows = tl.load(p_rows, mask=(m_k & m_id)[:, None] & m_d[None, :], other=0.0).to(tl.float32)  # [BLOCK_K, BLOCK_D]
    b_dot = _round(tl.sum(b_rows * b_q[None, :], axis=1), table.dtype.element_ty)  # the product in the table's dtype
    b_prior = tl.load(prior + i_b * stride_pb + p * stride_pd + o_k, mask=m_k, other=0.0).to(tl.float32)
    tl.store(logits + i_r * K + o_k, tl.where(m_id, b_prior + b_dot, float("-inf")), mask=m_k)


@triton.jit
def _pool_top_kernel(
    logits, ids, pool, out_lp, out_tok, out_ix,
    f_score, f_item, f_logp, node, grow, score, depth,
    W, K, c,
    stride_ib, stride_id, stride_fs, stride_fi, stride_fl,
    BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr, PUSH: tl.constexpr = False, PDL: tl.constexpr = False,
):
    if PDL:  # programmatic dependent launch: nothing is read before the wait
        pdl_wait()
    i_r = tl.program_id(0)
    i_b = i_r // W
    p = tl.load(pool + i_r)
    o_k = tl.arange(0, BLOCK_K)
    m_k = o_k < K
    b_x = tl.load(logits + i_r * K + o_k, mask=m_k, other=float("-inf"))
    m = tl.max(b_x, axis=0)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    lse = m_safe + tl.log(tl.sum(tl.exp(b_x - m_safe), axis=0))
    b_val, b_idx = select_top(b_x, m_k, c, BLOCK_K, BLOCK_C, False)
    o_c = tl.arange(0, BLOCK_C)
    m_c = o_c < c
    b_tok = tl.load(ids + i_b * stride_ib + p * stride_id + b_idx, mask=m_c, other=0).to(tl.int64)
    b_lp = b_val - lse
    b_idx = b_idx.to(tl.int64)
    if PUSH:  # this row's node's children into the frontier (weaver.ops.weaver_frontier.frontier_push)
        push_children(
            f_score, f_item, f_logp, i_b, tl.load(node + i_r), tl.load(score + i_r),
            tl.load(grow + i_r + 0 * o_c) != 0,  # a [BLOCK_C] load: the interpreter rejects scalar-bool masks
            tl.load(depth + i_r) + 1, 1 + p * K, o_c, b_lp, b_tok, b_idx, m_c, c, stride_fs, stride_fi, stride_fl,
        )  # fmt: skip
    else:
        tl.store(out_lp + i_r * c + o_c, b_lp, mask=m_c)
        tl.store(out_tok + i_r * c + o_c, b_tok, mask=m_c)
        tl.store(out_ix + i_r * c + o_c, b_idx, mask=m_c)


def pool_top(
    y: torch.Tensor,  # [R, d] adapter outputs, R = B W node rows (row r in batch row r // W)
    norm_weight: torch.Tensor,  # [d] out_norm weight
    norm_bias: torch.Tensor | None,  # [d] out_norm bias, or None
    eps: float,
    table: torch.Tensor,  # [V, d] W_lm @ lm_head_query_in (the adapter's residual_lm_head), unit stride along d
    pool_ids: torch.Tensor,  # [B, D, K] candidate token ids per depth
    pool_prior: torch.Tensor,  # [B, D, K] their raw drafter logits
    pool: torch.Tensor,  # [R] long: each row's pool (depth row of pool_ids)
    c: int,  # children kept per row
    push: tuple[torch.Tensor, ...] | None = None,  # (f_score, f_item, f_logp, node ids, grow, score, depth)
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """Log-probs [R, c] fp32 (sorted descending), token ids [R, c] and pool indices [R, c] (int64) of each
    row's best c children.

    With `push` (the device builder's frontier [B, F + 1] / [B, F + 1, 4] / [B, F + 1] and the popped nodes'
    ids, grow flags, scores and depths [B, w]), the second launch pushes the children as
    `weaver.ops.weaver_frontier.frontier_push` does, with candidate-table rows 1 + pool * K + index, and returns
    None: one launch less per adapter step."""
    check_device(y, norm_weight, norm_bias, table, pool_ids, pool_prior, pool)
    r, d = y.shape
    b, _, k = pool_ids.shape
    if r % b or pool.shape != (r,) or pool_prior.shape != pool_ids.shape or table.shape[1] != d:
        raise ValueError(f"pool_top: y [B W, d], pool [B W], pool_ids / pool_prior [B, D, K], table [V, d]; got "
                         f"{tuple(y.shape)}, {tuple(pool.shape)}, {tuple(pool_ids.shape)}, {tuple(table.shape)}")
    if not 1 <= c <= min(k, 64):
        raise ValueError(f"pool_top needs 1 <= c <= min(K, 64), got c={c}, K={k}")
    y = y if y.stride(1) == 1 else y.contiguous()
    ids, prior = (t if t.stride(2) == 1 else t.contiguous() for t in (pool_ids, pool_prior))
    if table.stride(1) != 1:
        raise ValueError("pool_top needs the table with unit stride along d")
    logits = torch.empty(r, k, dtype=torch.float32, device=y.device)
    if push is None:
        outs = tuple(torch.empty(r, c, dtype=dt, device=y.device) for dt in (torch.float32, torch.int64, torch.int64))
        frontier = (logits,) * 7  # unused pointers
        f_strides = (0, 0, 0)
    else:
        outs, frontier = None, _push_args(push, b, r // b)
        f_strides = (frontier[0].stride(0), frontier[1].stride(0), frontier[2].stride(0))
    if r == 0:
        return outs
    block_d = triton.next_power_of_2(d)
    block_k = max(1, min(32, 8192 // block_d, triton.next_power_of_2(k)))  # <= 8K gathered values a program
    _pool_logits_kernel[(r, triton.cdiv(k, block_k))](
        y, norm_weight, norm_bias if norm_bias is not None else norm_weight, table, ids, prior, pool, logits,
        r // b, k, d, eps,
        y.stride(0), table.stride(0), ids.stride(0), ids.stride(1), prior.stride(0), prior.stride(1),
        HAS_BIAS=norm_bias is not None, BLOCK_K=block_k, BLOCK_D=block_d, num_warps=4, **pdl_launch(y.device),
    )
    _pool_top_kernel[(r,)](
        logits, ids, pool, *(outs or (logits,) * 3), *frontier,
        r // b, k, c,
        ids.stride(0), ids.stride(1), *f_strides,
        BLOCK_K=triton.next_power_of_2(k), BLOCK_C=max(2, triton.next_power_of_2(c)), PUSH=push is not None,
        num_warps=4, **pdl_launch(logits.device),
    )
    return outs


def pool_top_push(*args) -> None:
    """`pool_top(*args[:9], push=args[9:])`: pool_top's arguments, then the push's seven (f_score, f_item, f_logp,
    node ids, grow, score, depth), flat as the custom op `weaver::pool_top_push` passes them."""
    pool_top(*args[:9], push=tuple(args[9:]))


def _push_args(push: tuple[torch.Tensor, ...], b: int, w: int) -> tuple[torch.Tensor, ...]:
    """Check pool_top's `push` tuple; the frontier as given (written in place), the per-node rows flat [B w]."""
    f_score, f_item, f_logp, node, grow, score, depth = push
    check_device(*push)
    f1 = f_score.shape[1] if f_score.dim() == 2 else -1
    ok = (f_score.shape == (b, f1) and f_item.shape == (b, f1, 4) and f_logp.shape == (b, f1)
          and f_score.dtype == torch.float64 and f_logp.dtype == torch.float32 and f_item.dtype == torch.int64
          and f_score.stride(1) == 1 and f_logp.stride(1) == 1 and f_item.stride(1) == 4 and f_item.stride(2) == 1)
    if not ok:
        raise ValueError("pool_top push: frontier score [B, F] float64, item [B, F, 4] int64 (packed rows), "
                         f"logp [B, F] float32 with unit stride; got {tuple(f_score.shape)}, {tuple(f_item.shape)}, "
                         f"{tuple(f_logp.shape)}")  # fmt: skip
    rows = []
    for name, t in (("node ids", node), ("grow", grow), ("score", score), ("depth", depth)):
        if t.shape != (b, w):
            raise ValueError(f"pool_top push: {name} must be [{b}, {w}], got {tuple(t.shape)}")
        rows.append(t.contiguous().view(torch.uint8) if t.dtype == torch.bool else t.contiguous())
    return (f_score, f_item, f_logp, *rows)
