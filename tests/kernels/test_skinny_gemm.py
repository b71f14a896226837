"""weaver's skinny GEMM (`weaver.kernels.triton.skinny`: a few input rows, the weight rows as the MMA's M) against
F.linear, and its place in `weaver.kernels.gemv.linear` (only the shapes a tuning table timed faster than cuBLAS)."""

from __future__ import annotations

import itertools
import json

import pytest
import torch
import torch.nn.functional as F
from helpers.triton_env import DEVICE, FULL  # sets TRITON_INTERPRET before triton loads
from hypothesis import given, settings
from hypothesis import strategies as st

from weaver.kernels import gemv, launch_config
from weaver.kernels.triton.skinny import SkinnyTiles, skinny_config, skinny_gemm, skinny_key
from weaver.options import RuntimeOptions
from weaver.testing import assert_close

TRITON = RuntimeOptions(kernels="triton")
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


def _inputs(m: int, n: int, k: int, dtype: torch.dtype, seed: int):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=gen).to(DEVICE, dtype)
    w = (torch.randn(n, k, generator=gen) * k**-0.5).to(DEVICE, dtype)
    return x, w


def _reference(x: torch.Tensor, w: torch.Tensor, swiglu: bool) -> torch.Tensor:
    y = F.linear(x.float(), w.float())
    if not swiglu:
        return y
    gate, up = y.chunk(2, dim=-1)
    return F.silu(gate) * up


@settings(max_examples=6 if FULL else 12, deadline=None)
@given(
    m=st.sampled_from([2, 16, 17, 65]) if FULL else st.integers(1, 20),
    nk=st.sampled_from([(5120, 17408), (34816, 5120)]) if FULL else st.sampled_from([(64, 96), (100, 200), (48, 64)]),
    tiles=st.sampled_from([None, SkinnyTiles(64, 64, 4, 3, 2), SkinnyTiles(128, 128, 4, 4, 1)])
    if FULL
    else st.sampled_from([None, SkinnyTiles(16, 32, 1, 1, 3), SkinnyTiles(64, 16, 1, 1, 1)]),
    swiglu=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    seed=st.integers(0, 10_000),
)
def test_skinny_gemm_matches_f_linear(m, nk, tiles, swiglu, dtype, seed):
    """Every row count, ragged N and K, K splits (ignored with swiglu), in fp32 and bf16."""
    x, w = _inputs(m, *nk, dtype, seed)
    got = skinny_gemm(x, w, swiglu, tiles)
    assert got.dtype == dtype and got.shape == (m, nk[0] // 2 if swiglu else nk[0])
    assert_close("skinny_gemm", _reference(x, w, swiglu), got, TOL[dtype])


def test_skinny_gemm_reads_strided_rows():
    """Row views (a slice of a wider buffer) and a transposed input give F.linear's values."""
    x, w = _inputs(6, 64, 48, torch.float32, 3)
    wide = torch.cat([x, x], dim=1)[:, 48:]  # rows 96 apart, unit stride along K
    assert_close("row view", _reference(x, w, False), skinny_gemm(wide, w), TOL[torch.float32])
    xt = x.t().contiguous().t()  # unit stride along M
    assert_close("transposed", _reference(x, w, False), skinny_gemm(xt, w), TOL[torch.float32])


def test_skinny_gemm_checks_its_inputs():
    x, w = _inputs(4, 64, 32, torch.float32, 0)
    with pytest.raises(ValueError, match="rows"):
        skinny_gemm(torch.cat([x] * 40), w)  # 160 rows
    with pytest.raises(ValueError, match="row-contiguous"):
        skinny_gemm(x, w.t().contiguous().t())
    with pytest.raises(ValueError, match="powers of two"):
        skinny_gemm(x, w, tiles=SkinnyTiles(48, 32))


@pytest.mark.parametrize("rows", [2, 17, 65, 128])
@pytest.mark.parametrize("swiglu", [False, True])
def test_built_in_rule_fits_an_sm(rows, swiglu):
    """Every pipeline stage's operand tiles within the 227 KB of an H100 / H200 SM, the fp32 accumulators within
    128 registers a thread (ptxas spilled one of 128): the 27B round's widths and others a large model may have."""
    for n_out, k in itertools.product((2048, 5120, 8192, 12288, 16480, 17408, 248320), (4096, 5120, 17408, 25600)):
        n = 2 * n_out if swiglu else n_out
        t = skinny_config(n_out, k, rows, torch.device("cuda"), swiglu)
        block_m, tiles = max(16, 1 << (rows - 1).bit_length()), 2 if swiglu else 1
        assert t.num_stages * (tiles * t.block_n + block_m) * t.block_k * 2 <= 227 * 1024, (n, k, rows, t)
        assert tiles * t.block_n * block_m <= 128 * 32 * t.num_warps, (n, k, rows, t)
        assert t.block_n * block_m < 128 * 32 * t.num_warps, (n, k, rows, t)


def test_built_in_rule():
    """Splits for the N = 5,120 shapes whose column blocks alone leave SMs idle; one pass for wide ones."""
    cuda = torch.device("cuda")
    assert skinny_config(5120, 17408, 17, cuda).split == 4
    assert skinny_config(34816, 5120, 17, cuda) == SkinnyTiles(128, 128, 4, 4, 1)
    assert skinny_config(34816, 5120, 65, cuda) == SkinnyTiles(128, 64, 8, 4, 1)  # past 32 rows: 8 warps
    assert skinny_config(17408, 5120, 65, cuda, swiglu=True).block_n == 64  # two accumulators within registers


@pytest.mark.parametrize("swiglu", [False, True])
def test_linear_takes_it_only_where_the_table_timed_it_faster(tmp_path, monkeypatch, swiglu):
    """gemv.linear: F.linear for several rows without a tuning table (CPU, or a GPU with no skinny entries); the
    skinny op where the table's entry for the shape (or its nearest row count) beat cuBLAS, equal to F.linear within
    bf16 rounding; F.linear where it lost, past SKINNY_MAX_ROWS, or for another shape; one row stays the GEMV's."""
    x, w = _inputs(17, 64, gemv.GEMV_MIN_K, torch.bfloat16, 1)
    x = x.view(1, 17, -1)
    n_out = 32 if swiglu else 64
    ran = []
    real_launch = gemv.launch
    monkeypatch.setattr(gemv, "launch", lambda op, *args: ran.append(op) or real_launch(op, *args))
    plain = gemv.linear(x, w, TRITON, swiglu=swiglu, min_bytes=0)
    assert ran == []

    def table(us: float, rows: int = 17) -> None:
        key = skinny_key(n_out, gemv.GEMV_MIN_K, rows, torch.bfloat16, swiglu)
        entry = {
            "config": list(skinny_config(n_out, gemv.GEMV_MIN_K, rows, torch.device(DEVICE), swiglu)),
            "us": us,
            "cublas_us": 10,
        }
        path = tmp_path / f"table_{us}_{rows}.json"
        path.write_text(json.dumps({"best": {"skinny_gemm": {key: entry}}}))
        monkeypatch.setattr(launch_config.settings(), "tuning", str(path))

    table(us=9.0)  # timed faster than cuBLAS at 17 rows
    got = gemv.linear(x, w, TRITON, swiglu=swiglu, min_bytes=0)
    assert ran == [gemv.skinny_op] and got.shape == plain.shape
    assert_close("linear", _reference(x, w, swiglu), got, TOL[torch.bfloat16])
    gemv.linear(x[:, :5], w, TRITON, swiglu=swiglu, min_bytes=0)  # 5 rows: the nearest measured count, 17
    assert ran[-1] is gemv.skinny_op and len(ran) == 2
    gemv.linear(x[:, :1], w, TRITON, swiglu=swiglu, min_bytes=0)
    assert ran[-1] is gemv.gemv_op
    monkeypatch.setattr(gemv, "SKINNY_MAX_ROWS", 16)
    gemv.linear(x, w, TRITON, swiglu=swiglu, min_bytes=0)
    assert len(ran) == 3  # 17 rows past the limit: F.linear
    monkeypatch.setattr(gemv, "SKINNY_MAX_ROWS", 128)
    gemv.linear(x, w[:48], TRITON, swiglu=swiglu, min_bytes=0)
    assert len(ran) == 3  # another shape: no entry, F.linear
    table(us=11.0, rows=16)  # timed slower than cuBLAS
    gemv.linear(x, w, TRITON, swiglu=swiglu, min_bytes=0)
    assert len(ran) == 3


def test_route_compiles_without_a_graph_break(tmp_path, monkeypatch):
    """The table lookup is a constant to torch.compile (fullgraph, static shapes), taken or not: traced inline
    it broke the graph in every large projection and the resumed frames hit dynamo's recompile limit (session 51)."""
    x, w = _inputs(17, 64, gemv.GEMV_MIN_K, torch.bfloat16, 4)
    key = skinny_key(64, gemv.GEMV_MIN_K, 17, torch.bfloat16, False)
    path = tmp_path / "table.json"
    entry = {"config": [16, 32, 1, 1, 1], "us": 1, "cublas_us": 2}
    path.write_text(json.dumps({"best": {"skinny_gemm": {key: entry}}}))
    monkeypatch.setattr(launch_config.settings(), "tuning", str(path))
    torch._dynamo.reset()
    routed = torch.compile(
        lambda a, b: gemv.linear(a, b, TRITON, min_bytes=0), backend="eager", fullgraph=True, dynamic=False
    )  # as the engine compiles its stages
    assert_close("compiled route", _reference(x, w, False), routed(x, w), TOL[torch.bfloat16])
    assert_close("compiled, no entry", _reference(x, w[:48], False), routed(x, w[:48]), TOL[torch.bfloat16])


def test_skinny_op_passes_opcheck():
    x, w = _inputs(17, 64, 32, torch.bfloat16, 2)
    torch.library.opcheck(gemv.skinny_op, (x, w, False))
