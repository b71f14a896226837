"""weaver.ops.conv: sequence conv vs F.conv1d and HF, tree conv and commit vs per-path sequence conv."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from weaver.ops.conv import causal_conv1d, conv_state_commit, tree_conv1d
from weaver.testing import assert_close, root_path

SHAPES = [
    pytest.param(1, 1, 3, 4, id="B1-T1-C3-W4"),
    pytest.param(2, 7, 5, 4, id="B2-T7-C5-W4"),
    pytest.param(3, 2, 8, 4, id="B3-T2-C8-W4"),
    pytest.param(2, 9, 6, 2, id="B2-T9-C6-W2"),
    pytest.param(1, 5, 4, 1, id="B1-T5-C4-W1"),
    pytest.param(2, 33, 16, 3, id="B2-T33-C16-W3"),
]


def conv_reference(x: torch.Tensor, weight: torch.Tensor, state: torch.Tensor | None, act: str | None):
    """F.conv1d (cross-correlation) over [state ; x] in float64, channels first; y is [B, T, C]."""
    B, T, C = x.shape
    W = weight.shape[1]
    xc = x.double().transpose(1, 2)
    xc = F.pad(xc, (W - 1, 0)) if state is None else torch.cat([state.double(), xc], dim=2)
    y = F.conv1d(xc, weight.double()[:, None, :], groups=C)
    assert y.shape[2] == T
    return (F.silu(y) if act == "silu" else y).transpose(1, 2)


@pytest.mark.parametrize("act", [None, "silu"], ids=["linear", "silu"])
@pytest.mark.parametrize("with_state", [False, True], ids=["nostate", "state"])
@pytest.mark.parametrize("B, T, C, W", SHAPES)
def test_causal_conv1d_matches_conv1d(B: int, T: int, C: int, W: int, with_state: bool, act: str | None):
    gen = torch.Generator().manual_seed(B * 100 + T * 10 + W)
    x = torch.randn(B, T, C, generator=gen)
    weight = torch.randn(C, W, generator=gen)
    state = torch.randn(B, C, W - 1, generator=gen) if with_state else None
    y, new_state = causal_conv1d(x.clone(), weight, None if state is None else state.clone(), act)
    assert y.dtype == x.dtype and new_state.dtype == x.dtype
    assert_close("y", conv_reference(x, weight, state, act), y, 1e-5)
    prev = torch.zeros(B, C, W - 1) if state is None else state
    assert torch.equal(new_state, torch.cat([prev, x.transpose(1, 2)], dim=2)[:, :, T:])


@pytest.mark.parametrize("split", [0, 1, 3, 6, 7])
def test_causal_conv1d_in_pieces_equals_one_pass(split: int) -> None:
    """Carrying the state across calls (prefill then decode steps) is the same as one call."""
    gen = torch.Generator().manual_seed(split)
    x = torch.randn(2, 7, 6, generator=gen)
    weight = torch.randn(6, 4, generator=gen)
    state = torch.randn(2, 6, 3, generator=gen)
    y, s = causal_conv1d(x, weight, state)
    y1, s1 = causal_conv1d(x[:, :split], weight, state)
    y2, s2 = causal_conv1d(x[:, split:], weight, s1)
    assert_close("y", y, torch.cat([y1, y2], dim=1), 1e-6)
    assert torch.equal(s, s2)


def test_causal_conv1d_matches_hf_qwen3_5() -> None:
    hf = pytest.importorskip("transformers.models.qwen3_5.modeling_qwen3_5")
    gen = torch.Generator().manual_seed(0)
    B, T, C, W = 2, 6, 10, 4
    x = torch.randn(B, T, C, generator=gen)
    weight = torch.randn(C, W, generator=gen)
    y, state = causal_conv1d(x, weight)
    ref = hf.causal_conv1d_fn(x.transpose(1, 2), weight, None, activation="silu").transpose(1, 2)
    assert_close("prefill", ref, y, 1e-6)
    x_new = torch.randn(B, 1, C, generator=gen)
    hf_state = state.clone()  # HF updates its state in place
    ref = hf.causal_conv1d_update(x_new.transpose(1, 2), hf_state, weight, None, "silu").transpose(1, 2)
    y_new, state_new = causal_conv1d(x_new, weight, state)
    assert_close("decode", ref, y_new, 1e-6)
    assert torch.equal(state_new, hf_state)


def test_causal_conv1d_bf16_keeps_raw_inputs() -> None:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 5, 8, generator=gen).bfloat16()
    weight = torch.randn(8, 4, generator=gen)
    state = torch.randn(2, 8, 3, generator=gen).bfloat16()
    y, new_state = causal_conv1d(x, weight, state)
    assert y.dtype == torch.bfloat16 and new_state.dtype == torch.bfloat16
    assert torch.equal(new_state, x[:, -3:].transpose(1, 2))
    assert_close("y", conv_reference(x.float(), weight, state.float(), "silu"), y, 1e-2)


def test_conv_errors() -> None:
    x, w = torch.zeros(1, 2, 3), torch.zeros(3, 4)
    with pytest.raises(ValueError, match="activation"):
        causal_conv1d(x, w, activation="relu")
    with pytest.raises(ValueError, match=r"state must be \[B, C, W-1\] = \(1, 3, 3\)"):
        causal_conv1d(x, w, torch.zeros(1, 3, 4))
    with pytest.raises(ValueError, match="weight"):
        causal_conv1d(x, torch.zeros(4, 4))
    with pytest.raises(ValueError, match="parents"):
        tree_conv1d(x, w, torch.tensor([[-1, 0, 1]]))


# ---------------------------------------------------------------- trees


def random_parents(rng: random.Random, n: int) -> list[int]:
    """A random topological tree: chain, star, uniform or deep, with up to 2 isolated pad nodes."""
    kind = rng.choice(["chain", "star", "random", "deep"])
    parents = [-1]
    for i in range(1, n):
        if kind == "chain" or (kind == "deep" and rng.random() < 0.85):
            parents.append(i - 1)
        elif kind == "star":
            parents.append(0)
        else:
            parents.append(rng.randrange(i))
    for i in rng.sample(range(1, n), min(2, n - 1)) if rng.random() < 0.5 else []:
        parents[i] = -1  # a pad-style extra root (its children follow it); still topological
    return parents




@settings(max_examples=50, deadline=None)
@given(
    b=st.integers(1, 3),
    n=st.integers(1, 40),
    w=st.sampled_from([2, 3, 4]),
    with_state=st.booleans(),
    rng=st.randoms(use_true_random=False),
)
def test_tree_conv_equals_path_conv(b: int, n: int, w: int, with_state: bool, rng: random.Random) -> None:
    """Every node's output is the last output of a sequence conv over [state ; its root path]."""
    rows = [random_parents(rng, n) for _ in range(b)]
    parents = torch.tensor(rows)
    gen = torch.Generator().manual_seed(rng.randrange(2**31))
    C = 5
    x = torch.randn(b, n, C, generator=gen)
    weight = torch.randn(C, w, generator=gen)
    state = torch.randn(b, C, w - 1, generator=gen) if with_state else None
    y = tree_conv1d(x, weight, parents, state)
    for bi, row in enumerate(rows):
        s = None if state is None else state[bi : bi + 1]
        for i in range(n):
            path = root_path(row, i)
            ref, _ = causal_conv1d(x[bi : bi + 1, path], weight, s)
            assert_close(f"row {bi} node {i} path {path}", ref[0, -1], y[bi, i], 1e-6)


@settings(max_examples=50, deadline=None)
@given(
    b=st.integers(1, 3),
    n=st.integers(1, 30),
    w=st.sampled_from([1, 2, 4]),
    rng=st.randoms(use_true_random=False),
)
def test_conv_state_commit_equals_path_state(b: int, n: int, w: int, rng: random.Random) -> None:
    """Committing a root-to-node path gives the state a sequence conv along that path ends in."""
    rows = [random_parents(rng, n) for _ in range(b)]
    paths = [root_path(row, rng.randrange(n)) for row in rows]
    P = max(len(p) for p in paths) + rng.randrange(3)  # extra -1 columns are allowed
    path = torch.tensor([p + [-1] * (P - len(p)) for p in paths])
    gen = torch.Generator().manual_seed(rng.randrange(2**31))
    C = 4
    x = torch.randn(b, n, C, generator=gen)
    state = torch.randn(b, C, w - 1, generator=gen)
    out = conv_state_commit(x, path, state)
    assert out.shape == (b, C, w - 1)
    for bi, p in enumerate(paths):
        _, ref = causal_conv1d(x[bi : bi + 1, p], torch.ones(C, w), state[bi : bi + 1])
        assert torch.equal(out[bi], ref[0]), f"row {bi} path {p}"


def test_tree_conv_ignores_flattened_neighbours() -> None:
    """Node order is not time order: a star's leaves see the root and the state, never each other."""
    x = torch.arange(1.0, 5.0).reshape(1, 4, 1)  # root 1, leaves 2, 3, 4
    weight = torch.tensor([[1000.0, 100.0, 10.0, 1.0]])
    state = torch.tensor([[[7.0, 8.0, 9.0]]])
    y = tree_conv1d(x, weight, torch.tensor([[-1, 0, 0, 0]]), state, activation=None)
    # leaf j: window (state[-2], state[-1], root, leaf) = (8, 9, 1, x_j)
    assert y[0, :, 0].tolist() == [7000 + 800 + 90 + 1, 8000 + 900 + 10 + 2, 8913, 8914]
