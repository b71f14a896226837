"""The commit of every GDN layer in two launches (`gdn_tree_commit_stacked`, `conv_state_commit_stacked`), in place.

Each layer of the stacked result must equal the per-layer torch references (`weaver.ops.gdn.gdn_tree_commit`,
`weaver.ops.conv.conv_state_commit`) on random factors and -1-padded paths; and under torch.compile the custom
ops must keep writing the cache's own memory (no clone of the state and copy back). CPU: interpreted at small
sizes; GPU (`--triton-full`): compiled at the Qwen3.6-27B GDN shape.
"""

from __future__ import annotations

import pytest
import torch
from helpers.trees import random_batch
from helpers.triton_env import DEVICE, FULL  # sets TRITON_INTERPRET before triton loads

from weaver.kernels import gdn as backend
from weaver.kernels import triton as wt
from weaver.ops.conv import conv_state_commit
from weaver.ops.gdn import GDNTreeAux, gdn_tree_commit, l2norm
from weaver.options import RuntimeOptions
from weaver.testing import assert_close, random_root_paths

TRITON = RuntimeOptions(kernels="triton")
SHAPE = dict(H=16, HV=48, K=128, V=128, C=10240) if FULL else dict(H=2, HV=4, K=32, V=16, C=70)


def make_case(L: int, B: int, T: int, seed: int, extra_pad: int, dtype: torch.dtype = torch.bfloat16, H=2, HV=4,
              K=32, V=16, C=70, W=4):  # fmt: skip
    """Stacked factors, pre-conv inputs and caches of L layers, plus one random root path per row."""
    gen = torch.Generator().manual_seed(seed)
    k = l2norm(torch.randn(L, B, T, H, K, generator=gen))
    delta = torch.randn(L, B, T, HV, V, generator=gen)
    G = -2.0 * torch.rand(L, B, T, HV, generator=gen)
    x = torch.randn(L, B, T, C, generator=gen).to(dtype)
    states = torch.randn(L, B, HV, K, V, generator=gen)
    convs = torch.randn(L, B, C, W - 1, generator=gen).to(dtype)
    path = random_root_paths(random_batch(B, T, seed), gen, extra_pad)
    return [t.to(DEVICE) for t in (k, delta, G, x, path, states, convs)]


def per_layer_reference(k, delta, G, x, path, states, convs):
    """Each layer through the torch references (new tensors)."""
    new_states = [gdn_tree_commit(GDNTreeAux(k[i], delta[i], G[i]), path, states[i]) for i in range(len(k))]
    new_convs = [conv_state_commit(x[i], path, convs[i]) for i in range(len(x))]
    return torch.stack(new_states), torch.stack(new_convs)


@pytest.mark.parametrize(
    "L, B, T, extra_pad, seed",
    [(3, 2, 9, 2, 0), (2, 2, 1, 0, 1), (4, 2, 37, 3, 2), (1, 1, 20, 0, 3)],
    ids=lambda v: str(v),
)
def test_stacked_commit_equals_the_per_layer_references(L, B, T, extra_pad, seed) -> None:
    k, delta, G, x, path, states, convs = make_case(L, B, T, seed, extra_pad, **SHAPE)
    want_states, want_convs = per_layer_reference(k, delta, G, x, path, states, convs)
    ptrs = states.data_ptr(), convs.data_ptr()
    wt.gdn_tree_commit_stacked(k, delta, G, path, states)
    wt.conv_state_commit_stacked(x, path, convs)
    assert (states.data_ptr(), convs.data_ptr()) == ptrs
    assert_close("states", want_states, states, 1e-5)
    assert torch.equal(convs, want_convs)


@pytest.mark.parametrize("lengths, pad", [((16, 17, 1, 3), 0), ((32, 20, 9, 2), 3), ((33, 70, 48, 64), 2)],
                         ids=["one-16-chunk", "one-32-chunk", "past-32"])  # fmt: skip
def test_stacked_commit_of_long_paths(lengths, pad) -> None:
    """Chains' paths of the given valid lengths: within one chunk of the path (16 or 32 nodes,
    the leaf's G from registers) and past it (the chunk loop, the leaf loaded)."""
    T, B = max(max(lengths), 1), len(lengths)
    k, delta, G, x, _, states, convs = make_case(2, B, T, seed=11, extra_pad=0, **SHAPE)
    width = max(lengths) + pad
    path = torch.tensor([list(range(n)) + [-1] * (width - n) for n in lengths], device=DEVICE)
    want_states, _ = per_layer_reference(k, delta, G, x, path, states, convs)
    wt.gdn_tree_commit_stacked(k, delta, G, path, states)
    assert_close("states", want_states, states, 1e-5)


@pytest.mark.parametrize("bk, bv", [(16, 16), (16, 128), (None, 16)], ids=["16x16", "rows-16", "cols-16"])
def test_stacked_commit_tiles(bk, bv) -> None:
    """Any state tile (key rows x value columns, clipped to the state) gives the per-layer references' states,
    on a path past one chunk: the fold is separable in both dimensions."""
    k, delta, G, x, _, states, convs = make_case(2, 2, 21, seed=13, extra_pad=0, **SHAPE)
    path = torch.tensor([list(range(19)) + [-1] * 2, [0, 2, 5] + [-1] * 18], device=DEVICE)
    want_states, _ = per_layer_reference(k, delta, G, x, path, states, convs)
    wt.gdn_tree_commit_stacked(k, delta, G, path, states, BK=bk, BV=bv, num_warps=2)
    assert_close("states", want_states, states, 1e-5)


def test_row_views_of_a_bigger_stack_commit_only_their_rows() -> None:
    """Rows [1, 3) of a 4-row stack (what batched decoding's row views hold): the other rows stay as they were."""
    k, delta, G, x, path, states, convs = make_case(2, 4, 11, seed=5, extra_pad=1, **SHAPE)
    rows = slice(1, 3)
    want_states, want_convs = per_layer_reference(k[:, rows].contiguous(), delta[:, rows].contiguous(),
                                                  G[:, rows].contiguous(), x[:, rows].contiguous(), path[rows],
                                                  states[:, rows], convs[:, rows])  # fmt: skip
    before_states, before_convs = states.clone(), convs.clone()
    wt.gdn_tree_commit_stacked(k[:, rows].contiguous(), delta[:, rows].contiguous(), G[:, rows].contiguous(),
                               path[rows], states[:, rows])  # fmt: skip
    wt.conv_state_commit_stacked(x[:, rows].contiguous(), path[rows], convs[:, rows])
    assert_close("states", want_states, states[:, rows], 1e-5)
    assert torch.equal(convs[:, rows], want_convs)
    for r in (0, 3):
        assert torch.equal(states[:, r], before_states[:, r]) and torch.equal(convs[:, r], before_convs[:, r])


def test_stacked_commit_rejects_bad_inputs() -> None:
    k, delta, G, x, path, states, convs = make_case(2, 2, 5, seed=0, extra_pad=0, **SHAPE)
    with pytest.raises(ValueError, match="state must be"):
        wt.gdn_tree_commit_stacked(k, delta, G, path, states[:1])
    with pytest.raises(ValueError, match="contiguous float32"):
        wt.gdn_tree_commit_stacked(k.transpose(1, 2).contiguous().transpose(1, 2), delta, G, path, states)
    with pytest.raises(ValueError, match="path"):
        wt.gdn_tree_commit_stacked(k, delta, G, path[0], states)
    with pytest.raises(ValueError, match="BK must be a power of two"):
        wt.gdn_tree_commit_stacked(k, delta, G, path, states, BK=24)
    with pytest.raises(ValueError, match="matching"):
        wt.conv_state_commit_stacked(x, path, convs[:1])
    with pytest.raises(ValueError, match="one dtype"):
        wt.conv_state_commit_stacked(x, path, convs.float())


# torch.compile backends: inductor as the engine's commit stage on CUDA (and on the CPU, where the graph is the two
# custom ops and nothing for inductor to build); aot_eager as well (functionalization of the mutating ops)
@pytest.mark.parametrize("backend_name", ["inductor"] if FULL else ["aot_eager", "inductor"])
@torch.no_grad()
def test_stacked_commit_stays_in_place_under_torch_compile(backend_name) -> None:
    """The dispatcher's custom ops inside a torch.compile'd commit write the cache's own tensors: same addresses,
    the reference values, and (inductor) no copy of the state or conv window in the generated code."""
    k, delta, G, x, path, states, convs = make_case(3, 2, 9, seed=7, extra_pad=2, **SHAPE)
    want_states, want_convs = per_layer_reference(k, delta, G, x, path, states, convs)
    ptrs = states.data_ptr(), convs.data_ptr()

    def commit(k, delta, G, x, path, states, convs):
        backend.commit_stacked(k, delta, G, x, path, states, convs, TRITON)

    compiled = torch.compile(commit, backend=backend_name, fullgraph=True)
    try:
        if backend_name == "inductor":
            from helpers.inductor import compiled_call

            _, body = compiled_call(compiled, k, delta, G, x, path, states, convs)
            body = body.split("return ", 1)[0]  # the compiled graph's code
            ops = [line.strip().split("(")[0] for line in body.splitlines() if line.strip().startswith("torch.ops.")]
            assert ops == ["torch.ops.weaver.gdn_tree_commit_stacked.default",
                           "torch.ops.weaver.conv_state_commit_stacked.default"], body  # fmt: skip
            for copy in ("empty_strided", "copy_", "clone", "extern_kernels", "kernel"):
                assert copy not in body.replace("commit_stacked", ""), f"the compiled commit copies:\n{body}"
        else:
            compiled(k, delta, G, x, path, states, convs)
    finally:
        torch._dynamo.reset()
    assert (states.data_ptr(), convs.data_ptr()) == ptrs
    assert_close("states", want_states, states, 1e-5)
    assert torch.equal(convs, want_convs)
