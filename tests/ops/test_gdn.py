"""weaver.ops.gdn: recurrent spec vs an independent naive form; chunk and tree forms vs the recurrent spec."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from weaver.ops.gdn import GDNTreeAux, gdn_chunk, gdn_recurrent, gdn_tree, gdn_tree_commit, l2norm
from weaver.testing import assert_close, root_path


def make_inputs(B, T, H, HV, K, V, seed, dtype=torch.float32, g_min=-2.0, h0=True):
    """Random q, k, v, g in [g_min, 0], beta in (0, 1), initial state (or None)."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=gen, dtype=torch.float64)
    k = torch.randn(B, T, H, K, generator=gen, dtype=torch.float64)
    v = torch.randn(B, T, HV, V, generator=gen, dtype=torch.float64)
    g = g_min * torch.rand(B, T, HV, generator=gen, dtype=torch.float64)
    beta = torch.rand(B, T, HV, generator=gen, dtype=torch.float64)
    s0 = torch.randn(B, HV, K, V, generator=gen, dtype=torch.float64) if h0 else None
    return [x.to(dtype) for x in (q, k, v, g, beta)] + [None if s0 is None else s0.to(dtype)]


def naive_closed_form(q, k, v, g, beta, s0, scale):
    """gdn.md §1.2 closed form H_t = a_t (I - b_t k_t k_t^T) H_{t-1} + b_t k_t v_t^T, per head, float64."""
    B, T, H, K = q.shape
    HV, V = v.shape[2:]
    o = torch.zeros(B, T, HV, V, dtype=torch.float64)
    hs = torch.zeros(B, HV, K, V, dtype=torch.float64)
    eye = torch.eye(K, dtype=torch.float64)
    for b in range(B):
        for hv in range(HV):
            kh = hv // (HV // H)
            S = torch.zeros(K, V, dtype=torch.float64) if s0 is None else s0[b, hv].double()
            for t in range(T):
                kt, bt = k[b, t, kh].double(), float(beta[b, t, hv])
                S = float(g[b, t, hv].exp()) * (eye - bt * torch.outer(kt, kt)) @ S
                S = S + bt * torch.outer(kt, v[b, t, hv].double())
                o[b, t, hv] = S.T @ (scale * q[b, t, kh].double())
            hs[b, hv] = S
    return o, hs


@pytest.mark.parametrize(
    "B, T, H, HV, K, V, l2",
    [
        pytest.param(1, 1, 1, 1, 8, 8, False, id="B1-T1-H1-HV1-K8-V8"),
        pytest.param(2, 9, 2, 4, 8, 6, True, id="B2-T9-H2-HV4-K8-V6-l2"),
        pytest.param(1, 5, 1, 3, 4, 5, False, id="B1-T5-H1-HV3-K4-V5"),
    ],
)
def test_recurrent_matches_closed_form(B, T, H, HV, K, V, l2) -> None:
    q, k, v, g, beta, s0 = make_inputs(B, T, H, HV, K, V, seed=T, dtype=torch.float64)
    o, h = gdn_recurrent(q, k, v, g, beta, scale=0.7, initial_state=s0, use_qk_l2norm=l2)
    qn, kn = (l2norm(q), l2norm(k)) if l2 else (q, k)
    o_ref, h_ref = naive_closed_form(qn, kn, v, g, beta, s0, 0.7)
    assert_close("o", o_ref, o, 1e-12)
    assert_close("h", h_ref, h, 1e-12)


def test_l2norm_scale_and_flags() -> None:
    q, k, v, g, beta, s0 = make_inputs(2, 4, 2, 4, 16, 8, seed=3)
    x = q * 5
    assert_close("l2norm", x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6), l2norm(x), 1e-7)
    o1, h1 = gdn_recurrent(q, k, v, g, beta, initial_state=s0, use_qk_l2norm=True)
    o2, h2 = gdn_recurrent(l2norm(q), l2norm(k), v, g, beta, scale=16**-0.5, initial_state=s0)
    assert_close("o", o1, o2, 1e-6)
    assert_close("h", h1, h2, 1e-6)
    o3, h3 = gdn_recurrent(q, k, v, g, beta, initial_state=s0, output_final_state=False)
    o4, _ = gdn_recurrent(2 * q, k, v, g, beta, scale=0.125, initial_state=s0)
    assert h3 is None
    assert_close("scale", o3, o4, 1e-6)
    _, h5 = gdn_chunk(q, k, v, g, beta, initial_state=s0, output_final_state=False)
    assert h5 is None and h1.dtype == torch.float32 and o1.dtype == torch.float32


@pytest.mark.parametrize("fn", [gdn_recurrent, gdn_chunk], ids=["recurrent", "chunk"])
def test_empty_sequence_returns_a_copy_of_the_state(fn) -> None:
    q, k, v, g, beta, s0 = make_inputs(2, 0, 1, 2, 8, 8, seed=0)
    o, h = fn(q, k, v, g, beta, initial_state=s0)
    assert o.shape == (2, 0, 2, 8) and torch.equal(h, s0)
    h.add_(1.0)
    assert not torch.equal(h, s0)


@pytest.mark.parametrize("fn", [gdn_recurrent, gdn_chunk], ids=["recurrent", "chunk"])
def test_shape_errors(fn) -> None:
    q, k, v, g, beta, s0 = make_inputs(1, 3, 2, 3, 8, 8, seed=0)
    with pytest.raises(ValueError, match="HV=3 must be a multiple of num key heads H=2"):
        fn(q, k, v, g, beta)
    q, k, v, g, beta, s0 = make_inputs(1, 3, 2, 4, 8, 8, seed=0)
    with pytest.raises(ValueError, match=r"initial_state must be \[B, HV, K, V\] = \(1, 4, 8, 8\)"):
        fn(q, k, v, g, beta, initial_state=s0[:, :2])
    with pytest.raises(ValueError, match=r"beta must be \[B, T, HV\]"):
        fn(q, k, v, g, beta[:, :2])
    with pytest.raises(ValueError, match="HV=4 must be a multiple of num key heads H=3"):
        gdn_tree(
            q[:, :, :1].expand(1, 3, 3, 8),
            k[:, :, :1].expand(1, 3, 3, 8),
            v,
            g,
            beta,
            torch.tensor([[-1, 0, 1]]),
        )


# ---------------------------------------------------------------- chunk == recurrent

CHUNK_CASES = [
    (1, 1, 1, 1, 8, 8, 16),
    (2, 7, 2, 6, 8, 8, 16),
    (1, 63, 2, 2, 16, 8, 32),
    (2, 64, 1, 2, 8, 16, 64),
    (1, 130, 2, 4, 16, 16, 64),
    (2, 130, 1, 3, 32, 8, 32),
    (1, 33, 2, 4, 8, 8, 16),
]


@pytest.mark.parametrize("l2", [False, True], ids=["raw", "l2"])
@pytest.mark.parametrize("h0", [False, True], ids=["h0none", "h0"])
@pytest.mark.parametrize(
    "B, T, H, HV, K, V, C",
    [pytest.param(*c, id="B{}-T{}-H{}-HV{}-K{}-V{}-C{}".format(*c)) for c in CHUNK_CASES],
)
def test_chunk_matches_recurrent(B, T, H, HV, K, V, C, h0, l2) -> None:
    q, k, v, g, beta, s0 = make_inputs(B, T, H, HV, K, V, seed=T * 7 + C, h0=h0)
    if not l2:  # keep the raw delta rule stable: |k| = 1 keeps (I - beta k k^T) a contraction
        k = l2norm(k)
    args = (q.clone(), k.clone(), v.clone(), g.clone(), beta.clone())
    o_ref, h_ref = gdn_recurrent(*args, initial_state=s0, use_qk_l2norm=l2)
    o, h = gdn_chunk(*args, initial_state=s0, use_qk_l2norm=l2, chunk_size=C)
    assert_close("o", o_ref, o, 1e-5)
    assert_close("h", h_ref, h, 1e-5)


def test_chunk_strong_decay_is_finite() -> None:
    """g down to -30 per token: G spans thousands in a chunk, so the upper triangle is masked before exp."""
    q, k, v, g, beta, s0 = make_inputs(2, 130, 2, 4, 8, 8, seed=11, g_min=-30.0)
    o_ref, h_ref = gdn_recurrent(q, k, v, g, beta, initial_state=s0, use_qk_l2norm=True)
    o, h = gdn_chunk(q, k, v, g, beta, initial_state=s0, use_qk_l2norm=True, chunk_size=64)
    assert torch.isfinite(o).all() and torch.isfinite(h).all()
    assert_close("o", o_ref, o, 1e-5)
    assert_close("h", h_ref, h, 1e-5)


@pytest.mark.parametrize("fn", ["chunk", "tree"])
def test_bf16_inputs(fn: str) -> None:
    """bf16 activations: math in fp32, o in bf16, state/aux in fp32; reference = fp32 of the same values."""
    B, T, H, HV, K, V = 2, 40, 2, 4, 16, 16
    q, k, v, g, beta, s0 = make_inputs(B, T, H, HV, K, V, seed=5)
    q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
    o_ref, h_ref = gdn_recurrent(
        q.float(), k.float(), v.float(), g, beta, initial_state=s0, use_qk_l2norm=True
    )
    if fn == "chunk":
        o, h = gdn_chunk(q, k, v, g, beta, initial_state=s0, use_qk_l2norm=True, chunk_size=16)
    else:
        parents = torch.arange(-1, T - 1).expand(B, T)
        o, aux = gdn_tree(q, k, v, g, beta, parents, initial_state=s0, use_qk_l2norm=True)
        assert all(t.dtype == torch.float32 for t in aux)
        h = gdn_tree_commit(aux, parents + 1, s0)
    assert o.dtype == torch.bfloat16 and h.dtype == torch.float32
    assert_close("o", o_ref, o, 1e-2)
    assert_close("h", h_ref, h, 1e-5)


# ---------------------------------------------------------------- tree == recurrent along each path




def random_parents(rng: random.Random, n: int, kind: str, n_pad: int = 0) -> list[int]:
    """chain / star / random / deep (mostly a chain) tree of n - n_pad nodes, then n_pad isolated pads."""
    parents = [-1]
    for i in range(1, n - n_pad):
        if kind == "chain" or (kind == "deep" and rng.random() < 0.9):
            parents.append(i - 1)
        elif kind == "star":
            parents.append(0)
        else:
            parents.append(rng.randrange(i))
    for pos in sorted(rng.sample(range(1, n), n_pad)):  # insert pads, shifting later ids
        parents = [p + (p >= pos) for p in parents[:pos]] + [-1] + [p + (p >= pos) for p in parents[pos:]]
    return parents


def path_reference(q, k, v, g, beta, rows, s0, use_qk_l2norm):
    """gdn_recurrent along every node's root path, all paths in one batch.

    Paths are left-padded to one length with (q, k, v, g, beta) = 0 tokens, which are exact identity steps
    (no decay, no write). Returns o [B, N, HV, V] (each path's last output) and h [B, N, HV, K, V].
    """
    B, N = len(rows), len(rows[0])
    paths = [root_path(row, i) for row in rows for i in range(N)]
    L = max(len(p) for p in paths)
    idx = torch.tensor([[-1] * (L - len(p)) + p for p in paths])  # [B*N, L]
    row = torch.arange(B).repeat_interleave(N)[:, None]

    def gather(x):
        out = x[row, idx.clamp_min(0)]
        out[idx < 0] = 0
        return out

    h0 = None if s0 is None else s0.repeat_interleave(N, 0)
    o, h = gdn_recurrent(
        *(gather(x) for x in (q, k, v, g, beta)), initial_state=h0, use_qk_l2norm=use_qk_l2norm
    )
    return o[:, -1].reshape(B, N, *o.shape[2:]), h.reshape(B, N, *h.shape[1:])


def test_path_reference_matches_unpadded_runs() -> None:
    """Guards the padding trick of path_reference with one plain gdn_recurrent call per node."""
    rows = [[-1, 0, 1, 0, 3, 3, -1], [-1, 0, 0, 2, 2, 4, 5]]
    q, k, v, g, beta, s0 = make_inputs(2, 7, 1, 2, 8, 8, seed=2)
    o_ref, h_ref = path_reference(q, k, v, g, beta, rows, s0, True)
    for b, row in enumerate(rows):
        for i in range(7):
            p = root_path(row, i)
            o, h = gdn_recurrent(
                q[b : b + 1, p],
                k[b : b + 1, p],
                v[b : b + 1, p],
                g[b : b + 1, p],
                beta[b : b + 1, p],
                initial_state=s0[b : b + 1],
                use_qk_l2norm=True,
            )
            assert_close(f"o[{b},{i}]", o[0, -1], o_ref[b, i], 1e-6)
            assert_close(f"h[{b},{i}]", h[0], h_ref[b, i], 1e-6)


def check_tree(rows, H, HV, K, V, seed, dtype=torch.float32, rtol=1e-5, g_min=-2.0, h0=True, rng=None):
    """gdn_tree vs path_reference for every node, and gdn_tree_commit vs the path state on random paths."""
    B, N = len(rows), len(rows[0])
    parents = torch.tensor(rows)
    q, k, v, g, beta, s0 = make_inputs(B, N, H, HV, K, V, seed=seed, dtype=dtype, g_min=g_min, h0=h0)
    s0_copy = None if s0 is None else s0.clone()
    o, aux = gdn_tree(q, k, v, g, beta, parents, initial_state=s0, use_qk_l2norm=True)
    assert isinstance(aux, GDNTreeAux) and o.dtype == dtype
    assert aux.k.shape == (B, N, H, K) and aux.delta.shape == (B, N, HV, V) and aux.G.shape == (B, N, HV)
    assert torch.isfinite(o).all()
    if s0 is not None:
        assert torch.equal(s0, s0_copy), "gdn_tree wrote to initial_state"
    o_ref, h_ref = path_reference(q, k, v, g, beta, rows, s0, True)
    assert_close("o", o_ref, o, rtol)
    # commit: one random root-to-node path per row, right-padded with -1 to a common length
    rng = rng or random.Random(seed)
    leaves = [rng.randrange(N) for _ in range(B)]
    paths = [root_path(row, leaf) for row, leaf in zip(rows, leaves)]
    P = max(len(p) for p in paths) + rng.randrange(2)
    path = torch.tensor([p + [-1] * (P - len(p)) for p in paths])
    h = gdn_tree_commit(aux, path, s0)
    assert_close("h", h_ref[torch.arange(B), torch.tensor(leaves)], h, rtol)
    return o, aux


@settings(max_examples=60, deadline=None)
@given(
    b=st.integers(1, 3),
    n=st.integers(1, 64),
    heads=st.sampled_from([(1, 1), (2, 2), (1, 2), (2, 4), (1, 3), (2, 6)]),
    kinds=st.lists(st.sampled_from(["chain", "star", "random", "deep"]), min_size=3, max_size=3),
    n_pad=st.integers(0, 3),
    h0=st.booleans(),
    rng=st.randoms(use_true_random=False),
)
def test_tree_matches_path_recurrence(b, n, heads, kinds, n_pad, h0, rng) -> None:
    rows = [random_parents(rng, n, kinds[i], min(n_pad, n - 1)) for i in range(b)]
    check_tree(rows, *heads, K=16, V=8, seed=rng.randrange(2**31), h0=h0, rng=rng)


@pytest.mark.parametrize(
    "rows",
    [
        pytest.param([[-1]], id="root-only"),
        pytest.param([list(range(-1, 40))], id="chain-depth40"),
        pytest.param([[-1] + [0] * 20, list(range(-1, 20))], id="star-and-chain"),
        pytest.param([[-1, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6]], id="binary"),
    ],
)
def test_tree_literals_float64(rows) -> None:
    """The tree algebra is exact: in float64 it matches the path recurrence to rounding."""
    check_tree(rows, 2, 4, 8, 8, seed=len(rows[0]), dtype=torch.float64, rtol=1e-12)


def deep_beside_shallow(depth: int = 40, shallow: int = 8) -> list[int]:
    """A chain of `depth` nodes below the root, then `shallow` children of the root (after it)."""
    return list(range(-1, depth)) + [0] * shallow


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
def test_deep_branch_beside_shallow_with_strong_decay(dtype) -> None:
    """G differs by ~1000 between the branches: exp of an unmasked difference would be inf -> NaN."""
    rows = [deep_beside_shallow(), deep_beside_shallow(20, 28)]
    o, aux = check_tree(rows, 2, 4, 8, 8, seed=9, dtype=dtype, rtol=1e-5, g_min=-30.0)
    assert torch.isfinite(aux.delta).all() and float(aux.G.min()) < -300


def test_pad_nodes_change_nothing() -> None:
    """Inserting isolated pad nodes leaves real nodes' outputs and deltas as before; pads start from S0."""
    rows = [[-1, 0, 1, 1, 0, 4, 2], [-1, 0, 0, 2, 3, 4, 5]]
    padded = [[-1, 0, -1, 1, 1, 0, 5, 3, -1], [-1, -1, 0, 0, 3, 4, 5, 6, -1]]
    real = [[0, 1, 3, 4, 5, 6, 7], [0, 2, 3, 4, 5, 6, 7]]
    pads = [[2, 8], [1, 8]]
    H, HV, K, V = 2, 4, 8, 8
    q, k, v, g, beta, s0 = make_inputs(2, 9, H, HV, K, V, seed=4)
    o_pad, aux_pad = gdn_tree(q, k, v, g, beta, torch.tensor(padded), initial_state=s0, use_qk_l2norm=True)
    for b in range(2):
        r = torch.tensor(real[b])
        o, aux = gdn_tree(
            q[b : b + 1, r],
            k[b : b + 1, r],
            v[b : b + 1, r],
            g[b : b + 1, r],
            beta[b : b + 1, r],
            torch.tensor(rows[b : b + 1]),
            initial_state=s0[b : b + 1],
            use_qk_l2norm=True,
        )
        assert_close(f"o row {b}", o[0], o_pad[b, r], 1e-6)
        assert_close(f"delta row {b}", aux.delta[0], aux_pad.delta[b, r], 1e-6)
        for i in pads[b]:  # a pad node is a one-token sequence from the committed state
            o1, _ = gdn_recurrent(
                q[b : b + 1, [i]],
                k[b : b + 1, [i]],
                v[b : b + 1, [i]],
                g[b : b + 1, [i]],
                beta[b : b + 1, [i]],
                initial_state=s0[b : b + 1],
                use_qk_l2norm=True,
            )
            assert_close(f"pad {b},{i}", o1[0, 0], o_pad[b, i], 1e-6)


def test_changing_one_branch_leaves_the_rest_bit_identical() -> None:
    rows = [[-1, 0, 1, 0, 3, 1, 4, 6]]  # subtree of node 3: {3, 4, 6, 7}
    q, k, v, g, beta, s0 = make_inputs(1, 8, 2, 4, 8, 8, seed=6)
    parents = torch.tensor(rows)
    o1, a1 = gdn_tree(q, k, v, g, beta, parents, initial_state=s0)
    v2, k2 = v.clone(), k.clone()
    v2[0, 3] += 1.0
    k2[0, 3] *= -2.0
    o2, a2 = gdn_tree(q, k2, v2, g, beta, parents, initial_state=s0)
    outside, inside = [0, 1, 2, 5], [3, 4, 6, 7]
    assert torch.equal(o1[0, outside], o2[0, outside])
    assert torch.equal(a1.delta[0, outside], a2.delta[0, outside])
    assert not torch.allclose(o1[0, inside], o2[0, inside])


def test_topological_relabelling_permutes_outputs() -> None:
    """Any topological order of the same tree gives the same per-node results (BFS vs DFS numbering)."""
    dfs = [-1, 0, 1, 1, 0, 4, 4, 6]
    order = [0, 1, 4, 2, 3, 5, 6, 7]  # BFS: new node n is old node order[n]
    old_to_new = {o: n for n, o in enumerate(order)}
    bfs = [-1 if dfs[o] < 0 else old_to_new[dfs[o]] for o in order]
    assert all(p < i for i, p in enumerate(bfs) if i)
    q, k, v, g, beta, s0 = make_inputs(1, 8, 1, 2, 8, 8, seed=8)
    perm = torch.tensor(order)
    o1, a1 = gdn_tree(q, k, v, g, beta, torch.tensor([dfs]), initial_state=s0, use_qk_l2norm=True)
    o2, a2 = gdn_tree(
        q[:, perm],
        k[:, perm],
        v[:, perm],
        g[:, perm],
        beta[:, perm],
        torch.tensor([bfs]),
        initial_state=s0,
        use_qk_l2norm=True,
    )
    assert_close("o", o1[:, perm], o2, 1e-6)
    assert_close("G", a1.G[:, perm], a2.G, 1e-6)


def test_tree_chain_equals_chunk_and_commit_without_state() -> None:
    """A chain tree with no initial state is gdn_chunk; committing the full chain is its final state."""
    B, T = 2, 37
    q, k, v, g, beta, _ = make_inputs(B, T, 2, 4, 16, 8, seed=12, h0=False)
    o_c, h_c = gdn_chunk(q, k, v, g, beta, use_qk_l2norm=True, chunk_size=16)
    parents = torch.arange(-1, T - 1).expand(B, T)
    o_t, aux = gdn_tree(q, k, v, g, beta, parents, use_qk_l2norm=True)
    assert_close("o", o_c, o_t, 1e-5)
    assert_close("h", h_c, gdn_tree_commit(aux, parents + 1, None), 1e-5)
    # A shorter accepted prefix in row 1 (right-padded) gives the chunk state after that prefix.
    path = torch.stack([torch.arange(T), torch.where(torch.arange(T) < 5, torch.arange(T), -1)])
    _, h5 = gdn_chunk(q[1:, :5], k[1:, :5], v[1:, :5], g[1:, :5], beta[1:, :5], use_qk_l2norm=True)
    h = gdn_tree_commit(aux, path, None)
    assert_close("h row 0", h_c[0], h[0], 1e-5)
    assert_close("h row 1", h5[0], h[1], 1e-5)
