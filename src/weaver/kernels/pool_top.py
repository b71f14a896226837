"""The Weaver adapter step's tail (pool scoring, log-softmax, top-c children) as custom ops (two Triton launches).

    top_lp, top_tok, top_ix = fused_pool_top(y, ..., c, options)                  # = weaver.ops.pool_top.pool_top
    fused_pool_top_push(y, ..., c, f_score, f_item, f_logp, node_ids, grow, score, depth, options)

The second form also pushes the children into the device weaver builder's frontier (inside the tail's second
launch): `weaver.ops.pool_top.pool_top`, then `weaver.ops.weaver_frontier.frontier_push` with the children's
candidate-table rows 1 + pool * K + index. Where `use_kernel(options, y)` says no, both run those references;
the tests compare the two. The ops (`weaver::pool_top`, `weaver::pool_top_push`, with fake impls for tracing)
are what a torch.compile'd build stage sees; eager calls launch the kernels directly. This module imports
without triton: the kernels load on first use.
"""

from __future__ import annotations

import torch

from weaver.kernels.dispatch import launch, use_kernel
from weaver.ops.pool_top import pool_top
from weaver.ops.weaver_frontier import frontier_push
from weaver.options import RuntimeOptions

__all__ = ["fused_pool_top", "fused_pool_top_push", "pool_top_op", "pool_top_push_op"]

_MODULE = "weaver.kernels.triton.pool_top"


@torch.library.custom_op("weaver::pool_top", mutates_args=())
def pool_top_op(
    y: torch.Tensor, norm_weight: torch.Tensor, norm_bias: torch.Tensor | None, eps: float, table: torch.Tensor,
    pool_ids: torch.Tensor, pool_prior: torch.Tensor, pool: torch.Tensor, c: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`weaver.kernels.triton.pool_top.pool_top` as a custom op."""
    from weaver.kernels.triton.pool_top import pool_top as kernel

    return kernel(y, norm_weight, norm_bias, eps, table, pool_ids, pool_prior, pool, c)


@pool_top_op.register_fake
def _pool_top_fake(y, norm_weight, norm_bias, eps, table, pool_ids, pool_prior, pool, c):
    r = y.shape[0]
    return tuple(y.new_empty(r, c, dtype=dt) for dt in (torch.float32, torch.int64, torch.int64))


@torch.library.custom_op("weaver::pool_top_push", mutates_args=("f_score", "f_item", "f_logp"))
def pool_top_push_op(
    y: torch.Tensor, norm_weight: torch.Tensor, norm_bias: torch.Tensor | None, eps: float, table: torch.Tensor,
    pool_ids: torch.Tensor, pool_prior: torch.Tensor, pool: torch.Tensor, c: int, f_score: torch.Tensor,
    f_item: torch.Tensor, f_logp: torch.Tensor, node_ids: torch.Tensor, grow: torch.Tensor, score: torch.Tensor,
    depth: torch.Tensor,
) -> None:
    """`weaver.kernels.triton.pool_top.pool_top_push` as a custom op that writes the builder's frontier (no argument
    may be called `node`: inductor's post-grad pass passes its own `node` keyword next to the op's arguments)."""
    from weaver.kernels.triton.pool_top import pool_top_push

    pool_top_push(y, norm_weight, norm_bias, eps, table, pool_ids, pool_prior, pool, c, f_score, f_item, f_logp,
                  node_ids, grow, score, depth)  # fmt: skip


@pool_top_push_op.register_fake
def _pool_top_push_fake(y, norm_weight, norm_bias, eps, table, pool_ids, pool_prior, pool, c, *push):
    return None


def fused_pool_top(
    y: torch.Tensor,  # [R, d] adapter outputs, R = B W node rows
    norm_weight: torch.Tensor,  # [d] out_norm
    norm_bias: torch.Tensor | None,
    eps: float,
    table: torch.Tensor,  # [V, d] the adapter's residual_lm_head
    pool_ids: torch.Tensor,  # [B, D, K]
    pool_prior: torch.Tensor,  # [B, D, K]
    pool: torch.Tensor,  # [R] each row's pool
    c: int,
    options: RuntimeOptions,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top-c children: log-probs [R, c], tokens [R, c] and pool indices [R, c] (`weaver.ops.pool_top.pool_top`)."""
    args = (y, norm_weight, norm_bias, eps, table, pool_ids, pool_prior, pool, c)
    if use_kernel(options, y):
        return launch(pool_top_op, _MODULE, "pool_top", *args)
    return pool_top(*args)


def fused_pool_top_push(
    y: torch.Tensor, norm_weight: torch.Tensor, norm_bias: torch.Tensor | None, eps: float, table: torch.Tensor,
    pool_ids: torch.Tensor, pool_prior: torch.Tensor, pool: torch.Tensor, c: int,
    f_score: torch.Tensor,  # [B, F + 1] the builder's frontier (written)
    f_item: torch.Tensor,  # [B, F + 1, 4]
    f_logp: torch.Tensor,  # [B, F + 1]
    node_ids: torch.Tensor,  # [B, w] the expanded nodes
    grow: torch.Tensor,  # [B, w] bool: those whose children are pushed
    score: torch.Tensor,  # [B, w] float64: their cumulative scores
    depth: torch.Tensor,  # [B, w]: their depths
    options: RuntimeOptions,
) -> None:
    """`fused_pool_top`'s children pushed straight into the frontier (`weaver.ops.weaver_frontier.frontier_push`)."""
    args = (y, norm_weight, norm_bias, eps, table, pool_ids, pool_prior, pool, c)
    if use_kernel(options, y):
        launch(pool_top_push_op, _MODULE, "pool_top_push", *args, f_score, f_item, f_logp, node_ids, grow, score, depth)
        return
    b, w = node_ids.shape
    top_lp, top_tok, top_ix = (t.view(b, w, c) for t in pool_top(*args))
    cand = 1 + pool.view(b, w, 1) * pool_ids.shape[2] + top_ix  # the children's candidate-table rows
    frontier_push(f_score, f_item, f_logp, node_ids, grow, score, depth, top_lp, top_tok, cand)
