"""Tree builders: chain = argmax of the marginals; ddtree (reference and device) = the best prefix-closed node set
(brute force); the registry."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from weaver.errors import GenerationConfigError
from weaver.options import RuntimeOptions
from weaver.speculative.builders import BUILDERS, get_builder
from weaver.speculative.builders.chain import build_chain
from weaver.speculative.builders.ddtree import build_ddtree, build_ddtree_reference
from weaver.speculative.builders.weaver import build_weaver
from weaver.speculative.tree import DraftTree

DDTREES = [pytest.param(build_ddtree_reference, id="reference"), pytest.param(build_ddtree, id="device")]


def paths_of(tree: DraftTree, b: int) -> set[tuple[int, ...]]:
    """Token paths (root excluded) of every valid non-root node of row b."""
    tok, par, val = tree.tokens[b].tolist(), tree.parents[b].tolist(), tree.valid[b].tolist()
    out = set()
    for i in range(1, len(tok)):
        if val[i]:
            path, j = [], i
            while j > 0:
                path.append(tok[j])
                j = par[j]
            out.add(tuple(reversed(path)))
    return out


def prefix_closed_sets(children: dict[tuple, list[tuple]], size: int):
    """Every prefix-closed set of `size` non-empty paths: grow from the empty prefix; each candidate is
    either taken (its children become candidates) or dropped for good, so every set appears once."""

    def grow(chosen: list[tuple], cands: list[tuple]):
        if len(chosen) == size:
            yield list(chosen)
            return
        if not cands:
            return
        c, rest = cands[0], cands[1:]
        chosen.append(c)
        yield from grow(chosen, rest + children.get(c, []))
        chosen.pop()
        yield from grow(chosen, rest)

    yield from grow([], list(children[()]))


def brute_force_best(logq: torch.Tensor, budget: int) -> tuple[set[tuple[int, ...]], float]:
    """Max over prefix-closed sets of sum_nodes exp(sum of log q_d along the path). logq: [D, V]."""
    D, V = logq.shape
    lq = logq.double().tolist()
    children: dict[tuple, list[tuple]] = {}
    for d in range(D):
        for prefix in itertools.product(range(V), repeat=d):
            children[prefix] = [prefix + (v,) for v in range(V)]
    total = sum(V**d for d in range(1, D + 1))
    size = min(budget, total)
    value = {
        p: math.exp(sum(lq[d][t] for d, t in enumerate(p))) for p in itertools.product(range(V), repeat=1)
    }
    for d in range(2, D + 1):
        value.update(
            {
                p: math.exp(sum(lq[i][t] for i, t in enumerate(p)))
                for p in itertools.product(range(V), repeat=d)
            }
        )
    best, best_val = None, -1.0
    for s in prefix_closed_sets(children, size):
        v = math.fsum(value[p] for p in s)
        if v > best_val:
            best, best_val = set(s), v
    return best, best_val


@pytest.mark.parametrize(
    "V, D, budget",
    [
        pytest.param(*c, id=f"V{c[0]}-D{c[1]}-b{c[2]}")
        for c in itertools.product((2, 3, 4), (1, 2, 3), (1, 3, 6))
    ],
)
@pytest.mark.parametrize("build", DDTREES)
def test_ddtree_is_best_prefix_closed_set(V, D, budget, build):
    g = torch.Generator().manual_seed(100 * V + 10 * D + budget)
    B = 3
    marginals = torch.randn(B, D, V, generator=g, dtype=torch.float64) * 2.0  # continuous: no ties
    tree = build(torch.arange(B), marginals, budget)
    tree.validate()
    logq = torch.log_softmax(marginals, -1)
    for b in range(B):
        best, _ = brute_force_best(logq[b], budget)
        got = paths_of(tree, b)
        assert got == best, f"row {b} V={V} D={D} budget={budget}: got {sorted(got)}, best {sorted(best)}"
        # draft_logprobs = log q_d(token) of each node's own depth
        for i in range(1, tree.size):
            if tree.valid[b, i]:
                d, t = int(tree.depth[b, i]), int(tree.tokens[b, i])
                assert abs(float(tree.draft_logprobs[b, i]) - float(logq[b, d - 1, t])) < 1e-5
        assert int(tree.tokens[b, 0]) == b


@pytest.mark.parametrize("build", DDTREES)
def test_ddtree_budget_larger_than_trie(build):
    g = torch.Generator().manual_seed(0)
    marginals = torch.randn(2, 2, 3, generator=g)
    tree = build(torch.tensor([0, 1]), marginals, budget=50)
    tree.validate()
    full = {(a,) for a in range(3)} | {(a, b) for a in range(3) for b in range(3)}
    assert tree.size == 1 + 12
    assert paths_of(tree, 0) == full and paths_of(tree, 1) == full
    # pop order is topological and best-first: the first node is the top token at depth 1
    assert int(tree.tokens[0, 1]) == int(marginals[0, 0].argmax())


@pytest.mark.parametrize("build", DDTREES)
def test_ddtree_topk_and_edge_cases(build):
    g = torch.Generator().manual_seed(1)
    marginals = torch.randn(2, 3, 5, generator=g)
    t = build(torch.tensor([3, 4]), marginals, budget=10, topk=2)
    t.validate()
    for b in range(2):
        for i in range(1, t.size):  # only the top-2 tokens of each depth appear
            d = int(t.depth[b, i])
            assert int(t.tokens[b, i]) in marginals[b, d - 1].topk(2).indices.tolist()
    assert build(torch.tensor([3, 4]), marginals, budget=0).size == 1
    assert build(torch.tensor([3, 4]), marginals[:, :0], budget=5).size == 1
    masked = marginals.clone()
    masked[:, :, 2:] = float("-inf")  # only 2 finite tokens per depth: never propose the rest
    t = build(torch.tensor([3, 4]), masked, budget=30)
    t.validate()
    assert t.num_nodes.tolist() == [15, 15] and (t.tokens[:, 1:][t.valid[:, 1:]] < 2).all()


def test_chain_is_argmax():
    g = torch.Generator().manual_seed(2)
    marginals = torch.randn(3, 5, 7, generator=g)
    root = torch.tensor([1, 2, 3])
    t = build_chain(root, marginals, budget=64)
    t.validate()
    assert t.size == 6
    assert torch.equal(t.tokens[:, 1:], marginals.argmax(-1))
    want_lp = torch.log_softmax(marginals, -1).max(-1).values
    assert torch.allclose(t.draft_logprobs[:, 1:], want_lp)
    short = build_chain(root, marginals, budget=2)
    assert short.size == 3 and torch.equal(short.tokens[:, 1:], marginals[:, :2].argmax(-1))
    assert build_chain(root, marginals, budget=0).size == 1
    with pytest.raises(ValueError, match="budget must be >= 0"):
        build_chain(root, marginals, budget=-1)


@pytest.mark.parametrize("build", DDTREES)
def test_ddtree_budget_one_equals_chain_of_one(build):
    g = torch.Generator().manual_seed(3)
    marginals = torch.randn(4, 3, 6, generator=g)
    root = torch.arange(4)
    a, c = build(root, marginals, 1), build_chain(root, marginals, 1)
    assert torch.equal(a.tokens, c.tokens) and torch.equal(a.parents, c.parents)


def test_registry():
    """The registry holds exactly the engine's three methods; an unknown name lists them."""
    assert set(BUILDERS) == {"chain", "ddtree", "weaver"}
    assert get_builder("chain") is build_chain and get_builder("ddtree") is build_ddtree
    assert get_builder("weaver") is build_weaver
    with pytest.raises(GenerationConfigError, match="unknown tree builder 'nope'; known: chain, ddtree, weaver"):
        get_builder("nope")
    with pytest.raises(GenerationConfigError, match="known: chain, ddtree, weaver"):
        get_builder("ddtree_host")  # the references are not engine methods


def test_builders_take_the_rounds_call():
    """chain and ddtree take the call the round makes (the weaver inputs and options included) and ignore what
    they do not use; the weaver builder needs an adapter (test_weaver.py)."""
    g = torch.Generator().manual_seed(4)
    marginals = torch.randn(2, 3, 5, generator=g)
    for name in ("chain", "ddtree"):
        tree = BUILDERS[name](torch.tensor([0, 1]), marginals, 4, adapter=None, target_hidden=None,
                              draft_hidden=None, options=RuntimeOptions(kernels="torch"), w=2, c=3)  # fmt: skip
        tree.validate()


def test_prefix_closed_enumerator_counts():
    """The brute-force enumerator lists each prefix-closed set once: compare with filtering all subsets."""
    V, D = 2, 3
    nodes = [p for d in range(1, D + 1) for p in itertools.product(range(V), repeat=d)]
    children = {
        p: [p + (v,) for v in range(V)] for d in range(D) for p in itertools.product(range(V), repeat=d)
    }
    for size in range(1, 6):
        sets = [frozenset(s) for s in prefix_closed_sets(children, size)]
        assert len(sets) == len(set(sets))
        want = {
            frozenset(s)
            for s in itertools.combinations(nodes, size)
            if all(len(p) == 1 or p[:-1] in s for p in s)
        }
        assert set(sets) == want, size
