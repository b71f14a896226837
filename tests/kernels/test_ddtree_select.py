"""weaver.kernels.triton.ddtree_select (one program per row) vs the torch references weaver.ops.ddtree_select
(the selection) and ddtree_tree (the tree's fields).

CPU: the kernel runs under TRITON_INTERPRET=1 at small sizes; GPU (`--triton-full`): compiled, up to the
kernel's 128 nodes. Ties are defined (the lower flat index, then the lower column, first), so the two must agree
exactly, ties and -inf included.
"""

from __future__ import annotations

import pytest
import torch
from helpers.triton_env import DEVICE, FULL  # sets TRITON_INTERPRET before triton loads
from hypothesis import given, settings
from hypothesis import strategies as st

from weaver.kernels.ddtree_select import DDTREE_KERNEL_MAX_NODES, ddtree_tree_op, fused_ddtree_tree
from weaver.kernels.triton.ddtree_select import ddtree_select, ddtree_tree, pair_table
from weaver.ops.ddtree_select import ddtree_select as reference
from weaver.ops.ddtree_select import ddtree_tree as tree_reference
from weaver.ops.ddtree_select import level_sizes
from weaver.options import RuntimeOptions


def sorted_logq(b: int, depth: int, k: int, seed: int, ties: bool, masked: bool) -> torch.Tensor:
    """[B, D, k] float64 log-probs, descending per depth; `ties`: values on a coarse grid; `masked`: -inf tails."""
    gen = torch.Generator().manual_seed(seed)
    x = -torch.rand(b, depth, k, generator=gen, dtype=torch.float64) * 6
    if ties:
        x = (x * 2).round() / 2
    if masked:
        cut = torch.randint(0, k + 1, (b, depth, 1), generator=gen)
        x = torch.where(torch.arange(k) >= cut, float("-inf"), x)
    return x.sort(dim=-1, descending=True).values.to(DEVICE)


def test_pairs_are_the_hyperbola_in_flat_order() -> None:
    flat = pair_table(16, 16, torch.device("cpu")).tolist()
    assert flat == sorted(flat) and len(flat) == sum(16 // a for a in range(1, 17))  # 50
    assert all((f // 16 + 1) * (f % 16 + 1) <= 16 for f in flat)
    assert len(pair_table(64, 64, torch.device("cpu"))) == sum(64 // a for a in range(1, 65))  # 280
    assert pair_table(5, 2, torch.device("cpu")).tolist() == [0, 1, 2, 3, 4, 6, 8]  # j < k = 2


@settings(max_examples=6 if FULL else 25, deadline=None)
@given(
    b=st.integers(1, 3),
    depth=st.integers(1, 15 if FULL else 6),
    k=st.sampled_from([1, 2, 3, 5, 16, 64]) if FULL else st.integers(1, 9),
    nodes=st.sampled_from([1, 16, 64, 128]) if FULL else st.integers(1, 24),
    ties=st.booleans(),
    masked=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_kernel_equals_reference(b, depth, k, nodes, ties, masked, seed) -> None:
    nodes = min(nodes, sum(k**d for d in range(1, depth + 1)))  # as trie_size caps a tree
    lq = sorted_logq(b, depth, k, seed, ties, masked)
    want = reference(lq, nodes)
    got = ddtree_select(lq, nodes)
    assert got[0].shape == want[0].shape == (b, sum(level_sizes(depth, k, nodes)))
    for name, g, w in zip(("score", "flat", "order"), got, want, strict=True):
        assert torch.equal(g, w), f"{name} differs: B{b} D{depth} k{k} nodes {nodes} ties {ties} masked {masked}"
    ids = torch.randint(0, 1000, lq.shape, generator=torch.Generator().manual_seed(seed)).to(DEVICE)
    root = torch.arange(b, device=DEVICE) + 7
    for name, g, w in zip(FIELDS, ddtree_tree(lq, ids, root, nodes), tree_reference(lq, ids, root, nodes), strict=True):
        assert g.dtype == w.dtype and torch.equal(g, w), f"tree {name} differs: B{b} D{depth} k{k} nodes {nodes}"


FIELDS = ("tokens", "parents", "depth", "valid", "logq")


def test_dispatch_and_op_agree_with_the_reference() -> None:
    lq = sorted_logq(2, 5, 8, 3, ties=True, masked=True)
    ids = torch.arange(lq.numel(), device=DEVICE).view(lq.shape)
    root = torch.tensor([3, 4], device=DEVICE)
    want = tree_reference(lq, ids, root, 20)
    for got in (fused_ddtree_tree(lq, ids, root, 20, RuntimeOptions(kernels="triton")),
                ddtree_tree_op(lq, ids, root, 20),
                fused_ddtree_tree(lq, ids, root, 20, RuntimeOptions(kernels="torch"))):  # fmt: skip
        assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    big = sorted_logq(1, 3, 200, 4, ties=False, masked=False)  # past the kernel: the reference runs
    big_ids, nodes = torch.zeros_like(big, dtype=torch.long), DDTREE_KERNEL_MAX_NODES + 1
    got = fused_ddtree_tree(big, big_ids, root[:1], nodes, RuntimeOptions(kernels="triton"))
    assert all(torch.equal(g, w) for g, w in zip(got, tree_reference(big, big_ids, root[:1], nodes), strict=True))


def test_bad_arguments_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="float64"):
        ddtree_select(torch.zeros(1, 2, 3, dtype=torch.float32, device=DEVICE), 4)
    with pytest.raises(ValueError, match="nodes"):
        ddtree_select(torch.zeros(1, 2, 3, dtype=torch.float64, device=DEVICE), 0)
