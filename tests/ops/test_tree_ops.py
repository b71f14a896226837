"""weaver.ops.tree against a plain Python walk up the parent pointers, on random batched trees."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from weaver.ops.tree import ancestor_mask, node_depth, path_prefix_sum, validate_parents
from weaver.testing import root_path

KINDS = ("chain", "star", "random", "deep", "binary")


def make_parents(rng: random.Random, n: int, kind: str, n_pad: int) -> list[int]:
    """A topological tree of n - n_pad real nodes of the given kind, n_pad isolated pad nodes mixed in."""
    n_real = n - n_pad
    real = [-1]
    for i in range(1, n_real):
        if kind == "chain":
            real.append(i - 1)
        elif kind == "star":
            real.append(0)
        elif kind == "binary":
            real.append((i - 1) // 2)
        elif kind == "deep":
            real.append(i - 1 if rng.random() < 0.9 else rng.randrange(i))
        else:
            real.append(rng.randrange(i))
    slots = sorted(rng.sample(range(1, n), n_pad)) if n_pad else []
    new_id, parents, r = {}, [], 0
    for pos in range(n):
        if pos in slots:
            parents.append(-1)
        else:
            new_id[r] = pos
            parents.append(-1 if real[r] < 0 else new_id[real[r]])
            r += 1
    return parents




@st.composite
def tree_batches(draw, max_b: int = 3, max_n: int = 64) -> list[list[int]]:
    """B rows of N nodes each, every row its own kind of tree and number of pad nodes."""
    b = draw(st.integers(1, max_b))
    n = draw(st.integers(1, max_n))
    rng = draw(st.randoms(use_true_random=False))
    rows = []
    for _ in range(b):
        kind = draw(st.sampled_from(KINDS))
        n_pad = draw(st.integers(0, min(3, n - 1)))
        rows.append(make_parents(rng, n, kind, n_pad))
    return rows


@settings(max_examples=60, deadline=None)
@given(rows=tree_batches(), seed=st.integers(0, 2**16))
def test_tree_helpers_match_root_path(rows: list[list[int]], seed: int) -> None:
    parents = torch.tensor(rows)
    B, N = parents.shape
    validate_parents(parents)
    mask = ancestor_mask(parents)
    depth = node_depth(parents)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(B, N, 2, 3, generator=gen, dtype=torch.float64)
    xi = torch.randint(-5, 5, (B, N), generator=gen)
    sums, isums = path_prefix_sum(x, parents), path_prefix_sum(xi, parents)
    assert mask.shape == (B, N, N) and mask.dtype == torch.bool
    assert depth.dtype == torch.long and sums.shape == x.shape and isums.dtype == xi.dtype
    for b, row in enumerate(rows):
        for i in range(N):
            path = root_path(row, i)
            expect = torch.zeros(N, dtype=torch.bool)
            expect[path] = True
            assert torch.equal(mask[b, i], expect), f"row {b} node {i}: path {path}"
            assert int(depth[b, i]) == len(path) - 1
            torch.testing.assert_close(sums[b, i], x[b, path].sum(0), rtol=1e-12, atol=1e-12)
            assert int(isums[b, i]) == int(xi[b, path].sum())


@pytest.mark.parametrize("n", [1, 2, 3, 63, 64, 65, 256, 257], ids=lambda n: f"N{n}")
def test_long_chain_reaches_the_root(n: int) -> None:
    """A chain is the deepest tree; the pointer-jumping loop must cover depth N-1 for any N."""
    parents = torch.arange(-1, n - 1)[None]
    mask = ancestor_mask(parents)[0]
    assert torch.equal(mask, torch.ones(n, n, dtype=torch.bool).tril())
    assert torch.equal(node_depth(parents)[0], torch.arange(n))
    g = torch.rand(1, n, dtype=torch.float64)
    torch.testing.assert_close(path_prefix_sum(g, parents), g.cumsum(1), rtol=1e-12, atol=1e-12)


def test_star_and_pad_nodes() -> None:
    # row 0: star with root 0; row 1: root, child, pad node 2, grandchild 3 of node 1, pad node 4
    parents = torch.tensor([[-1, 0, 0, 0, 0], [-1, 0, -1, 1, -1]])
    mask = ancestor_mask(parents)
    star = torch.eye(5, dtype=torch.bool)
    star[:, 0] = True
    assert torch.equal(mask[0], star)
    expect = torch.eye(5, dtype=torch.bool)
    expect[1, 0] = expect[3, 0] = expect[3, 1] = True
    assert torch.equal(mask[1], expect)
    assert node_depth(parents).tolist() == [[0, 1, 1, 1, 1], [0, 1, 0, 2, 0]]


def test_path_prefix_sum_shape_error() -> None:
    with pytest.raises(ValueError, match=r"\[B, N\] = \(1, 3\)"):
        path_prefix_sum(torch.zeros(1, 4), torch.tensor([[-1, 0, 1]]))


@pytest.mark.parametrize(
    "parents, match",
    [
        pytest.param([[0, 0]], r"parents\[0, 0\] = 0", id="root-not-minus-one"),
        pytest.param([[-1, 1]], r"parents\[0, 1\] = 1", id="self-parent"),
        pytest.param([[-1, 0, 2]], r"parents\[0, 2\] = 2", id="not-topological"),
        pytest.param([[-1, 0], [-1, -2]], r"parents\[1, 1\] = -2", id="below-minus-one"),
    ],
)
def test_validate_parents_rejects(parents: list[list[int]], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        validate_parents(torch.tensor(parents))


def test_validate_parents_rejects_float_and_shape() -> None:
    with pytest.raises(ValueError, match="integer"):
        validate_parents(torch.tensor([[-1.0, 0.0]]))
    with pytest.raises(ValueError, match=r"\[B, N\]"):
        validate_parents(torch.tensor([-1, 0]))
