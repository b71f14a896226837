"""weaver.kernels.triton.build_tree_structure vs the torch tree helpers, on random trees (hypothesis).

CPU: the kernels run under TRITON_INTERPRET=1 at small sizes. GPU: `--triton-full` runs the same
tests compiled on CUDA at full size (scripts/gpu/kernels.sh).
"""

from __future__ import annotations

import pytest
import torch
from helpers.trees import KINDS, random_batch, random_parents
from helpers.triton_env import DEVICE, FULL  # sets TRITON_INTERPRET before triton loads
from hypothesis import given, settings
from hypothesis import strategies as st

from weaver.kernels import triton as wt
from weaver.ops.tree import ancestor_mask, node_depth


@pytest.mark.parametrize("T", [1, 2, 31, 32, 33, 70] + ([256] if FULL else []), ids=lambda t: f"T{t}")
@pytest.mark.parametrize("kind", KINDS)
def test_structure_literal_kinds(T: int, kind: str) -> None:
    par = torch.tensor([random_parents(T, T, kind)], device=DEVICE)
    s = wt.build_tree_structure(par)
    assert s.anc.dtype == torch.int8 and s.depth.dtype == torch.int32 and s.parents.dtype == torch.int32
    assert torch.equal(s.anc.bool().cpu(), ancestor_mask(par).cpu())
    assert torch.equal(s.depth.long().cpu(), node_depth(par).cpu())


@settings(max_examples=8 if FULL else 20, deadline=None)
@given(B=st.integers(1, 3), T=st.integers(1, 256 if FULL else 48), seed=st.integers(0, 10_000))
def test_structure_random_batches(B: int, T: int, seed: int) -> None:
    par = random_batch(B, T, seed, device=DEVICE)
    s = wt.build_tree_structure(par)
    assert torch.equal(s.anc.bool().cpu(), ancestor_mask(par).cpu())
    assert torch.equal(s.depth.long().cpu(), node_depth(par).cpu())
    assert torch.equal(s.parents.long().cpu(), par.cpu())


def test_structure_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match="parents must be"):
        wt.build_tree_structure(torch.zeros(3, dtype=torch.long, device=DEVICE))
    with pytest.raises(ValueError, match="integer"):
        wt.build_tree_structure(torch.zeros(1, 3, device=DEVICE))


def test_triton_available_is_bool() -> None:
    assert isinstance(wt.triton_available(), bool)
    assert wt.triton_available() == (torch.cuda.is_available())
