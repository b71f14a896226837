"""The `weaver` builder: batched best-first growth over cumulative Weaver log-probs (DESIGN §8).

Score of a node = sum over its root path of log p_weaver(x_t | root..x_{t-1}), the adapter's conditional
over the depth-t pool (top-K of the drafter's depth-t logits). Conditional log-probs are <= 0, so a child
never outscores its parent and best-first pops are prefix-closed and topological.

    run the adapter on the root                      -> pool distribution of depth 1
    push the root's top-c children into the frontier (score = parent score + log p)
    repeat: pop the best w frontier entries per row (fewer when the budget is nearly spent), append them as
            nodes; if some of them can still grow (depth < D' and the row's budget not spent), run ONE
            batched adapter step for them and push each one's top-c children
    until every row holds `budget` non-root nodes or its frontier is empty.

w = 1 is exact best-first: the tree is the `budget` best nodes of the top-c-children universe. w > 1
(paper code: w = ceil(budget/16)) trades exactness for about budget/w sequential adapter calls.
Siblings are distinct (top-c of K distinct candidates); candidates whose log-prob is -inf are dropped.
The output N = 1 + min(budget, c + c^2 + ... + c^D') with D' = min(D, max_depth) and c = min(c, K): a
function of the arguments and shapes only (`plan_weaver`, shared by both builders).

Reference (`build_weaver_reference`): the frontier is a Python heap per row (<= budget*c entries); per
adapter call a [5, B, w] block of slots/tokens/parents/depths/candidate rows goes to the device and a
[3, B, w, c] block of child log-probs/tokens/candidate rows comes back. The adapter's node slot of a tree
node is its node index (root 0); slots N .. N+w-1 are scratch for padding entries.

Device (`build_weaver`, the engine's): the same search with fixed tensors and a fixed number of pop rounds
(`weaver_search_rounds`), no host work per node and no host sync (`frontier.py`). Scores are float64 sums
of float32 log-probs, as in the reference, so both pop the same entries in the same order and return
identical trees (ties aside: the heap breaks them by push order, a top-k does not; the Triton top-k takes
the lowest column first, which is push order).

Rounds. A reference round pops w nodes, or finishes the row, or drains the frontier (pops all of it, fewer
than w). If every expanded node pushes c finite children, the frontier after m pops holds c(1 + e) - m
entries, e = popped nodes above depth D'; when the smallest value this can take over prefix-closed node
sets stays >= min(w, budget' - m) at every m = 0, w, 2w, ..., no round drains and ceil(budget'/w) rounds
suffice. Otherwise: the frontier's shallowest depth never decreases and every draining round raises it,
so at most D' - 1 rounds drain before the last one; with one pop per draining round that is
floor((budget' - 1 - j)/w) + j + 1 rounds, j = min(D' - 1, budget' - 1). Children whose log-prob is -inf
(masked drafter logits) are dropped as in the reference; they can only make the first bound short, and then
the device tree is the reference's first pop rounds (a smaller valid tree).
"""

from __future__ import annotations

import functools
import heapq
import math
from dataclasses import dataclass

import torch

from weaver.errors import GenerationConfigError
from weaver.kernels.dispatch import use_kernel
from weaver.options import DEFAULT_OPTIONS, RuntimeOptions
from weaver.speculative.builders import check_inputs, trie_size
from weaver.speculative.builders.frontier import Frontier, expand_root, grow_kernels, grow_reference
from weaver.speculative.tree import DraftTree
from weaver.speculative.weaver import WeaverAdapter, WeaverRound

# children pushed per expanded node. The paper's code pushes 8; 16 lets a flat conditional (chat, near the root)
# give a node as many children as the best-first search wants, as ddtree's unbounded siblings do: CPU, the shipped
# weights, the first 32 prompts of each evaluation workload, budget 64: macro tau 4.92 -> 4.99 (32: also 4.99;
# benchmarks/results/acceptance/cpu_session33_children/)
DEFAULT_CHILDREN = 16

__all__ = [
    "DEFAULT_CHILDREN", "WeaverPlan", "build_weaver", "build_weaver_reference", "plan_weaver", "weaver_search_rounds",
]  # fmt: skip

# A frontier entry of the reference: (-score, tie-break counter, parent node, token, log p under the parent,
# depth, candidate-table row)
_Entry = tuple[float, int, int, int, float, int, int]
# A node handed to the adapter: (entry index in its row's w-block, node id, token, parent node, depth,
# candidate-table row)
_Job = tuple[int, int, int, int, int, int]


@dataclass(frozen=True)
class WeaverPlan:
    """The static sizes of one weaver build, shared by the reference and the device builder (never data-dependent)."""

    adapter: WeaverAdapter
    target_hidden: torch.Tensor  # [B, Ht]
    draft_hidden: torch.Tensor  # [B, D', Ht]
    depth: int  # D' = min(D, max_depth): deepest node
    k: int  # K: pool candidates per depth
    c: int  # children pushed per expanded node (<= K)
    width: int  # w: nodes expanded per adapter call
    n: int  # N: output nodes per row, root included

    def begin(self, marginals_logits: torch.Tensor, root: torch.Tensor) -> WeaverRound:
        """Pools (top-K of the drafter's logits per depth, raw logits as prior), the adapter's prefix pass and
        its candidate table."""
        # [B, D', K] each; unsorted (any order names the same pool; the H200 skips a 19 us sort a round)
        prior, ids = torch.topk(marginals_logits[:, : self.depth].float(), self.k, dim=-1, sorted=False)
        return self.adapter.begin_round(
            self.target_hidden, self.draft_hidden, ids, prior, self.n + self.width, root=root
        )


def plan_weaver(
    root: torch.Tensor,
    marginals_logits: torch.Tensor,
    budget: int,
    adapter: object,
    target_hidden: torch.Tensor | None,
    draft_hidden: torch.Tensor | None,
    w: int | None,
    c: int,
    pool_size: int | None,
) -> WeaverPlan:
    """Check a weaver builder's arguments and resolve D', K, c, w and N (one place for both builders)."""
    check_inputs(root, marginals_logits, budget)
    if not isinstance(adapter, WeaverAdapter) or target_hidden is None or not isinstance(draft_hidden, torch.Tensor):
        raise GenerationConfigError(
            "the weaver builder needs adapter=WeaverAdapter, target_hidden=[B, Ht] and draft_hidden=[B, D, Ht]"
        )
    if c < 1 or (w is not None and w < 1) or (pool_size is not None and pool_size < 1):
        raise ValueError(f"w, c and pool_size must be >= 1, got w={w}, c={c}, pool_size={pool_size}")
    _, D, V = marginals_logits.shape
    depth = min(D, adapter.config.max_depth)  # D': deepest node
    if draft_hidden.dim() != 3 or draft_hidden.shape[1] < depth:
        raise ValueError(f"draft_hidden must be [B, >= {depth}, Ht], got {tuple(draft_hidden.shape)}")
    k = min(pool_size or adapter.config.pool_size, V)
    c = min(c, k)
    width = min(w if w is not None else math.ceil(budget / 16), budget) or 1
    n = 1 + trie_size(budget, depth, c)
    return WeaverPlan(adapter, target_hidden, draft_hidden[:, :depth], depth, k, c, width, n)


# ---------------------------------------------------------------- device builder (the engine's)
@torch.no_grad()
def build_weaver(
    root: torch.Tensor,  # [B] long
    marginals_logits: torch.Tensor,  # [B, D, V] drafter logits; row d: depth d+1
    budget: int,
    *,
    adapter: WeaverAdapter | None = None,
    target_hidden: torch.Tensor | None = None,  # [B, Ht] target final-norm hidden at the root's producer
    draft_hidden: torch.Tensor | None = None,  # [B, D, Ht] drafter hidden h_1..h_D
    options: RuntimeOptions = DEFAULT_OPTIONS,
    w: int | None = None,
    c: int = DEFAULT_CHILDREN,
    pool_size: int | None = None,
    **context: object,  # the other builders' options (unused)
) -> DraftTree:
    """Weaver tree of at most `budget` non-root nodes per row, with tensor ops only (module docstring).

    w: nodes expanded per adapter call (default ceil(budget / 16)); c: children pushed per expanded node;
    pool_size: K (default adapter.config.pool_size; at most V). draft_logprobs = log p_weaver(token | path).
    The Triton loop runs where `use_kernel(options, ...)` and the round has the adapter's candidate table.
    """
    plan = plan_weaver(root, marginals_logits, budget, adapter, target_hidden, draft_hidden, w, c, pool_size)
    if plan.n == 1:
        return DraftTree.root_only(root)
    state = plan.begin(marginals_logits, root)
    frontier = Frontier.empty(root.to(state.visible.device), plan.n, plan.width, plan.c, plan.depth)
    expand_root(plan.adapter, state, frontier, plan.c)
    rounds = weaver_search_rounds(plan.n - 1, plan.width, plan.depth, plan.c)
    if state.cand_x is not None and use_kernel(options, state.visible):
        grow_kernels(plan.adapter, state, frontier, rounds, plan.c, options)
    else:
        grow_reference(plan.adapter, state, frontier, rounds, plan.c, options)
    return frontier.tree().to(root.device)


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


@torch.compiler.assume_constant_result
def weaver_search_rounds(nodes: int, width: int, depth: int, c: int) -> int:
    """Pop rounds that cover every reference search of `nodes` non-root nodes (static: the module docstring).

    A constant to torch.compile: dynamo calls it (the cache below serves every later round) instead of tracing
    through an lru_cache wrapper, which it warns about in every compiled weaver build."""
    return _search_rounds(nodes, width, depth, c)


@functools.lru_cache(maxsize=256)
def _search_rounds(nodes: int, width: int, depth: int, c: int) -> int:
    """`weaver_search_rounds`, cached (up to ~18 ms of Python at w = 1, budget 512: too slow for each eager round)."""
    if nodes <= 0:
        return 0
    no_drain = all(c * (1 + _fewest_expanded(m, c, depth)) - m >= min(width, nodes - m) for m in range(0, nodes, width))
    if no_drain:
        return math.ceil(nodes / width)
    drains = min(depth - 1, nodes - 1)
    return (nodes - 1 - drains) // width + drains + 1


# ---------------------------------------------------------------- reference (host heaps)
def _expand(
    adapter: WeaverAdapter,
    state: WeaverRound,
    jobs: list[list[_Job]],  # per row: the nodes to add and score (at most w)
    width: int,
    num_nodes: int,
    c: int,
) -> tuple[list[list[list[float]]], list[list[list[int]]], list[list[list[int]]]]:
    """One batched adapter step for `jobs`; returns each job's top-c children (log p [B][w][c], tokens,
    candidate-table rows)."""
    batch = len(jobs)
    host = torch.empty(5, batch, width, dtype=torch.long)  # slot, token, parent, depth, candidate row
    host[0] = num_nodes + torch.arange(width)  # scratch slots for padding entries
    host[1], host[2], host[3], host[4] = 0, -1, 0, 0
    for b, row in enumerate(jobs):
        for i, node, token, parent, depth, cand in row:
            host[:, b, i] = torch.tensor([node, token, parent, depth, cand])
    dev = host.to(state.visible.device)
    logp = adapter.step(state, dev[0], dev[1], dev[2], dev[3], dev[4])  # [B, w, K]
    top_lp, top_ix = torch.topk(logp, c, dim=-1)  # [B, w, c]
    rows = torch.arange(batch, device=dev.device)[:, None]
    pool = dev[3].clamp(max=state.depth - 1)  # [B, w]
    child = state.pool_ids[rows, pool].gather(-1, top_ix.to(dev.device))  # [B, w, c]
    cand = 1 + pool[..., None] * state.pool_ids.shape[2] + top_ix.to(dev.device)
    out = torch.stack([top_lp.double(), child.double().to(top_lp.device), cand.double().to(top_lp.device)]).cpu()
    return out[0].tolist(), out[1].long().tolist(), out[2].long().tolist()  # one transfer


@torch.no_grad()
def build_weaver_reference(
    root: torch.Tensor,  # [B] long
    marginals_logits: torch.Tensor,  # [B, D, V]
    budget: int,
    *,
    adapter: WeaverAdapter | None = None,
    target_hidden: torch.Tensor | None = None,  # [B, Ht]
    draft_hidden: torch.Tensor | None = None,  # [B, D, Ht]
    w: int | None = None,
    c: int = DEFAULT_CHILDREN,
    pool_size: int | None = None,
) -> DraftTree:
    """The weaver tree by best-first pops from host heaps (module docstring): the readable reference of
    `build_weaver`, same arguments (the adapter's own options decide its kernels) and output."""
    plan = plan_weaver(root, marginals_logits, budget, adapter, target_hidden, draft_hidden, w, c, pool_size)
    B, depth, c, width, n = root.shape[0], plan.depth, plan.c, plan.width, plan.n
    if n == 1:
        return DraftTree.root_only(root)

    # 1) pools and the round's prefix: top-K of the drafter's logits per depth, raw logits as the prior
    adapter = plan.adapter
    state = plan.begin(marginals_logits, root)

    # 2) best-first growth on the host; node i of row b sits in adapter slot i
    nodes: list[list[tuple[int, int, int, float]]] = [[] for _ in range(B)]  # (token, parent, depth, log p)
    score: list[list[float]] = [[0.0] for _ in range(B)]  # cumulative log p per node, root 0
    heaps: list[list[_Entry]] = [[] for _ in range(B)]
    counter = 0

    def push(jobs: list[list[_Job]]) -> None:
        nonlocal counter
        logp, child, cands = _expand(adapter, state, jobs, width, n, c)
        for b, row in enumerate(jobs):
            for i, node, _, _, node_depth, _ in row:
                for lp, tok, cand in zip(logp[b][i], child[b][i], cands[b][i]):
                    if lp > float("-inf"):
                        counter += 1
                        entry = (-(score[b][node] + lp), counter, node, tok, lp, node_depth + 1, cand)
                        heapq.heappush(heaps[b], entry)

    push([[(0, 0, int(tok), -1, 0, 0)] for tok in root.tolist()])
    while True:
        jobs: list[list[_Job]] = [[] for _ in range(B)]
        popped = False
        for b in range(B):
            picks = []
            for _ in range(min(width, budget - len(nodes[b]))):
                if not heaps[b]:
                    break
                neg, _, parent, tok, lp, d, cand = heapq.heappop(heaps[b])
                nodes[b].append((tok, parent, d, lp))
                score[b].append(-neg)
                picks.append((len(nodes[b]), tok, parent, d, cand))
            popped |= bool(picks)
            if len(nodes[b]) < budget:  # children of the last pops of a full row are never needed
                jobs[b] = [(i, *pick) for i, pick in enumerate(picks) if pick[3] < depth]
        if not popped:
            break
        if any(jobs):
            push(jobs)

    # 3) pack: [5, B, n] tokens, parents, depth, valid, draft_logprobs on the host; one transfer
    out = torch.zeros(5, B, n, dtype=torch.float64)
    out[1] = -1.0
    out[3, :, 0] = 1.0
    for b, row in enumerate(nodes):
        if row:
            cols = torch.tensor(row, dtype=torch.float64).T  # [4, m]: token, parent, depth, log p
            out[[0, 1, 2, 4], b, 1 : len(row) + 1] = cols
            out[3, b, 1 : len(row) + 1] = 1.0
    out = out.to(root.device)
    tokens = torch.cat([root[:, None].long(), out[0, :, 1:].long()], dim=1)  # [B, n]
    return DraftTree(tokens, out[1].long(), out[2].long(), out[3].bool(), out[4].float())
