"""The Weaver adapter step's tail (pool scoring, log-softmax, top-c children) as one custom op on CUDA.

    if fused_pool_top_ready(y): top_lp, top_tok, top_ix = fused_pool_top(y, ..., c)

`weaver.spec.weaver.WeaverAdapter.step_top` calls it on CUDA and runs its own torch path (`score_pool`,
log-softmax, top-k) elsewhere; the test compares the two. The op (`weaver::pool_top`, with a fake impl for
tracing) is what a torch.compile'd build stage sees; eager calls launch the kernels directly. This module
imports without triton: the kernels load on first use.
"""

from __future__ import annotations

import torch

from weaver.ops.dispatch import launch, triton_ready

__all__ = ["fused_pool_top", "fused_pool_top_ready", "pool_top_op"]


@torch.library.custom_op("weaver::pool_top", mutates_args=())
def pool_top_op(
    y: torch.Tensor, norm_weight: torch.Tensor, norm_bias: torch.Tensor | None, eps: float, table: torch.Tensor,
    pool_ids: torch.Tensor, pool_prior: torch.Tensor, pool: torch.Tensor, c: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`weaver.ops.triton.pool_top.pool_top` as a custom op."""
    from weaver.ops.triton.pool_top import pool_top

    return pool_top(y, norm_weight, norm_bias, eps, table, pool_ids, pool_prior, pool, c)


@pool_top_op.register_fake
def _pool_top_fake(y, norm_weight, norm_bias, eps, table, pool_ids, pool_prior, pool, c):
    r = y.shape[0]
    return tuple(y.new_empty(r, c, dtype=dt) for dt in (torch.float32, torch.int64, torch.int64))


def fused_pool_top_ready(y: torch.Tensor) -> bool:
    """The fused tail applies: y on CUDA and triton importable."""
    return y.is_cuda and triton_ready()


def fused_pool_top(
    y: torch.Tensor, norm_weight: torch.Tensor, norm_bias: torch.Tensor | None, eps: float, table: torch.Tensor,
    pool_ids: torch.Tensor, pool_prior: torch.Tensor, pool: torch.Tensor, c: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top-c children: log-probs [R, c], tokens [R, c] and pool indices [R, c] (see `weaver.ops.triton.pool_top`)."""
    args = (y, norm_weight, norm_bias, eps, table, pool_ids, pool_prior, pool, c)
    return launch(pool_top_op, "weaver.ops.triton.pool_top", "pool_top", *args)
