"""The `weaver` builder on the device: the host best-first search (`weaver_host`) as tensor ops, sync-free.

Same search, same tree, no host work per node: a speculative round can be captured in one CUDA graph.
Per row the frontier is a fixed tensor [B, F] (score, parent node, token, log p, depth, candidate-table
row; score -inf = empty), with F = max(N * c, w): the children of node i live in columns i*c .. i*c + c - 1 (a node is
expanded at most once, so a column is written once). One pop round:

    take the best w frontier entries (topk_last, sorted), keep the first min(w, budget - count) finite
    ones, append them as nodes count+1, count+2, ... (a scatter at per-row offsets: the host's pop order)
    run ONE batched adapter step for them (entries that do not grow go to scratch slots N .. N+w-1,
    exactly as the host pads its calls) and scatter each grown node's top-c children into its columns.

Scores are float64 sums of float32 log-probs, as on the host, so both builders pop the same entries in
the same order and return identical trees (ties aside: the host breaks them by push order, torch.topk does
not; on CUDA `topk_last` is a Triton kernel that takes the lowest column first, which is push order).

On CUDA, when the round has the adapter's candidate table, the pop, the nodes' inputs and the push run as
three Triton launches around the adapter's step (`weaver.kernels.weaver_frontier`, `WeaverAdapter.step_top_prepared`):
the same loop, ~20 small kernels a step fewer; the tensor ops below stay the reference (tests run both).

Rounds. The loop runs `weaver_search_rounds(budget', w, D', c)` times, a function of the sizes only
(budget' = N - 1). A host round pops w nodes, or finishes the row, or drains the frontier (pops all of
it, fewer than w). If every expanded node pushes c finite children, the frontier after m pops holds
c(1 + e) - m entries, e = popped nodes above depth D'; when the smallest value this can take over
prefix-closed node sets stays >= min(w, budget' - m) at every m = 0, w, 2w, ..., no round drains and
ceil(budget'/w) rounds suffice. Otherwise: the frontier's shallowest depth never decreases and every
draining round raises it, so at most D' - 1 rounds drain before the last one; with one pop per draining
round that is floor((budget' - 1 - j)/w) + j + 1 rounds, j = min(D' - 1, budget' - 1). Children whose
log-prob is -inf (masked drafter logits) are dropped as on the host; they can only make the first
bound short, and then the device tree is the host's first pop rounds (a smaller valid tree).
"""

from __future__ import annotations

import functools
import math
import os

import torch

from weaver.kernels.topk import topk_last
from weaver.kernels.weaver_frontier import frontier_kernels_ready, frontier_pop, frontier_pop_inputs, frontier_push
from weaver.speculative.builders import register_builder
from weaver.speculative.tree import DraftTree
from weaver.speculative.weaver import WeaverAdapter, WeaverRound
from weaver.speculative.weaver_builder import plan_weaver

__all__ = ["build_weaver_device", "weaver_search_rounds"]

_NEG_INF = float("-inf")
# the pop / node-input / push bookkeeping as Triton launches (weaver.kernels.weaver_frontier): None = on CUDA
# when the round has a candidate table; True / False force it (tests run it under the Triton interpreter);
# WEAVER_FRONTIER_KERNELS=0 / 1 sets it
FRONTIER_KERNELS: bool | None = {"0": False, "1": True}.get(os.environ.get("WEAVER_FRONTIER_KERNELS", ""))
# the Triton loop pushes each step's children inside the scoring tail's second launch (one launch less a step);
# WEAVER_FUSED_PUSH=0 pushes them with a launch of their own after it
FUSED_PUSH = os.environ.get("WEAVER_FUSED_PUSH", "1") != "0"
# ... and runs each step's node inputs inside the pop's launch (one launch less a step); WEAVER_FUSED_POP=0
# gives them a launch of their own
FUSED_POP = os.environ.get("WEAVER_FUSED_POP", "1") != "0"


def _frontier_kernels(state: WeaverRound) -> bool:
    if state.cand_x is None:
        return False
    return frontier_kernels_ready(state.visible) if FRONTIER_KERNELS is None else FRONTIER_KERNELS


def _fewest_expanded(m: int, c: int, depth: int) -> int:
    """Lower bound on e, the nodes above depth D' among m nodes of a prefix-closed set of the c-ary trie.

    With x nodes at depth D' (the only ones not expanded), e = m - x. They hang under y >= x / c nodes at
    depth D'-1, which need ceil(y / c^i) ancestors i levels up: e >= cost(y) = sum_{i < D'-1} ceil(y / c^i).
    So e >= min over y >= 0 of max(cost(y), m - c*y) (y = 0: every node expanded, e = m).
    """
    if depth == 1:
        return 0
    best = m  # x = 0: every node expanded
    for parents_bottom in range(1, m + 1):  # y nodes at depth D'-1 hold up to c*y leaves
        cost = sum(-(-parents_bottom // c**i) for i in range(depth - 1))
        if cost >= best:
            break
        best = min(best, max(cost, m - c * parents_bottom))
    return best


@functools.lru_cache(maxsize=256)
def weaver_search_rounds(nodes: int, width: int, depth: int, c: int) -> int:
    """Pop rounds that cover every host search of `nodes` non-root nodes (static: see the module docstring)."""
    if nodes <= 0:
        return 0
    no_drain = all(c * (1 + _fewest_expanded(m, c, depth)) - m >= min(width, nodes - m) for m in range(0, nodes, width))
    if no_drain:
        return math.ceil(nodes / width)
    drains = min(depth - 1, nodes - 1)
    return (nodes - 1 - drains) // width + drains + 1


class _Frontier:
    """Per-row frontier of candidate children: score [B, F + 1] float64 (-inf = empty), item [B, F + 1, 4]
    (parent node, token, depth, candidate-table row), logp [B, F + 1]. Column F is a sink for entries that
    are not pushed: it holds junk, and `pop` only ever looks at columns 0 .. F - 1."""

    def __init__(self, batch: int, size: int, width: int, c: int, device: torch.device) -> None:
        self.score = torch.full((batch, size + 1), _NEG_INF, dtype=torch.float64, device=device)
        self.item = torch.zeros(batch, size + 1, 4, dtype=torch.long, device=device)
        self.logp = torch.zeros(batch, size + 1, dtype=torch.float32, device=device)
        self.sink = size
        self.lane = torch.arange(width, device=device)  # [w]
        self.child = torch.arange(c, device=device)  # [c]

    def pop(self, room: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The best w entries per row, of which the first `room` [B] finite ones are taken (and emptied).

        Returns take [B, w] bool (a prefix of each row), score [B, w], item [B, w, 4], log p [B, w].
        """
        score, col = topk_last(self.score[:, : self.sink], self.lane.shape[0])  # [B, w], descending
        take = (score > _NEG_INF) & (self.lane < room[:, None])  # [B, w]
        self.score.scatter_(1, col, torch.where(take, _NEG_INF, score))
        item = self.item.gather(1, col[..., None].expand(-1, -1, 4))
        return take, score, item, self.logp.gather(1, col)

    def push(
        self,
        node: torch.Tensor,  # [B, w] node id of each grown entry
        grow: torch.Tensor,  # [B, w] bool: entries whose children are pushed
        depth: torch.Tensor,  # [B, w] depth of the children
        score: torch.Tensor,  # [B, w, c] float64 child scores (-inf = dropped)
        token: torch.Tensor,  # [B, w, c]
        logp: torch.Tensor,  # [B, w, c] float32
        cand: torch.Tensor,  # [B, w, c] candidate-table rows
    ) -> None:
        """Write each grown node's children into its own columns node*c .. node*c + c - 1."""
        b, w, c = score.shape
        keep = grow[..., None] & (score > _NEG_INF)  # [B, w, c]
        col = torch.where(keep, node[..., None] * c + self.child, self.sink).view(b, w * c)
        item = torch.stack([node[..., None].expand(b, w, c), token, depth[..., None].expand(b, w, c), cand], dim=-1)
        self.score.scatter_(1, col, score.view(b, w * c))  # dropped entries land in the sink, which pop never reads
        self.item.scatter_(1, col[..., None].expand(b, w * c, 4), item.view(b, w * c, 4))
        self.logp.scatter_(1, col, logp.reshape(b, w * c))


def _children(
    adapter: WeaverAdapter,
    state: WeaverRound,
    node: torch.Tensor,  # [B, w] node ids (= adapter slots)
    grow: torch.Tensor,  # [B, w] bool: entries that are real nodes to score
    item: torch.Tensor,  # [B, w, 4] parent, token, depth, candidate-table row of each node
    score: torch.Tensor,  # [B, w] float64 cumulative score of each node
    scratch: torch.Tensor,  # [w] slots N .. N + w - 1
    c: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One batched adapter step; each grown node's top-c children: score (float64), token, log p,
    candidate-table row, [B, w, c].

    Entries that do not grow are padded like the host does: a scratch slot, token 0, no parent, depth 0
    (candidate row 0).
    """
    parent, token, depth, cand = (torch.where(grow, t, pad) for t, pad in zip(item.unbind(-1), (-1, 0, 0, 0)))
    slot = torch.where(grow, node, scratch)
    top_lp, tokens, cands = adapter.step_top(state, slot, token, parent, depth, c, cand)  # [B, w, c]
    return score[..., None] + top_lp.double(), tokens, top_lp, cands


@register_builder("weaver")
@torch.no_grad()
def build_weaver_device(
    root: torch.Tensor,  # [B] long
    marginals_logits: torch.Tensor,  # [B, D, V] drafter logits; row d: depth d+1
    budget: int,
    *,
    adapter: WeaverAdapter | None = None,
    target_hidden: torch.Tensor | None = None,  # [B, Ht]
    draft_hidden: torch.Tensor | None = None,  # [B, D, Ht]
    w: int | None = None,
    c: int = 8,
    pool_size: int | None = None,
    **context: object,
) -> DraftTree:
    """The `weaver_host` tree built with tensor ops only (no host sync), for CUDA-graph capture.

    Same arguments, defaults and output as `weaver_builder.build_weaver`; a fixed number of pop rounds
    (`weaver_search_rounds`), each one adapter step of [B, w] nodes.
    """
    plan = plan_weaver(root, marginals_logits, budget, adapter, target_hidden, draft_hidden, w, c, pool_size, context)
    B, depth, c, width, n = root.shape[0], plan.depth, plan.c, plan.width, plan.n
    if n == 1:
        return DraftTree.root_only(root)
    state = plan.begin(marginals_logits, root)
    dev = state.visible.device
    rows = torch.arange(B, device=dev)[:, None]
    frontier = _Frontier(B, max(n * c, width), width, c, dev)
    lane, scratch = frontier.lane, n + frontier.lane  # [w]

    # nodes: item [B, N + w, 4] (parent, token, depth, candidate row), node i in column i (= its adapter
    # slot); columns N.. receive the popped entries that are not taken
    nodes = torch.zeros(B, n + width, 4, dtype=torch.long, device=dev)
    nodes[:, :, 0] = -1
    nodes[:, 0, 1] = root.to(dev)
    valid = torch.zeros(B, n + width, dtype=torch.bool, device=dev)
    valid[:, 0] = True
    logps = torch.zeros(B, n + width, dtype=torch.float32, device=dev)
    count = torch.zeros(B, dtype=torch.long, device=dev)  # non-root nodes so far

    # the root: entry 0 of the first adapter step
    first = (lane == 0).expand(B, width)
    zeros = torch.zeros(B, width, dtype=torch.long, device=dev)
    score = torch.zeros(B, width, dtype=torch.float64, device=dev)
    s, tok, lp, cand = _children(plan.adapter, state, zeros, first, nodes[:, :width], score, scratch, c)
    frontier.push(zeros, first, zeros + 1, s, tok, lp, cand)

    rounds = weaver_search_rounds(n - 1, width, depth, c)
    if _frontier_kernels(state):  # the loop below as three Triton launches around the adapter's step
        f = frontier
        for _ in range(rounds):
            pop = (f.score, f.item, f.logp, count, nodes, logps, valid, n, depth, width)
            if FUSED_POP:  # (x, q, mask) of the node inputs follow the pop's results
                popped = frontier_pop_inputs(*pop, state.visible, state.prefix_mask, state.cand_x, state.cand_qkv,
                                             state.k, state.v, 0, state.prefix_len)  # fmt: skip
            else:
                popped = frontier_pop(*pop)
            step, node, grow, score = popped[:4]
            inputs = tuple(popped[4:]) or None
            if FUSED_PUSH:
                plan.adapter.step_top_prepared(state, step, c, push=(f.score, f.item, f.logp, node, grow, score),
                                               inputs=inputs)  # fmt: skip
            else:
                top_lp, top_tok, top_ix = plan.adapter.step_top_prepared(state, step, c, inputs=inputs)
                frontier_push(f.score, f.item, f.logp, node, grow, score, step, top_lp, top_tok, top_ix, plan.k)
        rounds = 0
    for _ in range(rounds):
        # 1) pop: the best min(w, budget' - count) entries, appended at count+1, count+2, ...
        take, score, item, logp = frontier.pop((n - 1) - count)
        node = count[:, None] + 1 + lane  # [B, w]
        dst = torch.where(take, node, scratch)
        nodes[rows, dst] = item
        logps[rows, dst] = logp
        valid[rows, dst] = take
        count = count + take.sum(1)
        # 2) grow: the popped nodes above depth D' of rows that still have room (as the host does)
        node_depth = item[..., 2]
        grow = take & (node_depth < depth) & (count < n - 1)[:, None]
        s, tok, lp, cand = _children(plan.adapter, state, node, grow, item, score, scratch, c)
        frontier.push(node, grow, node_depth + 1, s, tok, lp, cand)

    parents, tokens, depths, _ = nodes[:, :n].unbind(-1)
    out = (tokens, parents, depths, valid[:, :n], logps[:, :n])
    return DraftTree(*(t.to(root.device) for t in out))
