"""Tree builders: the drafter's per-depth marginals (plus, for Weaver, the adapter) -> a DraftTree (DESIGN §8).

Every builder the engine runs is called the same way:

    builder(root, marginals_logits, budget, *, adapter=None, target_hidden=None, draft_hidden=None,
            options=RuntimeOptions(), **builder_options) -> DraftTree

    root:             LongTensor [B]        the round's root token (last committed, not yet processed)
    marginals_logits: FloatTensor [B, D, V] drafter logits; row d is the marginal of the token at depth d+1
    budget:           int >= 0              maximum number of non-root nodes per row
    adapter, target_hidden [B, Ht], draft_hidden [B, D, Ht]: what the Weaver builder needs (the others ignore them)
    options:          how the kernels run (`weaver.options.RuntimeOptions`)
    builder_options:  a builder's own keywords (ddtree: topk; weaver: w, c, pool_size); a builder ignores the
                      ones of other builders, so one call fits all.

Builders fill `draft_logprobs` with the log-probability of each node's token under the builder's own
proposal at its parent (traversal verification uses it), and return nodes in topological order with
distinct sibling tokens. The output N is a function of (budget, D, V) and the options only, never of the
data, so shapes stay static across rounds.

One module per method: `chain`, `ddtree` and `weaver`. The engine's builders run on the device with tensor
ops only, a number of sequential steps fixed by the sizes and no host sync, so a round can be captured in a
CUDA graph. Beside each device builder sits its host reference (`build_ddtree_reference`,
`build_weaver_reference`: Python heaps, readable), which the tests compare it with; the two share one plan.
"""

from __future__ import annotations

from typing import Protocol

import torch

from weaver.errors import GenerationConfigError
from weaver.options import DEFAULT_OPTIONS, RuntimeOptions
from weaver.speculative.tree import DraftTree

__all__ = ["BUILDERS", "TreeBuilder", "check_inputs", "get_builder", "trie_size"]



class TreeBuilder(Protocol):
    """The call every builder takes (module docstring)."""

    def __call__(
        self,
        root: torch.Tensor,
        marginals_logits: torch.Tensor,
        budget: int,
        *,
        adapter: object = None,
        target_hidden: torch.Tensor | None = None,
        draft_hidden: torch.Tensor | None = None,
        options: RuntimeOptions = DEFAULT_OPTIONS,
        **builder_options: object,
    ) -> DraftTree: ...


def check_inputs(root: torch.Tensor, marginals_logits: torch.Tensor, budget: int) -> None:
    """Reject malformed builder inputs with the offending shapes (every builder calls it first)."""
    if root.dim() != 1:
        raise ValueError(f"root must be [B], got shape {tuple(root.shape)}")
    if marginals_logits.dim() != 3 or marginals_logits.shape[0] != root.shape[0]:
        raise ValueError(
            f"marginals_logits must be [B, D, V] with B = {root.shape[0]}, got {tuple(marginals_logits.shape)}"
        )
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")


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


# The method modules use the helpers above, so they are imported once those exist.
from weaver.speculative.builders.chain import build_chain  # noqa: E402
from weaver.speculative.builders.ddtree import build_ddtree  # noqa: E402
from weaver.speculative.builders.weaver import build_weaver  # noqa: E402

BUILDERS: dict[str, TreeBuilder] = {"chain": build_chain, "ddtree": build_ddtree, "weaver": build_weaver}


def get_builder(name: str) -> TreeBuilder:
    """The builder of `method=name` (`LLM.generate`); an unknown name lists the known ones."""
    if name not in BUILDERS:
        raise GenerationConfigError(f"unknown tree builder {name!r}; known: {', '.join(sorted(BUILDERS))}")
    return BUILDERS[name]
