"""Tree builders: the drafter's per-depth marginals (plus, for Weaver, the adapter) -> a DraftTree.

Every builder has the signature

    builder(root, marginals_logits, budget, **context) -> DraftTree

    root:             LongTensor [B]        the round's root token (last committed, not yet processed)
    marginals_logits: FloatTensor [B, D, V] drafter logits; row d is the marginal of the token at depth d+1
    budget:           int >= 0              maximum number of non-root nodes per row
    context:          keyword arguments other builders need (adapter, hidden states, ...); a builder
                      ignores the ones it does not use, so the engine can call every builder the same way.

Builders fill `draft_logprobs` with the log-probability of each node's token under the builder's own
proposal at its parent (traversal verification uses it), and return nodes in topological order with
distinct sibling tokens. The output N is a function of (budget, D, V) only, never of the data, so
shapes stay static across rounds.

Extension point: the Weaver builder (DESIGN §8) is a new function registered with
`@register_builder("weaver")`; it takes its adapter and the round's hidden states through `context`
(`adapter=..., target_hidden=..., draft_hidden=...`) and returns a DraftTree like the ones here.

Host and device. `ddtree` and `weaver` are the device builders (ddtree_device.py, weaver_builder_device.py):
tensor ops only, a number of sequential steps fixed by the sizes, no host sync, so a round can be captured
in a CUDA graph. The host builders they were derived from stay registered as `ddtree_host` and
`weaver_host`: readable references (Python heaps) that the tests compare the device builders against.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Protocol

import torch

from weaver.errors import GenerationConfigError
from weaver.kernels.vocab_top1 import top1_logprob
from weaver.options import RuntimeOptions
from weaver.speculative.tree import DraftTree

__all__ = [
    "BUILDERS",
    "TreeBuilder",
    "build_chain",
    "build_ddtree",
    "check_inputs",
    "get_builder",
    "register_builder",
    "trie_size",
]


class TreeBuilder(Protocol):
    def __call__(
        self, root: torch.Tensor, marginals_logits: torch.Tensor, budget: int, **context: object
    ) -> DraftTree: ...


BUILDERS: dict[str, TreeBuilder] = {}


def register_builder(name: str) -> Callable[[TreeBuilder], TreeBuilder]:
    """Decorator adding a builder to BUILDERS under `name` (the `method=` of `LLM.generate`)."""

    def deco(fn: TreeBuilder) -> TreeBuilder:
        if name in BUILDERS:
            raise ValueError(f"builder {name!r} is already registered")
        BUILDERS[name] = fn
        return fn

    return deco


def get_builder(name: str) -> TreeBuilder:
    if name not in BUILDERS:
        raise GenerationConfigError(f"unknown tree builder {name!r}; known: {', '.join(sorted(BUILDERS))}")
    return BUILDERS[name]


def check_inputs(root: torch.Tensor, marginals_logits: torch.Tensor, budget: int) -> None:
    """Reject malformed builder inputs with the offending shapes (every builder calls it first)."""
    if root.dim() != 1:
        raise ValueError(f"root must be [B], got shape {tuple(root.shape)}")
    if marginals_logits.dim() != 3 or marginals_logits.shape[0] != root.shape[0]:
        raise ValueError(
            f"marginals_logits must be [B, D, V] with B = {root.shape[0]}, "
            f"got {tuple(marginals_logits.shape)}"
        )
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")


@register_builder("chain")
def build_chain(
    root: torch.Tensor, marginals_logits: torch.Tensor, budget: int, **context: object
) -> DraftTree:
    """DFlash chain: the argmax of each marginal, D' = min(D, budget) drafts. Output N = D' + 1."""
    check_inputs(root, marginals_logits, budget)
    depth = min(marginals_logits.shape[1], budget)
    options = context.get("options") or RuntimeOptions()
    best_logq, drafts = top1_logprob(marginals_logits[:, :depth], options)  # [B, D'] max log-softmax, [B, D'] argmax
    return DraftTree.chain(root, drafts, best_logq)


def trie_size(budget: int, depth: int, k: int) -> int:
    """Non-root nodes of a best-first tree with <= k children per node and <= depth levels:
    min(budget, k + k^2 + ... + k^depth), the whole k-ary trie if it fits (static output size)."""
    total, level = 0, 1
    for _ in range(depth):
        level *= k
        total += level
        if total >= budget:
            return budget
    return total


def _ddtree_row(
    logq: list[list[float]], ids: list[list[int]], budget: int
) -> list[tuple[int, int, int, float]]:
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
    if logq[0][0] > float("-inf"):
        heap.append((-logq[0][0], (0,), 0, 0, 0))
    while heap and len(nodes) < budget:
        neg, ranks, d, r, parent = heapq.heappop(heap)
        score = -neg
        nodes.append((ids[d][r], parent, d + 1, logq[d][r]))
        me = len(nodes)  # node id in the output tree (root is 0)
        if r + 1 < k and logq[d][r + 1] > float("-inf"):  # next sibling: same parent, next rank
            heapq.heappush(
                heap, (-(score - logq[d][r] + logq[d][r + 1]), ranks[:-1] + (r + 1,), d, r + 1, parent)
            )
        if d + 1 < depth and logq[d + 1][0] > float("-inf"):  # first child: best token one level deeper
            heapq.heappush(heap, (-(score + logq[d + 1][0]), ranks + (0,), d + 1, 0, me))
    return nodes


@register_builder("ddtree_host")
def build_ddtree(
    root: torch.Tensor,
    marginals_logits: torch.Tensor,
    budget: int,
    topk: int | None = None,
    **context: object,
) -> DraftTree:
    """DDTree (arXiv 2604.12989): the best prefix-closed set of `budget` nodes under the factorized surrogate.

    Score of a node = sum over its path of log q_d(x_d) (q_d = softmax of the depth-d marginal). Per depth
    the top-k tokens are kept (k = min(budget, V), or min(topk, V)); best-first: pop the best prefix,
    push its next sibling and its first child; `budget` pops. Because every extension scores below its
    prefix, the popped set is the top-`budget` node set, which is prefix-closed. The same ranked token
    list is used under every parent. Output N = 1 + min(budget, k + ... + k^D).

    The top-k runs on the device in one call; only the [B, D, k] block moves to the host, once; the heap
    does at most `budget` pops per row in Python.
    """
    check_inputs(root, marginals_logits, budget)
    if topk is not None and topk < 1:
        raise ValueError(f"topk must be >= 1, got {topk}")
    B, D, V = marginals_logits.shape
    k = min(budget if topk is None else topk, V)
    n = 1 + trie_size(budget, D, k)
    if n == 1:
        return DraftTree.root_only(root)
    logq = torch.log_softmax(marginals_logits.float(), dim=-1)  # [B, D, V]
    top_val, top_idx = torch.topk(logq, k, dim=-1)  # [B, D, k] each, descending
    host = torch.stack([top_val.double(), top_idx.double()]).cpu()  # one transfer; ids < 2^53 are exact
    vals, idxs = host[0].tolist(), host[1].long().tolist()

    # [5, B, n] on the host: tokens, parents, depth, valid, draft_logprobs; row 0 of each tree = the root
    out = torch.zeros(5, B, n, dtype=torch.float64)
    out[1] = -1.0
    out[3, :, 0] = 1.0
    for b in range(B):
        nodes = _ddtree_row(vals[b], idxs[b], budget)
        if nodes:
            cols = torch.tensor(nodes, dtype=torch.float64).T  # [4, m]: token, parent, depth, log q
            m = cols.shape[1] + 1
            out[[0, 1, 2, 4], b, 1:m] = cols
            out[3, b, 1:m] = 1.0
    out = out.to(root.device)  # one transfer back
    tokens = torch.cat([root[:, None].long(), out[0, :, 1:].long()], dim=1)  # [B, n]
    return DraftTree(tokens, out[1].long(), out[2].long(), out[3].bool(), out[4].float())


# The device builders register "ddtree" (and weaver_builder.py's import registers "weaver"): the names the
# engine uses are the sync-free versions; the host ones above stay as references ("*_host").
from weaver.speculative import ddtree_device as _ddtree_device  # noqa: E402, F401
from weaver.speculative import weaver_builder as _weaver_builder  # noqa: E402, F401
