"""DraftTree: construction helpers, padding/stacking, the ancestor-or-self mask and validation."""

from __future__ import annotations

import random

import pytest
import torch
from helpers.trees import random_tree

from weaver.ops.tree import ancestor_mask
from weaver.options import RuntimeOptions
from weaver.speculative.tree import DraftTree


def walk_mask(parents: list[int], n: int) -> torch.Tensor:
    """Reference ancestor-or-self mask by walking up from every node (pads: only themselves)."""
    m = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        j = i
        while j >= 0:
            m[i, j] = True
            j = parents[j] if j < len(parents) else -1
    return m


def test_chain_layout():
    root = torch.tensor([7, 9])
    drafts = torch.tensor([[1, 2, 3], [4, 5, 6]])
    lp = torch.tensor([[-0.1, -0.2, -0.3], [-1.0, -2.0, -3.0]])
    t = DraftTree.chain(root, drafts, lp)
    t.validate()
    assert t.tokens.tolist() == [[7, 1, 2, 3], [9, 4, 5, 6]]
    assert t.parents.tolist() == [[-1, 0, 1, 2]] * 2
    assert t.depth.tolist() == [[0, 1, 2, 3]] * 2
    assert t.valid.all()
    assert torch.equal(t.draft_logprobs[:, 1:], lp) and (t.draft_logprobs[:, 0] == 0).all()
    assert torch.equal(t.ancestor_mask(), torch.ones(4, 4, dtype=torch.bool).tril().expand(2, 4, 4))
    assert t.num_nodes.tolist() == [4, 4]
    assert t.children(0, 1) == [2] and t.children(1, 3) == []
    assert t.max_depth() == 3


def test_root_only():
    t = DraftTree.root_only(torch.tensor([3, 4, 5]))
    t.validate()
    assert t.tokens.shape == (3, 1)
    assert t.parents.tolist() == [[-1]] * 3 and t.num_nodes.tolist() == [1, 1, 1]
    assert t.ancestor_mask().all()


@pytest.mark.parametrize("seed", range(8))
def test_ancestor_mask_matches_walk(seed):
    rng = random.Random(seed)
    lists = [random_tree(rng, vocab=4, max_depth=4, max_nodes=12) for _ in range(3)]
    t = DraftTree.from_parent_lists([p for p, _ in lists], [k for _, k in lists])
    t.validate()
    mask = t.ancestor_mask()
    assert mask.shape == (3, t.size, t.size)
    for b, (par, _) in enumerate(lists):
        assert torch.equal(mask[b], walk_mask(par, t.size)), f"row {b}"
        assert t.num_nodes[b] == len(par)
        for i in range(len(par)):
            assert t.children(b, i) == [j for j in range(len(par)) if par[j] == i]


def test_with_ancestors_carries_the_computed_mask():
    rng = random.Random(3)
    lists = [random_tree(rng, vocab=4, max_depth=4, max_nodes=12) for _ in range(2)]
    t = DraftTree.from_parent_lists([p for p, _ in lists], [k for _, k in lists])
    assert t.ancestors is None
    carried = t.with_ancestors()
    assert torch.equal(carried.ancestors, t.ancestor_mask()) and carried.ancestor_mask() is carried.ancestors
    assert carried.with_ancestors() is carried
    chain = DraftTree.chain(torch.tensor([1, 2]), torch.tensor([[3, 4, 5], [6, 7, 8]]))
    plain = DraftTree(chain.tokens, chain.parents, chain.depth, chain.valid)  # no stored mask
    assert torch.equal(chain.ancestor_mask(), plain.ancestor_mask())  # the chain's tril mask is its true one
    with pytest.raises(ValueError, match="ancestors has shape"):
        DraftTree(t.tokens, t.parents, t.depth, t.valid, ancestors=torch.ones(2, 3, 3, dtype=torch.bool))


@pytest.mark.parametrize("kernels", ["torch", "triton"])
def test_with_ancestors_through_the_structure_kernel_equals_the_reference(kernels):
    """`with_ancestors(options)`: the Triton structure kernel (interpreted on CPU) gives the reference mask, as
    bool, pad nodes included."""
    rng = random.Random(7)
    lists = [random_tree(rng, vocab=5, max_depth=6, max_nodes=20) for _ in range(3)]
    t = DraftTree.from_parent_lists([p for p, _ in lists], [k for _, k in lists])  # rows padded to one N
    got = t.with_ancestors(RuntimeOptions(kernels=kernels)).ancestors
    assert got.dtype == torch.bool and torch.equal(got, ancestor_mask(t.parents))


def test_pad_and_stack():
    a = DraftTree.from_parent_lists([[-1, 0, 0, 1]], [[5, 1, 2, 3]], [[0.0, -0.5, -1.0, -0.2]])
    b = DraftTree.chain(torch.tensor([8]), torch.tensor([[4]]))
    s = DraftTree.stack([a, b])
    s.validate()
    assert s.tokens.shape == (2, 4)
    assert s.valid.tolist() == [[True] * 4, [True, True, False, False]]
    assert s.parents[1].tolist() == [-1, 0, -1, -1]
    assert s.num_nodes.tolist() == [4, 2]
    mask = s.ancestor_mask()
    assert torch.equal(mask[1, 2:], torch.eye(4, dtype=torch.bool)[2:])  # pads: only themselves
    assert not mask[1, :2, 2:].any()  # and nobody's ancestor
    p = a.pad_to(6)
    assert p.size == 6 and p.pad_to(6) is p
    assert torch.equal(p.ancestor_mask()[0, :4, :4], a.ancestor_mask()[0])
    with pytest.raises(ValueError, match="cannot pad a tree of 6 nodes to 3"):
        p.pad_to(3)


def test_device_agnostic_meta():
    t = DraftTree.chain(
        torch.zeros(2, dtype=torch.long, device="meta"), torch.zeros(2, 5, dtype=torch.long, device="meta")
    )
    assert t.pad_to(9).ancestor_mask().shape == (2, 9, 9)
    assert t.device.type == "meta"


def _tree(**over):
    base = dict(
        tokens=torch.tensor([[5, 1, 2, 3]]),
        parents=torch.tensor([[-1, 0, 0, 1]]),
        depth=torch.tensor([[0, 1, 1, 2]]),
        valid=torch.tensor([[True, True, True, True]]),
    )
    base.update({k: torch.tensor(v) for k, v in over.items()})
    return DraftTree(**base)


@pytest.mark.parametrize(
    "over, message",
    [
        (dict(parents=[[0, 0, 0, 1]]), "root must be valid with parent -1"),
        (
            dict(parents=[[-1, 0, 3, 1]]),
            r"row 0 node 2: parent 3 breaks topological order \(need 0 <= p < 2\)",
        ),
        (dict(parents=[[-1, 0, -1, 1]], depth=[[0, 1, 0, 2]]), "row 0 node 2: parent -1 breaks"),
        (dict(depth=[[0, 1, 1, 3]]), r"row 0 node 3: depth 3 != depth of parent \+ 1 = 2"),
        (dict(tokens=[[5, 1, 1, 3]]), "sibling nodes 1 and 2 .parent 0. both carry token 1"),
        (dict(valid=[[True, False, True, True]]), "row 0 pad node 1: parent must be -1, got 0"),
    ],
)
def test_validate_errors(over, message):
    with pytest.raises(ValueError, match=message):
        _tree(**over).validate()


def test_validate_pad_parent_and_shapes():
    t = _tree(parents=[[-1, -1, 0, 1]], valid=[[True, False, True, True]], depth=[[0, 0, 1, 2]])
    with pytest.raises(ValueError, match="row 0 node 3: parent 1 is a pad node"):
        t.validate()
    with pytest.raises(ValueError, match="depth has shape"):
        DraftTree(
            torch.zeros(1, 3, dtype=torch.long),
            torch.zeros(1, 3, dtype=torch.long),
            torch.zeros(1, 2, dtype=torch.long),
            torch.ones(1, 3, dtype=torch.bool),
        )
    with pytest.raises(ValueError, match=r"row 0 node 2: parent 2 not in \[0, 2\)"):
        DraftTree.from_parent_lists([[-1, 0, 2]], [[0, 1, 2]])
