"""weaver.kernels.triton.tree_conv1d / conv_state_commit vs the torch references on random trees.

CPU: interpreted at small sizes. GPU (`--triton-full`): compiled, conv_dim of Qwen3.6-27B (10240).
"""

from __future__ import annotations

import pytest
import torch
from helpers.trees import random_batch, random_parents
from helpers.triton_env import DEVICE, FULL  # sets TRITON_INTERPRET before triton loads
from hypothesis import given, settings
from hypothesis import strategies as st

from weaver.kernels import triton as wt
from weaver.ops.conv import causal_conv1d, conv_state_commit, tree_conv1d
from weaver.testing import assert_close, random_root_paths

C_FULL = 10240


def make(B, N, C, W, seed, dtype):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(B, N, C, generator=gen).to(dtype).to(DEVICE)
    w = torch.randn(C, W, generator=gen).to(DEVICE)
    s = torch.randn(B, C, W - 1, generator=gen).to(dtype).to(DEVICE)
    return x, w, s


@settings(max_examples=6 if FULL else 20, deadline=None)
@given(
    B=st.integers(1, 3),
    N=st.integers(1, 256 if FULL else 40),
    C=st.just(C_FULL) if FULL else st.integers(1, 300),
    W=st.sampled_from([1, 2, 4]),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    use_state=st.booleans(),
    silu=st.booleans(),
    structure=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_tree_conv_matches_reference(B, N, C, W, dtype, use_state, silu, structure, seed) -> None:
    x, w, s = make(B, N, C, W, seed, dtype)
    par = random_batch(B, N, seed, device=DEVICE)
    act = "silu" if silu else None
    st_ = s if use_state else None
    y = wt.tree_conv1d(x, w, wt.build_tree_structure(par) if structure else par, st_, act)
    y_ref = tree_conv1d(x, w, par, st_, act)
    assert y.dtype == x.dtype
    assert_close("y", y_ref.float(), y.float(), 1e-6 if dtype == torch.float32 else 1e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tree_conv_reads_a_column_slice_in_place(dtype) -> None:
    """The layer's conv input is the q | k | v columns of the fused projection's output (row stride wider than
    C): the kernel reads it in place, and equals the run on the contiguous copy bit for bit, x_out included."""
    B, N, C, W = 2, 19, 48 if not FULL else C_FULL, 4
    x, w, s = make(B, N, C + 24, W, 3, dtype)
    x_slice, w, s = x[..., :C], w[:C], s[:, :C]
    assert not x_slice.is_contiguous()
    par = random_batch(B, N, 3, device=DEVICE)
    out1, out2 = (torch.full((B, N, C), float("nan"), dtype=dtype, device=DEVICE) for _ in range(2))
    y1 = wt.tree_conv1d(x_slice.contiguous(), w, par, s, x_out=out1)
    y2 = wt.tree_conv1d(x_slice, w, par, s, x_out=out2)
    assert y2.is_contiguous() and torch.equal(y1, y2) and torch.equal(out1, out2) and torch.equal(out2, x_slice)
    assert_close("y", tree_conv1d(x_slice, w, par, s).float(), y2.float(), 1e-6 if dtype == torch.float32 else 1e-2)


def test_tree_conv_on_chain_equals_causal_conv() -> None:
    B, N, C, W = 2, 33, 64 if not FULL else C_FULL, 4
    x, w, s = make(B, N, C, W, 1, torch.float32)
    par = torch.tensor([random_parents(N, 0, "chain")] * B, device=DEVICE)
    y_ref, _ = causal_conv1d(x, w, s)
    assert_close("y", y_ref, wt.tree_conv1d(x, w, par, s), 1e-6)


@settings(max_examples=6 if FULL else 20, deadline=None)
@given(
    B=st.integers(1, 3),
    N=st.integers(1, 40),
    W=st.sampled_from([1, 2, 4, 5]),
    extra_pad=st.integers(0, 3),
    seed=st.integers(0, 10_000),
)
def test_conv_state_commit_matches_reference(B, N, W, extra_pad, seed) -> None:
    C = C_FULL if FULL else 70
    x, _, s = make(B, N, C, W, seed, torch.bfloat16)
    par = random_batch(B, N, seed, device=DEVICE)
    path_t = random_root_paths(par.cpu(), torch.Generator().manual_seed(seed), extra_pad, DEVICE)
    new = wt.conv_state_commit(x, path_t, s)
    assert new.shape == s.shape and new.dtype == x.dtype
    assert torch.equal(new, conv_state_commit(x, path_t, s))


def test_conv_rejects_bad_inputs() -> None:
    x, w, s = make(1, 5, 8, 4, 0, torch.float32)
    par = torch.tensor([[-1, 0, 1, 2, 3]], device=DEVICE)
    with pytest.raises(ValueError, match="weight"):
        wt.tree_conv1d(x, w[:4], par, s)
    with pytest.raises(ValueError, match="state"):
        wt.tree_conv1d(x, w, par, s[:, :, :2])
    with pytest.raises(ValueError, match="activation"):
        wt.tree_conv1d(x, w, par, s, "gelu")
    with pytest.raises(ValueError, match="parents"):
        wt.tree_conv1d(x, w, par[:, :4], s)
    with pytest.raises(ValueError, match="path"):
        wt.conv_state_commit(x, par[0], s)
