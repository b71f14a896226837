"""The `ddtree` builder on the device: DDTree's best-first tree as D' top-k calls, no host sync.

The host builder (`ddtree_host`) pops a heap `budget` times. Its result is the set of the budget' best
nodes of the k-ary trie under the factorized score s(path) = sum_d log q_d(x_d) (budget' = N - 1), in
descending score order: a child never outscores its parent (log q <= 0), so that set is prefix-closed.
No adapter runs between pops, so the same set can be found level by level instead of pop by pop:

    level 1:  the top-min(budget', k) depth-1 paths (the top tokens of q_1)
    level d:  the top-min(budget' - d + 1, ...) of {p + x : p in level d-1, x in the top-k of q_d}
    tree:     the best budget' entries of all levels together (stable sort, shallow levels first)

Each level holds the best depth-d paths of the whole trie: if a depth-d path p.x is among the L best
depth-d paths, fewer than L depth-(d-1) paths beat p (each one extended by the best token would beat
p.x), so p is in level d-1. The budget' best nodes overall hold at most budget' - d + 1 depth-d nodes
(each has d - 1 ancestors in the set) and every depth-d path better than one of them, so they are among
the budget' - d + 1 best of their depth. Ties keep the tree valid: a node equal to its parent sorts
after it (shallower levels come first in the stable sort) and is built from a parent in the list.

D' = min(D, budget') sequential top-k calls of at most [B, budget' * k] entries, one sort of [B, D' * budget'],
and gathers; the node order is the host's pop order (descending score), so the trees are identical
(ties aside: the host breaks them by rank path).
"""

from __future__ import annotations

import torch

from weaver.speculative.builders import check_inputs, register_builder, trie_size
from weaver.speculative.tree import DraftTree

__all__ = ["build_ddtree_device"]

_NEG_INF = float("-inf")


@register_builder("ddtree")
@torch.no_grad()
def build_ddtree_device(
    root: torch.Tensor,  # [B] long
    marginals_logits: torch.Tensor,  # [B, D, V]
    budget: int,
    topk: int | None = None,
    **context: object,
) -> DraftTree:
    """The `ddtree_host` tree built with tensor ops only (no host sync), for CUDA-graph capture.

    Same arguments and output as `builders.build_ddtree`: k = min(budget, V) (or min(topk, V)) tokens
    per depth, N = 1 + min(budget, k + ... + k^D), nodes in the host's pop order.
    """
    check_inputs(root, marginals_logits, budget)
    if topk is not None and topk < 1:
        raise ValueError(f"topk must be >= 1, got {topk}")
    B, D, V = marginals_logits.shape
    k = min(budget if topk is None else topk, V)
    nodes = trie_size(budget, D, k)  # budget'
    if nodes == 0:
        return DraftTree.root_only(root)
    dev = marginals_logits.device
    logq = torch.log_softmax(marginals_logits.float(), dim=-1)  # [B, D, V]
    top_lq, top_ids = torch.topk(logq, k, dim=-1)  # [B, D, k], descending
    top_lq = torch.where(top_lq.isnan(), _NEG_INF, top_lq)  # an all -inf marginal gives NaN: never proposed

    # 1) levels: the best depth-(d+1) paths; at most nodes - d of them fit under their d ancestors
    lq64 = top_lq.double()
    scores, flats = [], []  # per level: [B, L] scores and index parent * k + rank (parent: in level d-1)
    prev = torch.zeros(B, 1, dtype=torch.float64, device=dev)  # level 0: the root
    for d in range(min(D, nodes)):
        cand = (prev[:, :, None] + lq64[:, d, None, :]).flatten(1)  # [B, L_{d-1} * k]
        prev, flat = torch.topk(cand, min(nodes - d, cand.shape[1]), dim=1)  # [B, L_d]
        scores.append(prev)
        flats.append(flat)
    starts = [0]
    for s in scores:
        starts.append(starts[-1] + s.shape[1])  # column where each level starts

    # 2) per candidate (levels concatenated): score, parent's candidate index (-1: the root), depth, token
    score = torch.cat(scores, dim=1)  # [B, M]
    flat = torch.cat(flats, dim=1)  # [B, M]
    depth = torch.cat([torch.full_like(f, d + 1) for d, f in enumerate(flats)], dim=1)  # [B, M]
    level_start = torch.cat([torch.full_like(f, starts[max(d - 1, 0)]) for d, f in enumerate(flats)], dim=1)
    parent = torch.where(depth > 1, flat // k + level_start, -1)  # [B, M]
    flat_rank = (depth - 1) * k + flat % k  # index into top_lq / top_ids flattened over (depth, rank)
    token = top_ids.flatten(1).gather(1, flat_rank)
    lq = top_lq.flatten(1).gather(1, flat_rank)

    # 3) the best `nodes` candidates, best first (stable: a tie with an ancestor keeps the ancestor first)
    order = torch.sort(score, dim=1, descending=True, stable=True).indices[:, :nodes]  # [B, nodes]
    position = torch.full_like(score, 0, dtype=torch.long).scatter_(
        1, order, torch.arange(1, nodes + 1, device=dev).expand(B, nodes)
    )  # [B, M]: node id of each chosen candidate (0 = not chosen)
    valid = score.gather(1, order) > _NEG_INF  # [B, nodes]
    par = parent.gather(1, order)  # [B, nodes]
    par_node = torch.where(par >= 0, position.gather(1, par.clamp(min=0)), 0)

    def column(t: torch.Tensor, pad: float | int) -> torch.Tensor:
        return torch.where(valid, t.gather(1, order), pad)

    zero = torch.zeros(B, 1, dtype=torch.long, device=dev)
    out = DraftTree(
        tokens=torch.cat([root[:, None].long().to(dev), column(token, 0)], dim=1),  # [B, N]
        parents=torch.cat([zero - 1, torch.where(valid, par_node, -1)], dim=1),
        depth=torch.cat([zero, column(depth, 0)], dim=1),
        valid=torch.cat([zero == 0, valid], dim=1),
        draft_logprobs=torch.cat([zero.float(), column(lq, 0.0)], dim=1),
    )
    return out.to(root.device)
