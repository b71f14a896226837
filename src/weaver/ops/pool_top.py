"""The Weaver adapter step's scoring tail (DESIGN §7): pool logits, log-softmax over the pool, top-c children.

    logits = score_pool(y, norm_weight, norm_bias, eps, table, ids, prior)           # [..., K]
    top_lp, top_tok, top_ix = pool_top(y, norm_weight, norm_bias, eps, table, pool_ids, pool_prior, pool, c)

With q = weaver_norm(y) (the adapter's out_norm) and table = W_lm @ lm_head_query_in ([V, d], the adapter's
`residual_lm_head`), a candidate c of the pool scores prior(c) + table[c] . q = prior(c) + <W_lm[c],
lm_head_query_in(q)>: K gathered rows, never a full-vocabulary projection; a candidate id < 0 (a padded pool)
scores -inf. Rounding points: the norm cast
to y's dtype, the product in the table's dtype, the sum in float32. `weaver.kernels.triton.pool_top` is the
fused form of `pool_top` (same arguments).
"""

from __future__ import annotations

import torch

from weaver.ops.weaver_norm import weaver_norm

__all__ = ["pool_top", "score_pool"]


def score_pool(
    y: torch.Tensor,  # [..., d] adapter outputs
    norm_weight: torch.Tensor,  # [d] out_norm weight
    norm_bias: torch.Tensor | None,  # [d] out_norm bias, or None
    eps: float,
    table: torch.Tensor,  # [V, d] W_lm @ lm_head_query_in
    ids: torch.Tensor,  # [..., K] long: each row's pool candidates
    prior: torch.Tensor,  # [..., K] their raw drafter logits
) -> torch.Tensor:
    """Pool logits prior + table[ids] @ weaver_norm(y), float32 [..., K] (differentiable); ids < 0 (padding) score
    -inf."""
    query = weaver_norm(y, norm_weight, norm_bias, eps)  # [..., d]
    ids = ids.to(table.device)
    rows = table[ids.clamp(min=0)]  # [..., K, d]
    residual = torch.matmul(rows, query[..., None].to(rows.dtype)).squeeze(-1)  # [..., K]
    logits = prior.float().to(residual.device) + residual.float()
    return logits.masked_fill(ids < 0, float("-inf"))


def pool_top(
    y: torch.Tensor,  # [R, d] adapter outputs, R = B W node rows (row r in batch row r // W)
    norm_weight: torch.Tensor,
    norm_bias: torch.Tensor | None,
    eps: float,
    table: torch.Tensor,  # [V, d]
    pool_ids: torch.Tensor,  # [B, D, K] candidate token ids per depth
    pool_prior: torch.Tensor,  # [B, D, K] their raw drafter logits
    pool: torch.Tensor,  # [R] long: each row's pool (depth row of pool_ids)
    c: int,  # children kept per row
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each row's best c children: log-probs [R, c] float32 (descending), token ids [R, c] and their indices
    in the pool [R, c] (int64)."""
    r, b = y.shape[0], pool_ids.shape[0]
    batch_row = torch.arange(r, device=pool.device) // max(r // max(b, 1), 1)  # [R]
    ids = pool_ids[batch_row, pool]  # [R, K]
    logits = score_pool(y, norm_weight, norm_bias, eps, table, ids, pool_prior[batch_row, pool])
    top_lp, top_ix = torch.topk(torch.log_softmax(logits, dim=-1), c, dim=-1)
    return top_lp, ids.gather(-1, top_ix), top_ix
