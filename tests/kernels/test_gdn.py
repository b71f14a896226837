"""weaver.kernels.triton.gdn_tree / gdn_tree_commit vs the torch references (float64) on random trees.

CPU: kernels run under TRITON_INTERPRET=1 at small sizes. GPU: `--triton-full` runs the same tests
compiled on CUDA at the Qwen3.6-27B GDN shape (H=16, HV=48, K=V=128, T up to 256).
"""

from __future__ import annotations

import pytest
import torch
from helpers.trees import random_batch, random_parents
from helpers.triton_env import DEVICE, FULL, pinned  # sets TRITON_INTERPRET before triton loads
from hypothesis import given, settings
from hypothesis import strategies as st

from weaver.kernels import triton as wt
from weaver.kernels.triton.gdn_tree import GDNTreeConfig, default_config, dense_rows
from weaver.ops.gdn import gdn_recurrent, gdn_tree, gdn_tree_commit, l2norm
from weaver.testing import assert_close, random_root_paths

# (o, delta) tolerances: fp32 inputs run ieee dots; bf16 inputs give a bf16 o (rounding ~2^-8 relative;
# the interpreter truncates, ~2^-7) while Delta stays fp32 through the bf16x3 split.
TOL = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1e-2, 3e-4)}
SHAPE = dict(H=16, HV=48, K=128, V=128) if FULL else dict(H=2, HV=4, K=32, V=32)


def make_inputs(B, T, H, HV, K, V, seed, dtype, l2=False, h0=True, g_min=-1.0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=gen)
    k = torch.randn(B, T, H, K, generator=gen)
    if not l2:  # the kernel sees unit-norm rows, as after the layer's l2norm
        q, k = l2norm(q), l2norm(k)
    v = torch.randn(B, T, HV, V, generator=gen)
    g = g_min * torch.rand(B, T, HV, generator=gen)
    beta = torch.rand(B, T, HV, generator=gen)
    s0 = torch.randn(B, HV, K, V, generator=gen) if h0 else None
    q, k, v = (x.to(dtype).to(DEVICE) for x in (q, k, v))
    g, beta = g.to(DEVICE), beta.to(DEVICE)
    return q, k, v, g, beta, (s0.to(DEVICE) if h0 else None)


def reference(q, k, v, g, beta, parents, s0, l2, scale=None):
    """gdn_tree in float64 on the (already rounded) inputs."""
    d = [x.double() for x in (q, k, v, g, beta)]
    return gdn_tree(*d, parents, scale=scale, initial_state=None if s0 is None else s0.double(), use_qk_l2norm=l2)


def check(par, dtype, l2, h0, seed, config=None, scale=None, **shape):
    B, T = par.shape
    q, k, v, g, beta, s0 = make_inputs(B, T, seed=seed, dtype=dtype, l2=l2, h0=h0, **shape)
    o, aux = wt.gdn_tree(q, k, v, g, beta, par, scale=scale, initial_state=s0, use_qk_l2norm=l2, config=config)
    o_r, aux_r = reference(q, k, v, g, beta, par, s0, l2, scale)
    tol_o, tol_d = TOL[dtype]
    assert o.dtype == v.dtype and aux.delta.dtype == torch.float32
    assert_close("o", o_r, o.float(), tol_o)
    assert_close("delta", aux_r.delta, aux.delta, tol_d)
    assert_close("G", aux_r.G, aux.G, 1e-6)
    assert_close("k", aux_r.k, aux.k, 1e-6)
    return aux, aux_r, s0


@pytest.mark.parametrize(
    "B, T, H, HV, K, V, dtype, l2, h0, BT",
    [
        pytest.param(1, 1, 1, 1, 16, 16, torch.float32, False, True, 16, id="B1-T1-H1-HV1-K16-V16-fp32"),
        pytest.param(2, 37, 2, 4, 32, 32, torch.bfloat16, True, True, 32, id="B2-T37-H2-HV4-K32-V32-bf16-l2"),
        pytest.param(1, 20, 1, 2, 60, 20, torch.float32, False, True, 16, id="B1-T20-H1-HV2-K60-V20-fp32"),
        pytest.param(2, 33, 1, 3, 16, 48, torch.float32, True, False, 16, id="B2-T33-H1-HV3-K16-V48-nos0"),
        pytest.param(1, 70, 1, 1, 16, 16, torch.float32, False, True, 64, id="B1-T70-H1-HV1-K16-V16-BT64"),
        pytest.param(1, 40, 2, 2, 32, 16, torch.bfloat16, False, True, 16, id="B1-T40-H2-HV2-K32-V16-bf16"),
    ],
)
def test_gdn_tree_table(B, T, H, HV, K, V, dtype, l2, h0, BT) -> None:
    if FULL:
        H, HV, K, V = SHAPE["H"], SHAPE["HV"], SHAPE["K"], SHAPE["V"]
    par = random_batch(B, T, seed=T, device=DEVICE)
    check(par, dtype, l2, h0, seed=T, config=GDNTreeConfig(BT=BT, BV=16), H=H, HV=HV, K=K, V=V)


@settings(max_examples=6 if FULL else 4, deadline=None)
@given(
    B=st.integers(1, 2),
    T=st.sampled_from([16, 64, 128, 256]) if FULL else st.integers(1, 40),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    l2=st.booleans(),
    h0=st.booleans(),
    seed=st.integers(0, 10_000),
)
@pinned(  # default tiles: one node; 17 nodes (BT 32, one partial tile); fp32 at 33 (BT 32: a partial 2nd tile);
    # bf16 at 40 (BT 64)
    dict(B=1, T=1, dtype=torch.float32, l2=False, h0=True, seed=0),
    dict(B=2, T=17, dtype=torch.bfloat16, l2=True, h0=False, seed=1),
    dict(B=2, T=33, dtype=torch.float32, l2=False, h0=True, seed=2),
    dict(B=1, T=40, dtype=torch.bfloat16, l2=True, h0=True, seed=3),
)
def test_gdn_tree_random_trees(B, T, dtype, l2, h0, seed) -> None:
    check(random_batch(B, T, seed, device=DEVICE), dtype, l2, h0, seed, **SHAPE)


@pytest.mark.parametrize("kind", ["chain", "proposal"])
@pytest.mark.parametrize("BT", [16, 32, 64])
def test_gdn_tree_tile_sizes(kind: str, BT: int) -> None:
    T = 256 if FULL else 50
    par = torch.tensor([random_parents(T, 5, kind)], device=DEVICE)
    check(par, torch.float32, False, True, seed=BT, config=GDNTreeConfig(BT=BT, BV=32), **SHAPE)


LAUNCH_OPTIONS = [dict(prep_stages=2, num_stages=2), dict(num_warps=8, prep_warps=2), dict(BV=64), dict(BVP=16),
                  dict(BVP=64), dict(BT=32), dict(BT=64), dict(split_prep=True), dict(solve_order="left"),
                  dict(BT=64, split_prep=True, solve_order="left"), dict(lead=True),
                  dict(BT=32, lead=True, split_prep=True)]  # fmt: skip


@pytest.mark.parametrize(
    "change",
    LAUNCH_OPTIONS,
    ids=["stages2", "warps", "BV64", "BVP16", "BVP64", "BT32", "BT64", "split_prep", "left", "BT64-split-left", "lead",
         "BT32-lead-split"],
)
def test_gdn_tree_launch_options(change: dict) -> None:
    """Every launch option computes the same function (chain and proposal trees, pad tiles skipped)."""
    T = 200 if FULL else 45  # 45 with BT=16: TP=64, the last tile is empty and skipped
    # interpreted: one kind per option, alternating (both kinds at every tile size: test_gdn_tree_tile_sizes)
    kinds = ("chain", "proposal") if FULL else (("chain", "proposal")[LAUNCH_OPTIONS.index(change) % 2],)
    for kind in kinds:
        par = torch.tensor([random_parents(T, 3, kind)], device=DEVICE)
        check(par, torch.float32, False, True, seed=5, config=GDNTreeConfig(**{"BT": 16, **change}), **SHAPE)


def test_gdn_tree_reads_no_unset_scratch(monkeypatch) -> None:
    """Scratch and outputs start as NaN: any read of memory the kernels did not write shows up."""
    real_empty = torch.empty

    def nan_empty(*args, **kwargs):
        t = real_empty(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t.fill_(-7)

    monkeypatch.setattr(torch, "empty", nan_empty)
    T = 160 if FULL else 37  # 37 with BT=16: a partial tile, then an empty one
    configs = [GDNTreeConfig(BT=16), GDNTreeConfig(BT=16, split_prep=True, solve_order="left"),  # left: Delta_j
               GDNTreeConfig(BT=16, lead=True)]
    cases = [(kind, h0, cfg) for kind in ("chain", "proposal", "random") for h0 in (True, False) for cfg in configs]
    if not FULL:  # interpreted: every (h0, launch) pair once, the three kinds spread over them
        cases = [("chain", True, configs[0]), ("proposal", False, configs[0]), ("random", True, configs[1]),
                 ("chain", False, configs[1]), ("proposal", True, configs[2]),
                 ("random", False, configs[2])]  # fmt: skip
    for kind, h0, cfg in cases:
        par = torch.tensor([random_parents(T, 4, kind, pads=3)], device=DEVICE)
        check(par, torch.float32, False, h0, seed=6, config=cfg, **SHAPE)


@pytest.mark.parametrize("precision", ["ieee", "tf32", "tf32x3", "bf16x3"])
@pytest.mark.parametrize("where", ["solve", "prep"])
def test_gdn_tree_precisions(precision: str, where: str) -> None:
    T = 128 if FULL else 24
    par = random_batch(1, T, seed=3, kinds=("proposal",), device=DEVICE)
    q, k, v, g, beta, s0 = make_inputs(1, T, seed=1, dtype=torch.bfloat16, **SHAPE)
    other = "bf16x3" if precision == "ieee" else "ieee"  # the other kernel's products: exact enough
    cfg = GDNTreeConfig(BT=16, BV=16, precision=precision if where == "solve" else other,
                        inv_precision=precision if where == "prep" else other)  # fmt: skip
    _, aux = wt.gdn_tree(q, k, v, g, beta, par, initial_state=s0, config=cfg)
    _, aux_r = reference(q, k, v, g, beta, par, s0, False)
    assert_close(f"delta[{precision}]", aux_r.delta, aux.delta, 3e-3 if precision == "tf32" else 3e-4)


def test_gdn_tree_branch_property() -> None:
    """Every node's output equals the recurrence along its own root path."""
    T = 64 if FULL else 18
    par = torch.tensor([random_parents(T, 7, "random")], device=DEVICE)
    q, k, v, g, beta, s0 = make_inputs(1, T, seed=2, dtype=torch.float32, **SHAPE)
    o, _ = wt.gdn_tree(q, k, v, g, beta, par, initial_state=s0)
    for i in range(T):
        path, j = [], i
        while j >= 0:
            path.append(j)
            j = int(par[0, j])
        idx = torch.tensor(path[::-1], device=DEVICE)
        o_path, _ = gdn_recurrent(q[:, idx], k[:, idx], v[:, idx], g[:, idx], beta[:, idx], initial_state=s0)
        assert_close(f"o[node {i}]", o_path[:, -1], o[:, i], 1e-5)


def test_gdn_tree_pad_nodes_change_nothing() -> None:
    T, pads = (128, 16) if FULL else (21, 5)
    par = torch.tensor([random_parents(T, 11, "proposal", pads=pads)], device=DEVICE)
    q, k, v, g, beta, s0 = make_inputs(1, T, seed=4, dtype=torch.float32, **SHAPE)
    tree = wt.build_tree_structure(par)
    o, aux = wt.gdn_tree(q, k, v, g, beta, tree, initial_state=s0)
    n = T - pads
    o_small, aux_small = wt.gdn_tree(q[:, :n], k[:, :n], v[:, :n], g[:, :n], beta[:, :n], par[:, :n], initial_state=s0)
    assert_close("o real nodes", o_small, o[:, :n], 1e-6)
    assert_close("delta real nodes", aux_small.delta, aux.delta[:, :n], 1e-6)
    o_r, _ = reference(q, k, v, g, beta, par, s0, False)
    assert_close("o pad nodes", o_r[:, n:], o[:, n:], 1e-5)


def test_gdn_tree_structure_equals_parents() -> None:
    par = random_batch(2, 30, seed=9, device=DEVICE)
    q, k, v, g, beta, s0 = make_inputs(2, 30, seed=9, dtype=torch.bfloat16, **SHAPE)
    o1, a1 = wt.gdn_tree(q, k, v, g, beta, par, initial_state=s0)
    o2, a2 = wt.gdn_tree(q, k, v, g, beta, wt.build_tree_structure(par), initial_state=s0)
    assert torch.equal(o1, o2) and torch.equal(a1.delta, a2.delta)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gdn_tree_reads_row_views_without_copies(dtype) -> None:
    """The layer hands q, k, v as column views of one conv output [B, T, 2 H K + HV V] (row stride wider than
    a node): the kernel reads them in place (no copy) and gives the contiguous inputs' results. fp32: bit for
    bit. bf16 on the H200 (session 31, a row 8 elements wider than here, so not a multiple of 16): the last bits
    of o moved, presumably a differently specialised dot; so bf16 compares at its rounding, against float64 too."""
    B, T = 2, 30 if not FULL else 65
    par = random_batch(B, T, seed=5, device=DEVICE)
    q, k, v, g, beta, s0 = make_inputs(B, T, seed=5, dtype=dtype, l2=True, **SHAPE)
    H, K, HV, V = q.shape[2], q.shape[3], v.shape[2], v.shape[3]
    pad = torch.zeros_like(v.flatten(2)[..., :16])  # the model's rows stay multiples of 16 elements too
    wide = torch.cat([q.flatten(2), k.flatten(2), v.flatten(2), pad], dim=-1)
    qv, kv, vv = wide[..., : H * K], wide[..., H * K : 2 * H * K], wide[..., 2 * H * K : 2 * H * K + HV * V]
    qv, kv, vv = qv.view(B, T, H, K), kv.view(B, T, H, K), vv.view(B, T, HV, V)
    assert not qv.is_contiguous() and not vv.is_contiguous()
    rows = dense_rows(qv, kv, vv)
    assert all(a.data_ptr() == b.data_ptr() for a, b in zip(rows, (qv, kv, vv), strict=True))  # no copies
    o1, a1 = wt.gdn_tree(q, k, v, g, beta, par, initial_state=s0, use_qk_l2norm=True)
    o2, a2 = wt.gdn_tree(qv, kv, vv, g, beta, par, initial_state=s0, use_qk_l2norm=True)
    assert torch.equal(a1.G, a2.G)  # g is the same tensor in both runs
    if dtype == torch.float32:
        assert torch.equal(o1, o2) and torch.equal(a1.delta, a2.delta) and torch.equal(a1.k, a2.k)
    assert_close("k views vs contiguous", a1.k, a2.k, 1e-6)
    tol_o, tol_d = TOL[dtype]
    o_r, aux_r = reference(q, k, v, g, beta, par, s0, True)
    for o, aux in ((o1, a1), (o2, a2)):
        assert_close("o", o_r, o.float(), tol_o)
        assert_close("delta", aux_r.delta, aux.delta, tol_d)
    assert_close("o views vs contiguous", o1.float(), o2.float(), tol_o)


@settings(max_examples=6 if FULL else 4, deadline=None)
@given(
    B=st.integers(1, 3),
    T=st.integers(1, 256 if FULL else 36),
    h0=st.booleans(),
    extra_pad=st.integers(0, 4),
    seed=st.integers(0, 10_000),
)
@pinned(  # a root-only tree without state; three rows past one 32-node tile, the longest path padding
    dict(B=1, T=1, h0=False, extra_pad=0, seed=0),
    dict(B=3, T=36, h0=True, extra_pad=4, seed=1),
)
def test_gdn_tree_commit_matches_reference_and_recurrence(B, T, h0, extra_pad, seed) -> None:
    par = random_batch(B, T, seed, device=DEVICE)
    aux, aux_r, s0 = check(par, torch.float32, False, h0, seed, **SHAPE)
    path_t = random_root_paths(par.cpu(), torch.Generator().manual_seed(seed), extra_pad, DEVICE)
    h = wt.gdn_tree_commit(aux, path_t, s0)
    assert h.dtype == torch.float32
    assert_close("h vs reference commit", gdn_tree_commit(aux_r, path_t, None if s0 is None else s0.double()), h, 1e-5)
    q, k, v, g, beta, _ = make_inputs(B, T, seed=seed, dtype=torch.float32, h0=h0, **SHAPE)
    for b, p in enumerate([[n for n in row if n >= 0] for row in path_t.tolist()]):
        idx = torch.tensor(p, device=DEVICE)
        _, h_rec = gdn_recurrent(
            q[b : b + 1, idx], k[b : b + 1, idx], v[b : b + 1, idx], g[b : b + 1, idx], beta[b : b + 1, idx],
            initial_state=None if s0 is None else s0[b : b + 1],
        )  # fmt: skip
        assert_close(f"h[{b}] vs recurrence", h_rec, h[b : b + 1], 1e-5)


def test_gdn_tree_rejects_bad_inputs() -> None:
    q, k, v, g, beta, s0 = make_inputs(1, 4, seed=0, dtype=torch.float32, **SHAPE)
    par = torch.tensor([[-1, 0, 1, 2]], device=DEVICE)
    with pytest.raises(ValueError, match="multiple"):
        wt.gdn_tree(q, k, v[:, :, :3], g[:, :, :3], beta[:, :, :3], par)
    with pytest.raises(ValueError, match="initial_state"):
        wt.gdn_tree(q, k, v, g, beta, par, initial_state=s0[:, :, :2])
    with pytest.raises(ValueError, match="describe"):
        wt.gdn_tree(q, k, v, g, beta, par[:, :3])
    with pytest.raises(ValueError, match="BT"):
        wt.gdn_tree(q, k, v, g, beta, par, config=GDNTreeConfig(BT=8))
    with pytest.raises(ValueError, match="solve_order"):
        wt.gdn_tree(q, k, v, g, beta, par, config=GDNTreeConfig(solve_order="up"))
    with pytest.raises(ValueError, match="path"):
        _, aux = wt.gdn_tree(q, k, v, g, beta, par)
        wt.gdn_tree_commit(aux, par[0], None)


@pytest.mark.gpu  # CUDA graphs need a GPU: run by scripts/gpu/kernels.sh, deselected on CPU
def test_gdn_tree_cuda_graph_capture() -> None:
    T = 128
    par = random_batch(1, T, seed=1, kinds=("proposal",), device="cuda")
    q, k, v, g, beta, s0 = make_inputs(1, T, seed=1, dtype=torch.bfloat16, **SHAPE)
    q, k, v, g, beta, s0, par = (x.cuda() for x in (q, k, v, g, beta, s0, par))
    o_eager, _ = wt.gdn_tree(q, k, v, g, beta, par, initial_state=s0)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o_graph, _ = wt.gdn_tree(q, k, v, g, beta, wt.build_tree_structure(par), initial_state=s0)
    v.normal_()
    o_eager, _ = wt.gdn_tree(q, k, v, g, beta, par, initial_state=s0)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(o_eager, o_graph)


def test_default_config_follows_the_h200_sweeps() -> None:
    """64-row tiles for bf16 inputs from 64 nodes, their state items 64 value columns wide in a single tile and 128
    in two (H100, session 55); 32 rows for fp32."""
    assert default_config(128, 128).BT == 64 and default_config(128, 128).BVP == 128
    assert default_config(129, 128).BVP == 128  # the root leads, 128 nodes fill two tiles
    assert default_config(65, 128).BT == 64 and default_config(65, 128).BVP == 64  # one tile
    assert default_config(64, 128).BVP == 64 and default_config(65, 32).BVP == 32  # no wider than V
    assert default_config(32, 128).BVP == 32
    assert default_config(128, 128, torch.float32).BT == 32
    assert default_config(16, 128).BT == 16 and default_config(32, 128).BT == 32
    assert default_config(256, 128).solve_order == "left" and default_config(128, 128).solve_order == "right"
    # 2^k + 1 nodes (budget 2^k and the root): the root leads, the other 2^k fill the tiles
    assert not any(default_config(t, 128).lead for t in (1, 2, 16, 32, 64, 100, 128, 256, 257))
    for t, bt in ((17, 16), (33, 32), (65, 64), (129, 64)):
        cfg = default_config(t, 128)
        assert cfg.lead and cfg.BT == bt and cfg.solve_order == "right"
        assert not default_config(t, 128, torch.float32).lead  # fp32 spills more with it (ptxas)


@pytest.mark.parametrize(
    "T, dtype, l2, h0, BT, split",
    [
        pytest.param(2, torch.float32, False, True, 16, False, id="T2"),  # the root and one node
        pytest.param(9, torch.bfloat16, True, True, 16, False, id="T9-bf16"),
        pytest.param(17, torch.float32, True, False, 16, False, id="T17-nos0"),  # one full tile after the root
        pytest.param(17, torch.bfloat16, False, True, 16, True, id="T17-bf16-split"),
        pytest.param(33, torch.float32, False, True, 16, False, id="T33-two-tiles"),
        pytest.param(26, torch.bfloat16, True, True, 32, False, id="T26-partial"),
    ],
)
def test_gdn_tree_lead_row(T, dtype, l2, h0, BT, split) -> None:
    """The root as a lead row outside the tiles (GDNTreeConfig.lead): its column of A and P is vector work and
    the tiles start at node 1; the same function as the float64 reference for every tree kind (pads included,
    whose parent is -1: the root is not their ancestor) and as the tiled layout."""
    if FULL:
        T = {2: 2, 9: 9, 17: 65, 26: 100, 33: 129}[T]
    par = random_batch(2, T, seed=T, device=DEVICE)
    aux, _, _ = check(par, dtype, l2, h0, seed=T, config=GDNTreeConfig(BT=BT, BV=16, lead=True, split_prep=split),
                      **SHAPE)  # fmt: skip
    aux_tiled, _, _ = check(par, dtype, l2, h0, seed=T, config=GDNTreeConfig(BT=BT, BV=16), **SHAPE)
    assert_close("delta lead vs tiled", aux_tiled.delta, aux.delta, TOL[dtype][1])
    with pytest.raises(ValueError, match="lead"):
        check(par, dtype, l2, h0, seed=T, config=GDNTreeConfig(BT=BT, lead=True, solve_order="left"), **SHAPE)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gdn_tree_computes_raw_gates(dtype) -> None:
    """With RawGates the prep kernel takes the in-projection's raw a and b (column views of one wider output, as
    the fused projection leaves them) and computes g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b) (in
    b's dtype) itself: the same o and factors as the gates computed by `weaver.ops.gdn.gdn_gates` first, and as
    the float64 reference on those gates. a spans softplus's both branches (a + dt_bias beyond 20 too). bf16:
    the interpreter truncates where the GPU rounds, so beta may sit one bf16 step off under it (delta ~2^-8)."""
    from weaver.ops.gdn import gdn_gates

    B, T = 2, 30 if not FULL else 65
    par = random_batch(B, T, seed=11, device=DEVICE)
    q, k, v, _, _, s0 = make_inputs(B, T, seed=11, dtype=dtype, l2=True, **SHAPE)
    HV = v.shape[2]
    gen = torch.Generator().manual_seed(12)
    proj = (torch.randn(B, T, 2 * HV + 5, generator=gen) * 4.0).to(dtype).to(DEVICE)
    proj[0, 3, 1] = 30.0  # softplus's linear branch
    a_raw, b_raw = proj[..., 1 : HV + 1], proj[..., HV + 3 : 2 * HV + 3]
    A_log = (0.5 * torch.randn(HV, generator=gen)).to(DEVICE)
    dt_bias = torch.randn(HV, generator=gen).to(DEVICE)
    assert not a_raw.is_contiguous() and a_raw.stride(1) == 2 * HV + 5
    g, beta = gdn_gates(a_raw, b_raw, A_log, dt_bias)
    o1, a1 = wt.gdn_tree(q, k, v, g, beta, par, initial_state=s0, use_qk_l2norm=True)
    o2, a2 = wt.gdn_tree(q, k, v, a_raw, b_raw, par, initial_state=s0, use_qk_l2norm=True,
                         gates=wt.RawGates(A_log, dt_bias))  # fmt: skip
    tol_o, tol_d = TOL[dtype]
    if dtype == torch.bfloat16 and not FULL:
        tol_d = 1e-2
    assert_close("G raw vs precomputed gates", a1.G, a2.G, 1e-6)
    assert_close("delta raw vs precomputed gates", a1.delta, a2.delta, tol_d)
    assert_close("o raw vs precomputed gates", o1.float(), o2.float(), tol_o)
    o_r, aux_r = reference(q, k, v, g, beta, par, s0, True)
    assert_close("o", o_r, o2.float(), tol_o)
    assert_close("delta", aux_r.delta, a2.delta, tol_d)
    with pytest.raises(ValueError, match="A_log"):
        wt.gdn_tree(q, k, v, a_raw, b_raw, par, gates=wt.RawGates(A_log[:-1], dt_bias))
