"""Device builders (`build_ddtree`, `build_weaver`) against their host references (`build_*_reference`).

The device builders replay the host search with tensor ops, so on tie-free inputs (random continuous
scores) they must return the same tree node for node: tokens, parents, depth, valid and draft_logprobs.
Sync-freedom is checked on the `meta` device, where every data-dependent host read raises
(`.item()`, `.tolist()`, `int()`, `bool()`, `if tensor`, `.cpu()`, `nonzero`, boolean-mask indexing).
"""

from __future__ import annotations

import heapq
import inspect
import math
import random

import pytest
import torch
from helpers.adapters import HT, TORCH, TRITON, bound, make_adapter, make_inputs
from helpers.trees import FIELDS, assert_same_tree
from hypothesis import given, settings
from hypothesis import strategies as st

from weaver.ops import weaver_frontier
from weaver.ops.tree import path_prefix_sum
from weaver.speculative.builders import frontier, trie_size
from weaver.speculative.builders.ddtree import build_ddtree, build_ddtree_reference, plan_ddtree
from weaver.speculative.builders.weaver import (
    _fewest_expanded,
    build_weaver,
    build_weaver_reference,
    plan_weaver,
    weaver_search_rounds,
)

VOCAB = 13
GRID = [(budget, w, c) for budget in (1, 8, 32, 64) for w in (1, 2, 4) for c in (1, 3, 8)]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The tensors here are tiny: one intra-op thread is fastest and immune to a busy second core."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def weaver_args(batch: int, depth: int, max_depth: int, pool: int, seed: int) -> tuple[tuple, dict]:
    """A builder call's arguments: the torch references (the Triton loop: tests/kernels/test_weaver_frontier.py)."""
    inp = make_inputs(batch, depth, VOCAB, seed=seed)
    ad = bound(make_adapter(VOCAB, max_depth=max_depth, pool=pool, seed=seed), inp, TORCH)
    kw = {"adapter": ad, "target_hidden": inp["target_hidden"], "draft_hidden": inp["draft_hidden"]}
    return (inp["root"], inp["marginals"]), kw


# ---------------------------------------------------------------- weaver
@pytest.mark.parametrize("budget, w, c", [pytest.param(*g, id=f"b{g[0]}-w{g[1]}-c{g[2]}") for g in GRID])
@settings(max_examples=6, deadline=None, derandomize=True)
@given(
    batch=st.sampled_from([1, 3]),
    depth=st.integers(1, 6),  # D
    max_depth=st.integers(1, 5),  # D' = min(D, max_depth): small ones make the frontier run dry
    pool=st.integers(3, 9),  # K; c > K is clamped to K
    seed=st.integers(0, 2**16),
)
def test_weaver_device_equals_reference(budget, w, c, batch, depth, max_depth, pool, seed) -> None:
    args, kw = weaver_args(batch, depth, max_depth, pool, seed)
    host = build_weaver_reference(*args, budget, w=w, c=c, **kw)
    dev = build_weaver(*args, budget, w=w, c=c, options=TORCH, **kw)
    assert_same_tree(host, dev, f"B{batch} budget {budget} w {w} c {c} D {depth} D' {min(depth, max_depth)} K {pool}")


@pytest.mark.parametrize("w, c, max_depth", [(4, 1, 5), (4, 3, 2), (3, 2, 4), (4, 2, 3)])
def test_weaver_device_equals_reference_when_the_frontier_drains(w, c, max_depth) -> None:
    """c < w or a shallow D': rows pop fewer than w nodes in some rounds (the rounds bound must cover it)."""
    args, kw = weaver_args(3, 6, max_depth, 8, seed=w * 100 + c * 10 + max_depth)
    for budget in (8, 32, 64):
        host = build_weaver_reference(*args, budget, w=w, c=c, **kw)
        n = 1 + trie_size(budget, max_depth, c)
        assert math.ceil((n - 1) / w) < weaver_search_rounds(n - 1, w, max_depth, c) or n - 1 <= w
        assert_same_tree(host, build_weaver(*args, budget, w=w, c=c, **kw), f"budget {budget}")


def test_weaver_device_with_masked_candidates_is_a_prefix_of_the_reference_pops() -> None:
    """-inf log-probs (masked drafter logits) drop children as on the host; the device tree is then the
    host's first pop rounds: the same nodes in the same order, possibly fewer of them."""
    args, kw = weaver_args(3, 5, 5, 6, seed=3)
    root, marginals = args
    masked = marginals.clone()
    masked[:, :, 3:] = float("-inf")  # 3 finite candidates per depth in a pool of 6
    for w, c in ((1, 8), (4, 8), (4, 2)):
        host = build_weaver_reference(root, masked, 40, w=w, c=c, **kw)
        dev = build_weaver(root, masked, 40, w=w, c=c, **kw)
        dev.validate()
        keep = dev.valid
        for name in FIELDS:
            assert torch.equal(torch.where(keep, getattr(host, name), 0), torch.where(keep, getattr(dev, name), 0))
        assert (dev.num_nodes <= host.num_nodes).all() and (host.num_nodes > 1).all()
        assert (dev.valid[:, 1:] <= dev.valid[:, :-1]).all()  # valid nodes first, pads trailing


def test_weaver_search_rounds_is_a_constant_under_compile() -> None:
    """dynamo calls it, one cached call, rather than tracing its body (past an lru_cache wrapper, with a warning)."""
    from weaver.speculative.builders.weaver import _search_rounds

    _search_rounds.cache_clear()
    torch._dynamo.reset()
    fn = torch.compile(lambda x: x + weaver_search_rounds(x.shape[0], 4, 15, 16), backend="eager", fullgraph=True)
    assert fn(torch.zeros(64))[0].item() == 16
    assert _search_rounds.cache_info().misses == 1


def test_weaver_search_rounds() -> None:
    assert weaver_search_rounds(0, 4, 15, 8) == 0
    assert weaver_search_rounds(64, 4, 15, 8) == 16  # paper setting: budget/w adapter calls
    assert weaver_search_rounds(64, 1, 15, 8) == 64  # w = 1: one pop per round
    assert weaver_search_rounds(5, 4, 5, 1) == 5  # c = 1: a chain, one node per round
    assert weaver_search_rounds(8, 2, 1, 8) == 4  # one level of 8: never drains
    assert weaver_search_rounds(64, 4, 15, 3) == (63 - 14) // 4 + 14 + 1  # c < w: up to 14 draining rounds


def _exact_fewest_expanded(c: int, depth: int, most: int) -> list[int]:
    """min over prefix-closed m-node sets of the c-ary depth-D' trie of the nodes above depth D', by a
    min-plus DP over subtrees (independent of the closed form being tested). Index m; 10**9 = impossible."""
    big = 10**9

    def forest(sub: list[int]) -> list[int]:  # c sibling subtrees, each empty or `sub`
        acc = [0]
        for _ in range(c):
            new = [big] * min(most + 1, len(acc) + len(sub) - 1)
            for a, ea in enumerate(acc):
                for b, eb in enumerate(sub):
                    if a + b < len(new):
                        new[a + b] = min(new[a + b], ea + (eb if b else 0))
            acc = new
        return acc

    sub = [big, 0]  # a depth-D' node: itself, not expanded
    for _ in range(depth - 1):
        sub = ([big] + [e + 1 for e in forest(sub)])[: most + 1]  # a node above D': expanded
    return forest(sub)


@pytest.mark.parametrize("c", [1, 2, 3, 4])
@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_fewest_expanded_is_the_exact_minimum(c: int, depth: int) -> None:
    exact = _exact_fewest_expanded(c, depth, 60)
    for m, e in enumerate(exact):
        if e < 10**9:
            assert _fewest_expanded(m, c, depth) == e, (m, c, depth)


def _host_pop_rounds(nodes: int, width: int, depth: int, c: int, rng: random.Random, skew: float) -> int:
    """The host search's pop loop on random child log-probs (no adapter): how many rounds pop something."""
    heap = [(rng.expovariate(1.0), 1) for _ in range(c)]  # (-score, depth) of the root's children
    heapq.heapify(heap)
    count = rounds = 0
    while True:
        picks = [heapq.heappop(heap) for _ in range(min(width, nodes - count, len(heap)))]
        if not picks:
            return rounds
        rounds += 1
        count += len(picks)
        for neg, d in picks:
            if d < depth and count < nodes:
                for _ in range(c):  # a small skew makes children cheap: the search dives to depth D'
                    heapq.heappush(heap, (neg + rng.expovariate(1.0) * skew, d + 1))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    budget=st.integers(1, 80),
    w=st.integers(1, 8),
    depth=st.integers(1, 8),
    c=st.integers(1, 9),
    skew=st.sampled_from([0.01, 0.3, 1.0, 5.0]),
    seed=st.integers(0, 2**16),
)
def test_weaver_search_rounds_cover_the_reference_pop_loop(budget, w, depth, c, skew, seed) -> None:
    nodes = trie_size(budget, depth, c)
    got = _host_pop_rounds(nodes, min(w, budget), depth, c, random.Random(seed), skew)
    assert got <= weaver_search_rounds(nodes, min(w, budget), depth, c)


def test_weaver_device_calls_the_adapter_a_fixed_number_of_times() -> None:
    """weaver_search_rounds(...) adapter steps whatever the data (static shapes, static loop): the root's, then one
    for every pop round but the last (whose children no round pops)."""
    counts = []
    for seed in range(3):
        args, kw = weaver_args(2, 6, 4, 6, seed=seed)
        ad = kw["adapter"]
        calls: list[tuple] = []
        step = ad.step_top
        ad.step_top = lambda *a, _step=step, _calls=calls, **k: _calls.append(tuple(a[1].shape)) or _step(*a, **k)
        build_weaver(*args, 32, w=4, c=2, **kw)
        counts.append(calls)
    rounds = weaver_search_rounds(trie_size(32, 4, 2), 4, 4, 2)
    assert counts[0] == counts[1] == counts[2] == [(2, 4)] * rounds


# ---------------------------------------------------------------- ddtree
@pytest.mark.parametrize(
    "budget, topk", [pytest.param(b, k, id=f"b{b}-k{k}") for b in (1, 8, 32, 64) for k in (None, 1, 3, 8)]
)
@settings(max_examples=6, deadline=None, derandomize=True)
@given(batch=st.sampled_from([1, 3]), depth=st.integers(0, 7), vocab=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_ddtree_device_equals_reference(budget, topk, batch, depth, vocab, seed) -> None:
    """Both selections: torch.topk / sort, and the Triton small top-k (interpreted on CPU; a few draws, it is slow)."""
    gen = torch.Generator().manual_seed(seed)
    marginals = torch.randn(batch, depth, vocab, generator=gen) * 3.0
    root = torch.randint(0, vocab, (batch,), generator=gen)
    host = build_ddtree_reference(root, marginals, budget, topk=topk)
    for options in (TORCH, TRITON) if seed % 3 == 0 else (TORCH,):
        dev = build_ddtree(root, marginals, budget, topk=topk, options=options)
        assert_same_tree(host, dev, f"B{batch} budget {budget} topk {topk} D {depth} V {vocab} {options.kernels}")


def _path_scores(tree) -> list[list[float]]:
    """Per row, the sorted path scores (sum of draft log-probs from the root) of the valid non-root nodes."""
    score = path_prefix_sum(tree.draft_logprobs.double(), tree.parents)
    keep = tree.valid.clone()
    keep[:, 0] = False
    return [sorted(round(float(v), 4) for v in row[mask]) for row, mask in zip(score, keep, strict=True)]


@pytest.mark.parametrize("options", [pytest.param(TORCH, id="torch"), pytest.param(TRITON, id="triton")])
@pytest.mark.parametrize("budget", [6, 20])
def test_ddtree_device_with_ties_is_valid_and_as_good_as_the_reference(options, budget) -> None:
    """Marginals with many equal logits: the order among ties may differ from the heap's, but the tree is valid
    (every node's parent precedes it) and holds the same path scores (the top-budget set is unique up to ties)."""
    gen = torch.Generator().manual_seed(11)
    marginals = torch.randint(0, 3, (2, 5, 7), generator=gen).float()
    root = torch.tensor([0, 1])
    host = build_ddtree_reference(root, marginals, budget)
    dev = build_ddtree(root, marginals, budget, options=options)
    dev.validate()
    assert _path_scores(dev) == _path_scores(host)


@pytest.mark.parametrize("options", [pytest.param(TORCH, id="torch"), pytest.param(TRITON, id="triton")])
def test_ddtree_device_equals_reference_with_masked_tokens(options) -> None:
    gen = torch.Generator().manual_seed(5)
    marginals = torch.randn(3, 4, 9, generator=gen)
    marginals[:, :, 3:] = float("-inf")  # 3 finite tokens per depth: 3 + 9 + 27 + 81 possible nodes
    marginals[1, 2] = float("-inf")  # row 1: nothing at depth 3 (so nothing below it either)
    root = torch.tensor([1, 2, 3])
    for budget in (5, 40, 200):
        host = build_ddtree_reference(root, marginals, budget)
        dev = build_ddtree(root, marginals, budget, options=options)
        assert_same_tree(host, dev, f"budget {budget}")
    assert int(build_ddtree(root, marginals, 200).num_nodes[1]) == 1 + 3 + 9


def test_ddtree_device_at_vocabulary_width_takes_the_topk_kernel() -> None:
    """Rows long enough for the two-stage top-k kernel (weaver.kernels.vocab_topk; interpreted on CPU): the same
    tree as the reference's torch.topk, masked depths included."""
    gen = torch.Generator().manual_seed(8)
    marginals = 3 * torch.randn(2, 4, 1500, generator=gen)
    marginals[1, 3] = float("-inf")  # row 1: nothing at depth 4
    root = torch.tensor([4, 5])
    for budget in (15, 40):
        host = build_ddtree_reference(root, marginals, budget)
        assert_same_tree(host, build_ddtree(root, marginals, budget, options=TRITON), f"budget {budget}")


# ---------------------------------------------------------------- no host sync
def _meta_weaver_inputs(batch: int, depth: int, max_depth: int, pool: int) -> tuple[tuple, dict]:
    meta = torch.device("meta")
    ad = make_adapter(VOCAB, max_depth=max_depth, pool=pool).to(meta)
    ad.bind(torch.empty(VOCAB, HT, device=meta), torch.empty(VOCAB, HT, device=meta), options=TORCH)
    kw = {
        "adapter": ad,
        "target_hidden": torch.empty(batch, HT, device=meta),
        "draft_hidden": torch.empty(batch, depth, HT, device=meta),
    }
    root = torch.empty(batch, dtype=torch.long, device=meta)
    return (root, torch.empty(batch, depth, VOCAB, device=meta)), kw


@pytest.mark.parametrize("budget, w, c, max_depth", [(64, 4, 8, 5), (32, 4, 1, 5), (8, 1, 3, 2), (1, 1, 1, 1)])
def test_weaver_device_is_sync_free(budget, w, c, max_depth) -> None:
    """On meta tensors any host read of tensor data raises: the device builder runs end to end, the reference
    (which reads the frontier on the host) does not. (The Triton loop's launches take no host data; under
    torch.compile they are custom ops: tests/kernels/test_weaver_frontier.py.)"""
    args, kw = _meta_weaver_inputs(3, 6, max_depth, 6)
    tree = build_weaver(*args, budget, w=w, c=c, options=TORCH, **kw)
    assert tree.device.type == "meta" and tree.size == 1 + trie_size(budget, max_depth, min(c, 6))
    with pytest.raises((RuntimeError, NotImplementedError)):
        build_weaver_reference(*args, budget, w=w, c=c, **kw)


@pytest.mark.parametrize("budget, topk", [(64, None), (8, 3), (1, None)])
def test_ddtree_device_is_sync_free(budget, topk) -> None:
    meta = torch.device("meta")
    root = torch.empty(3, dtype=torch.long, device=meta)
    marginals = torch.empty(3, 6, VOCAB, device=meta)
    tree = build_ddtree(root, marginals, budget, topk=topk)
    assert tree.device.type == "meta" and tree.size == 1 + trie_size(budget, 6, min(topk or budget, VOCAB))
    with pytest.raises((RuntimeError, NotImplementedError)):
        build_ddtree_reference(root, marginals, budget, topk=topk)


DEVICE_CODE = {
    "ddtree": [build_ddtree, plan_ddtree],
    "weaver": [build_weaver, plan_weaver, frontier, weaver_frontier],
}


@pytest.mark.parametrize("method", sorted(DEVICE_CODE))
def test_device_builders_build_no_tensor_from_host_data(method) -> None:
    """Meta tensors catch host reads but not host-to-device copies of Python data (torch.tensor(list),
    new_tensor), which a CUDA graph cannot capture either: the device builders' code (the builder, its plan,
    the frontier loops and their torch bookkeeping) must not contain them."""
    for code in DEVICE_CODE[method]:
        source = inspect.getsource(code)
        for word in ("torch.tensor(", ".new_tensor(", ".tolist(", ".item(", ".cpu(", ".numpy("):
            assert word not in source, f"{code.__name__} uses {word}"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_weaver_trees_are_the_same_with_and_without_the_candidate_table(seed) -> None:
    """Gathering node rows from the candidate table changes no tree (reference and device builders). The table
    is built as a kernel-running adapter builds it (kernels="triton"); the steps run the torch references."""
    args, kw = weaver_args(2, 5, 4, 7, seed)
    ad = kw["adapter"]
    begin = ad.begin_round

    def begin_with_table(*a, **k):
        ad.options = TRITON
        try:
            state = begin(*a, **k)
        finally:
            ad.options = TORCH
        assert state.cand_x is not None
        return state

    trees = [build_weaver_reference(*args, 32, w=4, c=3, **kw), build_weaver(*args, 32, w=4, c=3, **kw)]
    ad.begin_round = begin_with_table
    try:
        trees += [build_weaver_reference(*args, 32, w=4, c=3, **kw), build_weaver(*args, 32, w=4, c=3, **kw)]
    finally:
        del ad.begin_round
    for tree, what in zip(trees[1:], ("device", "reference + table", "device + table")):
        assert_same_tree(trees[0], tree, what)
