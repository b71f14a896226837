"""The Weaver adapter step's tail (pool scoring, log-softmax, top-c children) as one custom op on CUDA.

    if fused_pool_top_ready(y): top_lp, top_tok, top_ix = fused_pool_top(y, ..., c)
    fused_pool_top_push(y, ..., c, f_score, f_item, f_logp, node_ids, grow, score, depth)  # the builder's push too

`weaver.speculative.weaver.WeaverAdapter.step_top` calls it on CUDA and runs its own torch path (`score_pool`,
log-softmax, top-k) elsewhere; the test compares the two. The op (`weaver::pool_top`, with a fake impl for
tracing) is what a torch.compile'd build stage sees; eager calls launch the kernels directly. This module
imports without triton: the kernels load on first use.
"""

from __future__ import annotations

import torch

from weaver.kernels.dispatch import launch, triton_ready

__all__ = ["fused_pool_top", "fused_pool_top_push", "fused_pool_top_ready", "pool_top_op", "pool_top_push_op"]


@torch.library.custom_op("weaver::pool_top", mutates_args=())
def pool_top_op(
    y: torch.Tensor, norm_weight: torch.Tensor, norm_bias: torch.Tensor | None, eps: float, table: torch.Tensor,
    pool_ids: torch.Tensor, pool_prior: torch.Tensor, pool: torch.Tensor, c: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`weaver.kernels.triton.pool_top.pool_top` as a custom op."""
    from weaver.kernels.triton.pool_top import pool_top

    return pool_top(y, norm_weight, norm_bias, eps, table, pool_ids, pool_prior, pool, c)


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
    may be called `node`: see `weaver.kernels.weaver_frontier.frontier_push_op`)."""
    from weaver.kernels.triton.pool_top import pool_top_push

    pool_top_push(y, norm_weight, norm_bias, eps, table, pool_ids, pool_prior, pool, c, f_score, f_item, f_logp,
                  node_ids, grow, score, depth)  # fmt: skip


@pool_top_push_op.register_fake
def _pool_top_push_fake(y, norm_weight, norm_bias, eps, table, pool_ids, pool_prior, pool, c, *push):
    return None


def fused_pool_top_ready(y: torch.Tensor) -> bool:
    """The fused tail applies: y on CUDA and triton importable."""
    return y.is_cuda and triton_ready()


def fused_pool_top(
    y: torch.Tensor, norm_weight: torch.Tensor, norm_bias: torch.Tensor | None, eps: float, table: torch.Tensor,
    pool_ids: torch.Tensor, pool_prior: torch.Tensor, pool: torch.Tensor, c: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top-c children: log-probs [R, c], tokens [R, c] and pool indices [R, c] (`weaver.kernels.triton.pool_top`)."""
    args = (y, norm_weight, norm_bias, eps, table, pool_ids, pool_prior, pool, c)
    return launch(pool_top_op, "weaver.kernels.triton.pool_top", "pool_top", *args)


def fused_pool_top_push(*args) -> None:
    """The top-c children pushed straight into the device builder's frontier: `fused_pool_top`'s arguments, then
    (f_score, f_item, f_logp, node ids, grow, score, depth); see `weaver.kernels.triton.pool_top.pool_top_push`."""
    launch(pool_top_push_op, "weaver.kernels.triton.pool_top", "pool_top_push", *args)
