"""The `ddtree` builder (DDTree, arXiv 2604.12989): the best prefix-closed set of `budget` nodes under the
factorized score s(path) = sum_d log q_d(x_d) (q_d = softmax of the depth-d marginal).

Per depth the top-k tokens are kept (k = min(budget, V), or min(topk, V)); the same ranked list serves every
parent, the weakness Weaver removes. Output N = 1 + min(budget, k + ... + k^D) (`plan_ddtree`).

Reference (`build_ddtree_reference`, a host heap): pop the best prefix, push its next sibling and its first
child; `budget` pops. Every extension scores below its prefix, so the popped set is the top-`budget` node
set, which is prefix-closed, in descending score order.

Device (`build_ddtree`, the engine's): no adapter runs between pops, so the same set can be found level by
level instead of pop by pop, with D' = min(D, budget') top-k calls (budget' = N - 1) and no host sync
(`weaver.ops.ddtree_select`; on CUDA all of it is one Triton launch, `weaver.kernels.ddtree_select`):

    level 1:  the top-min(budget', k) depth-1 paths (the top tokens of q_1)
    level d:  the top-min(budget' - d + 1, ...) of {p + x : p in level d-1, x in the top-k of q_d}
    tree:     the best budget' entries of all levels together (stable sort, shallow levels first)

Each level holds the best depth-d paths of the whole trie: if a depth-d path p.x is among the L best
depth-d paths, fewer than L depth-(d-1) paths beat p (each one extended by the best token would beat
p.x), so p is in level d-1. The budget' best nodes overall hold at most budget' - d + 1 depth-d nodes
(each has d - 1 ancestors in the set) and every depth-d path better than one of them, so they are among
the budget' - d + 1 best of their depth. Ties keep the tree valid: a node equal to its parent sorts
after it (shallower levels come first in the stable sort) and is built from a parent in the list. The node
order is the reference's pop order, so the trees are identical (ties aside: the heap breaks them by rank path).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import torch

from weaver.kernels.ddtree_select import fused_ddtree_tree
from weaver.kernels.vocab_topk import top_logprobs
from weaver.options import DEFAULT_OPTIONS, RuntimeOptions
from weaver.speculative.builders import check_inputs, trie_size
from weaver.speculative.tree import DraftTree

__all__ = ["DDTreePlan", "build_ddtree", "build_ddtree_reference", "plan_ddtree"]

_NEG_INF = float("-inf")


@dataclass(frozen=True)
class DDTreePlan:
    """The static sizes of one ddtree build, shared by the reference and the device builder."""

    k: int  # tokens kept per depth
    nodes: int  # budget' = N - 1: non-root nodes of the output

    def top(self, marginals_logits: torch.Tensor, options: RuntimeOptions | None = None,
            ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """The top-k log-marginals per depth, descending, and their tokens: [B, D, k] each. An all -inf
        marginal gives NaN log-probs: they become -inf (never proposed). The top-k of the raw logits (their
        log-softmax's order) minus one logsumexp per depth: no [B, D, V] log-softmax is written; on CUDA two
        Triton launches (`weaver.kernels.vocab_topk`), torch.topk and logsumexp elsewhere. `options` None means
        DEFAULT_OPTIONS, not as a default argument: torch 2.11's dynamo cannot wrap an object default of a method
        on an object made inside the traced build (it broke the build stage in three graphs on the H200)."""
        top_lq, top_ids = top_logprobs(marginals_logits, self.k, options or DEFAULT_OPTIONS)  # [B, D, k]
        return torch.where(top_lq.isnan(), _NEG_INF, top_lq), top_ids


def plan_ddtree(root: torch.Tensor, marginals_logits: torch.Tensor, budget: int, topk: int | None) -> DDTreePlan:
    """Check the arguments and resolve k and budget' (one place for both builders)."""
    check_inputs(root, marginals_logits, budget)
    if topk is not None and topk < 1:
        raise ValueError(f"topk must be >= 1, got {topk}")
    _, depth, vocab = marginals_logits.shape
    k = min(budget if topk is None else topk, vocab)
    return DDTreePlan(k, trie_size(budget, depth, k))


@torch.no_grad()
def build_ddtree(
    root: torch.Tensor,  # [B] long
    marginals_logits: torch.Tensor,  # [B, D, V]
    budget: int,
    *,
    topk: int | None = None,
    options: RuntimeOptions = DEFAULT_OPTIONS,  # kernels: the tree's one-launch Triton form
    **context: object,  # the other builders' inputs and options (unused)
) -> DraftTree:
    """The DDTree tree built level by level with tensor ops only (module docstring), for CUDA-graph capture."""
    plan = plan_ddtree(root, marginals_logits, budget, topk)
    nodes = plan.nodes
    if nodes == 0:
        return DraftTree.root_only(root)
    dev = marginals_logits.device
    top_lq, top_ids = plan.top(marginals_logits, options)  # [B, D, k]

    # every level (the best depth-d paths), the best `nodes` of them (stable: a tie with an ancestor keeps the
    # ancestor first) and the tree's fields: one Triton launch on CUDA, ~40 torch ops elsewhere
    fields = fused_ddtree_tree(top_lq.double(), top_ids, root.long().to(dev), nodes, options)
    return DraftTree(*fields).to(root.device)


def _reference_row(logq: list[list[float]], ids: list[list[int]], budget: int) -> list[tuple[int, int, int, float]]:
    """Best-first pops for one row. logq/ids: [D][k] top-k log-marginals (descending) and their tokens.

    Returns (token, parent, depth, log q) per non-root node in pop order (topological: a node is pushed
    only after its parent was popped). Heap key: (-score, rank path) - the rank path breaks ties
    lexicographically. Node = (marginal index d, rank r under its parent); its next sibling is rank r+1
    under the same parent and its first child is rank 0 at d+1.
    """
    depth, k = len(logq), len(logq[0]) if logq else 0
    nodes: list[tuple[int, int, int, float]] = []
    heap: list[tuple[float, tuple[int, ...], int, int, int]] = []  # (-score, ranks, d, r, parent)
    if depth == 0 or k == 0 or budget == 0:
        return nodes
    if logq[0][0] > _NEG_INF:
        heap.append((-logq[0][0], (0,), 0, 0, 0))
    while heap and len(nodes) < budget:
        neg, ranks, d, r, parent = heapq.heappop(heap)
        score = -neg
        nodes.append((ids[d][r], parent, d + 1, logq[d][r]))
        me = len(nodes)  # node id in the output tree (root is 0)
        if r + 1 < k and logq[d][r + 1] > _NEG_INF:  # next sibling: same parent, next rank
            heapq.heappush(
                heap, (-(score - logq[d][r] + logq[d][r + 1]), ranks[:-1] + (r + 1,), d, r + 1, parent)
            )
        if d + 1 < depth and logq[d + 1][0] > _NEG_INF:  # first child: best token one level deeper
            heapq.heappush(heap, (-(score + logq[d + 1][0]), ranks + (0,), d + 1, 0, me))
    return nodes


@torch.no_grad()
def build_ddtree_reference(
    root: torch.Tensor, marginals_logits: torch.Tensor, budget: int, *, topk: int | None = None
) -> DraftTree:
    """The DDTree tree by best-first pops on the host (module docstring): the readable reference of `build_ddtree`,
    same arguments and output.

    The top-k runs on the device in one call; only the [B, D, k] block moves to the host, once; the heap
    does at most `budget` pops per row in Python.
    """
    plan = plan_ddtree(root, marginals_logits, budget, topk)
    n = 1 + plan.nodes
    if n == 1:
        return DraftTree.root_only(root)
    B = root.shape[0]
    top_val, top_idx = plan.top(marginals_logits)  # [B, D, k] each, descending
    host = torch.stack([top_val.double(), top_idx.double()]).cpu()  # one transfer; ids < 2^53 are exact
    vals, idxs = host[0].tolist(), host[1].long().tolist()

    # [5, B, n] on the host: tokens, parents, depth, valid, draft_logprobs; row 0 of each tree = the root
    out = torch.zeros(5, B, n, dtype=torch.float64)
    out[1] = -1.0
    out[3, :, 0] = 1.0
    for b in range(B):
        nodes = _reference_row(vals[b], idxs[b], budget)
        if nodes:
            cols = torch.tensor(nodes, dtype=torch.float64).T  # [4, m]: token, parent, depth, log q
            m = cols.shape[1] + 1
            out[[0, 1, 2, 4], b, 1:m] = cols
            out[3, b, 1:m] = 1.0
    out = out.to(root.device)  # one transfer back
    tokens = torch.cat([root[:, None].long(), out[0, :, 1:].long()], dim=1)  # [B, n]
    return DraftTree(tokens, out[1].long(), out[2].long(), out[3].bool(), out[4].float())
