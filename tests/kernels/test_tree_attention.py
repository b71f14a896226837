"""Tree-verify kernels (weaver.kernels.triton.tree_attention) and the row-tiled fused_gemv vs their torch references.

CPU: interpreted at small sizes on random trees (pad nodes included). GPU (`--triton-full`):
compiled, at SmolLM2 / Qwen3 shapes. Tree attention is also checked by the branch property: node i's
output equals plain attention over the committed prefix followed by the path root..i.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from helpers.attention import HEADS, cache_inputs, rope_inv_freq
from helpers.trees import tree_batches
from helpers.triton_env import DEVICE, FULL, pinned  # sets TRITON_INTERPRET before triton loads
from hypothesis import given, settings
from hypothesis import strategies as st

from weaver.kernels import launch_config
from weaver.kernels import triton as wt
from weaver.kernels.triton import tuning
from weaver.kernels.triton.decode import GemmTiles
from weaver.ops.decode import fused_gemv_ref, rms_norm_ref, tree_attention_ref, tree_rope_kv_write_ref
from weaver.ops.tree import ancestor_mask, node_depth
from weaver.testing import assert_close, root_path

TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}
TILES = [None, GemmTiles(16, 16, 16, 1, 1), GemmTiles(32, 32, 64, 2, 2), GemmTiles(16, 64, 32, 8, 4)]


@settings(max_examples=6 if FULL else 30, deadline=None)
@given(
    m=st.sampled_from([1, 7, 64, 130]) if FULL else st.integers(1, 40),
    k=st.sampled_from([576, 1536]) if FULL else st.integers(1, 150),
    n=st.sampled_from([960, 3072, 49152]) if FULL else st.integers(1, 40).map(lambda v: 2 * v),  # past 64 once
    norm=st.booleans(),
    swiglu=st.booleans(),
    residual=st.booleans(),
    fp32_out=st.booleans(),
    norm_out=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    tiles=st.sampled_from(TILES),  # None: the default launch
    seed=st.integers(0, 10_000),
)
def test_fused_gemv_row_tiles_matches_reference(m, k, n, norm, swiglu, residual, fp32_out, norm_out, dtype, tiles,
                                                seed):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, k, generator=gen) * 3).to(dtype).to(DEVICE)
    w = (torch.randn(n, k, generator=gen) / k**0.5).to(dtype).to(DEVICE)
    nw = (1 + 0.3 * torch.randn(k, generator=gen)).to(dtype).to(DEVICE) if norm or norm_out else None
    n_out = n // 2 if swiglu else n
    res = torch.randn(m, n_out, generator=gen).to(dtype).to(DEVICE) if residual else None
    out_dtype = torch.float32 if fp32_out else None
    normed = torch.full_like(x, float("nan")) if norm_out else None
    kw = dict(norm_weight=nw, eps=1e-5, residual=res, swiglu=swiglu, out_dtype=out_dtype)
    got = wt.fused_gemv(x, w, **kw, norm_out=normed, row_tiles=True, tiles=tiles)

    def exact(t):  # fp32 cases: a float64 reference; bf16 cases: the same bf16 rounding points
        return t.double() if t is not None and dtype == torch.float32 else t

    want = fused_gemv_ref(exact(x), exact(w), **{**kw, "norm_weight": exact(nw), "residual": exact(res)})
    assert got.shape == (m, n_out) and got.dtype == (out_dtype or dtype)
    assert_close("fused_gemv rows", want, got, TOL[dtype])
    if norm_out:
        assert_close("norm_out", rms_norm_ref(exact(x), exact(nw), 1e-5), normed, TOL[dtype])
    if m >= 16 and not norm_out and tiles is None:  # the default dispatch takes the row tiles from 16 rows on
        assert torch.equal(wt.fused_gemv(x, w, **kw), got)


@pytest.mark.parametrize("row_tiles", [False, True])
def test_fused_gemv_writes_into_a_column_slice(row_tiles):
    """out= a column slice of a wider buffer (two GEMMs filling one q | kv row): the rest is left alone."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(17, 24, generator=gen).to(DEVICE)
    w = torch.randn(10, 24, generator=gen).to(DEVICE)
    nw = (1 + 0.3 * torch.randn(24, generator=gen)).to(DEVICE)
    buf = torch.full((17, 16), float("nan"), device=DEVICE)
    got = wt.fused_gemv(x, w, norm_weight=nw, row_tiles=row_tiles, out=buf[:, 4:14])
    assert got.data_ptr() == buf[:, 4:14].data_ptr()
    assert_close("out slice", fused_gemv_ref(x, w, norm_weight=nw), buf[:, 4:14], 1e-5)
    assert buf[:, :4].isnan().all() and buf[:, 14:].isnan().all()
    with pytest.raises(ValueError, match="out must be"):
        wt.fused_gemv(x, w, out=buf[:, :9])
    with pytest.raises(ValueError, match="out must be"):
        wt.fused_gemv(x, w, out=buf[:, :10].double())


def test_fused_gemv_rejects_bad_norm_out():
    x = torch.zeros(2, 8, device=DEVICE)
    w = torch.zeros(4, 8, device=DEVICE)
    with pytest.raises(ValueError, match="norm_out needs norm_weight"):
        wt.fused_gemv(x, w, norm_out=torch.empty_like(x))
    with pytest.raises(ValueError, match="row-tiled"):
        wt.fused_gemv(x, w, norm_weight=torch.ones(8, device=DEVICE), norm_out=torch.empty_like(x), row_tiles=False)
    with pytest.raises(ValueError, match="tiles configure the row-tiled"):
        wt.fused_gemv(x, w, row_tiles=False, tiles=GemmTiles(16, 16, 16))
    with pytest.raises(ValueError, match="powers of two >= 16"):
        wt.fused_gemv(x, w, tiles=GemmTiles(16, 8, 16))


def test_tuning_falls_back_to_the_nearest_measured_count():
    """A shape measured at 16 and 65 rows: 17 takes 65's entry, 100 takes 65's, 3 takes 16's; exact keys win;
    another shape (or a key without a count) has none."""
    def key(m, n=960):
        return tuning.gemm_rows_key(n, 576, m, torch.bfloat16, torch.bfloat16, True, False, False, False)

    entries = {key(16): "e16", key(65): "e65", tuning.attention_key(16, 9, 3, 64, torch.bfloat16): "a16"}
    assert [tuning.nearest_entry(entries, key(m)) for m in (16, 17, 65, 100, 3)] == ["e16", "e65", "e65", "e65", "e16"]
    assert tuning.nearest_entry(entries, key(17, n=961)) is None
    assert tuning.nearest_entry(entries, tuning.attention_key(33, 9, 3, 64, torch.bfloat16)) == "a16"
    assert tuning.nearest_entry(entries, tuning.attention_key(33, 9, 3, 128, torch.bfloat16)) is None
    assert tuning.nearest_entry(entries, "no-count") is None


def test_tuning_table_sets_the_launch(tmp_path, monkeypatch):
    """RuntimeOptions.tuning: a kernel takes its shape's entry (here deliberately invalid, so it shows)."""
    x, w = torch.zeros(16, 8, device=DEVICE), torch.zeros(4, 8, device=DEVICE)
    gemm = tuning.gemm_rows_key(4, 8, 16, torch.float32, torch.float32, False, False, False, False)
    attn = tuning.attention_key(3, 4, 2, 4, torch.float32)
    table = {"best": {"gemm_rows": {gemm: {"config": [16, 16, 8, 1, 1]}},
                      "tree_attention": {attn: {"config": [24, 16, 4, 3]}}}}
    path = tmp_path / "tuning.json"
    path.write_text(json.dumps(table))
    monkeypatch.setattr(launch_config.settings(), "tuning", str(path))
    assert tuning.tuned("gemm_rows", gemm) == [16, 16, 8, 1, 1] and tuning.tuned("gemm_rows", "n1") is None
    with pytest.raises(ValueError, match="powers of two >= 16"):
        wt.fused_gemv(x, w)
    with pytest.raises(ValueError, match="powers of two >= 16"):
        wt.fused_gemv(x[:15], w, row_tiles=True)  # another row count of the shape: its nearest measured entry
    assert wt.fused_gemv(x, w[:3], row_tiles=True).shape == (16, 3)  # another shape: the default launch
    ck = torch.zeros(1, 2, 8, 4, device=DEVICE)
    lengths = torch.zeros(1, dtype=torch.long, device=DEVICE)
    anc = torch.ones(1, 3, 3, dtype=torch.bool, device=DEVICE)
    q = torch.zeros(3, 16, device=DEVICE)
    with pytest.raises(ValueError, match="block_r and block_s must be powers of two"):
        wt.tree_attention(q, ck, ck, lengths, anc, 4, 2)
    assert wt.tree_attention(q, ck, ck, lengths, anc, 4, 2, num_warps=2).shape == (3, 16)  # given: no lookup
    monkeypatch.setattr(launch_config.settings(), "tuning", str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match="not a readable tuning table"):
        tuning.tuned("gemm_rows", gemm)


# trees, head layouts, head sizes, RoPE spans and qk-norm of the RoPE kernels' tests
ROPE_CASES = dict(
    rows=tree_batches(max_b=2, max_t=64 if FULL else 20),
    heads=st.sampled_from(HEADS),
    d=st.sampled_from([64, 128]) if FULL else st.sampled_from([8, 16, 24]),
    rot_frac=st.sampled_from([1.0, 0.25]),
    qk_norm=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
)


@settings(max_examples=5 if FULL else 6, deadline=None)
@given(
    **ROPE_CASES,
    prefix=st.sampled_from([100, 1000]) if FULL else st.integers(0, 40),
    num_warps=st.sampled_from([None, 1, 8]),
    seed=st.integers(0, 10_000),
)
@pinned(  # GQA 3:1, a head dim short of its block (24 of 32), partial RoPE, qk-norm, bf16, a pad node; then
    # one-node rows of a single kv head (4:1), full RoPE, fp32, no prefix
    dict(rows=[[-1, 0, 1, -1, 3, 3, 5]], heads=(9, 3), d=24, rot_frac=0.25, prefix=40, qk_norm=True,
         dtype=torch.bfloat16, num_warps=8, seed=1),
    dict(rows=[[-1], [-1]], heads=(4, 1), d=8, rot_frac=1.0, prefix=0, qk_norm=False, dtype=torch.float32,
         num_warps=None, seed=2),
)
def test_tree_rope_kv_write_matches_reference(rows, heads, d, rot_frac, prefix, qk_norm, dtype, num_warps, seed):
    gen = torch.Generator().manual_seed(seed)
    parents = torch.tensor(rows)
    b, t = parents.shape
    h, hkv = heads
    depth = node_depth(parents)
    lengths, ck, cv = cache_inputs(gen, parents, heads, d, prefix, dtype)
    qkv = torch.randn(b * t, (h + 2 * hkv) * d, generator=gen).to(dtype)
    inv_freq = rope_inv_freq(d, rot_frac)
    qn = (1 + 0.2 * torch.randn(d, generator=gen)).to(dtype) if qk_norm else None
    kn = (1 + 0.2 * torch.randn(d, generator=gen)).to(dtype) if qk_norm else None
    ck2, cv2 = ck.clone(), cv.clone()
    args = [lengths, depth, inv_freq, h, hkv, qn, kn]
    dev = [a.to(DEVICE) if isinstance(a, torch.Tensor) else a for a in args]
    ck_dev, cv_dev = ck.to(DEVICE), cv.to(DEVICE)
    got = wt.tree_rope_kv_write(qkv.to(DEVICE), ck_dev, cv_dev, *dev, eps=1e-6, num_warps=num_warps)
    want = tree_rope_kv_write_ref(qkv, ck2, cv2, *args, eps=1e-6)
    assert_close("q", want, got, TOL[dtype])
    assert_close("cache_k", ck2, ck_dev, TOL[dtype])  # the tree's slots written, every other slot untouched
    assert torch.equal(cv_dev.cpu(), cv2)


def test_tree_rope_kv_write_drops_slots_past_capacity():
    gen = torch.Generator().manual_seed(0)
    parents = torch.tensor([[-1, 0, 1, 1, 0]])
    depth = node_depth(parents)
    lengths = torch.tensor([3])
    qkv = torch.randn(5, 3 * 8, generator=gen)
    inv_freq = rope_inv_freq(8, 1.0)
    big = [torch.zeros(1, 1, 8, 8) for _ in range(2)]
    tree_rope_kv_write_ref(qkv, *big, lengths, depth, inv_freq, 1, 1)
    small = [torch.zeros(1, 1, 6, 8, device=DEVICE) for _ in range(2)]  # slots 6, 7 do not exist
    wt.tree_rope_kv_write(qkv.to(DEVICE), *small, lengths.to(DEVICE), depth.to(DEVICE), inv_freq.to(DEVICE), 1, 1)
    assert_close("cache_k", big[0][:, :, :6], small[0], 1e-5)
    assert torch.equal(big[1][:, :, :6], small[1].cpu())


# tree attention's tile boundaries: 17 nodes x 4 query heads of one kv head = 68 rows in 16-row programs (the
# last partial), the tree in 16-slot steps (16 + 1, a pad node) after a prefix of up to 40 slots (16-slot steps,
# a masked tail), bf16 with a head dim of 24 in a 32-wide block; a prefix past the interpreter's default 128-slot
# step (MHA); single nodes in 32-row programs with no prefix; GQA 3:1 (6 nodes: 18 rows, 16-row programs)
ATTENTION_PINS = (
    dict(rows=[[-1, 0, 1, 2, 3, 4, 5, -1, 7, 8, 9, 10, 11, 12, 13, 14, 15]], heads=(4, 1), d=24, prefix=40,
         blocks=(16, 16, None, None), dtype=torch.bfloat16, seed=1),
    dict(rows=[[-1, 0, 1]], heads=(4, 4), d=8, prefix=150, blocks=(None, None, None, None), dtype=torch.float32,
         seed=2),
    dict(rows=[[-1], [-1]], heads=(8, 2), d=16, prefix=0, blocks=(32, 16, 8, 4), dtype=torch.float32, seed=3),
    dict(rows=[[-1, 0, 0, 1, 1, 2], [-1, 0, 1, 2, -1, 4]], heads=(9, 3), d=16, prefix=20, blocks=(16, 32, 2, 1),
         dtype=torch.float32, seed=4),
)


def _attention_inputs(rows, heads, d, prefix, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    parents = torch.tensor(rows)
    b, t = parents.shape
    h, _ = heads
    lengths, ck, cv = cache_inputs(gen, parents, heads, d, prefix, dtype)
    q = torch.randn(b * t, h * d, generator=gen).to(dtype)
    return parents, lengths, ck, cv, q


@settings(max_examples=5 if FULL else 8, deadline=None)
@given(
    rows=tree_batches(max_b=2, max_t=64 if FULL else 20),
    heads=st.sampled_from(HEADS),
    d=st.sampled_from([64, 128]) if FULL else st.sampled_from([8, 16, 24]),
    prefix=st.sampled_from([100, 1000]) if FULL else st.integers(0, 150),
    # (rows, slots) per program / step, warps, stages
    blocks=st.sampled_from([(None, None, None, None), (16, 16, None, None), (16, 32, 2, 1), (32, 16, 8, 4)]),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    seed=st.integers(0, 10_000),
)
@pinned(*ATTENTION_PINS)
def test_tree_attention_matches_reference(rows, heads, d, prefix, blocks, dtype, seed):
    parents, lengths, ck, cv, q = _attention_inputs(rows, heads, d, prefix, dtype, seed)
    anc = ancestor_mask(parents)
    h, hkv = heads
    block_r, block_s, warps, stages = blocks
    got = wt.tree_attention(q.to(DEVICE), ck.to(DEVICE), cv.to(DEVICE), lengths.to(DEVICE), anc.to(DEVICE), h, hkv,
                            block_r=block_r, block_s=block_s, num_warps=warps, num_stages=stages)
    want = tree_attention_ref(q, ck, cv, lengths, anc, h, hkv)
    assert_close("tree_attention", want, got, TOL[dtype])


@settings(max_examples=5 if FULL else 6, deadline=None)
@given(
    **ROPE_CASES,
    prefix=st.sampled_from([100, 1000]) if FULL else st.integers(0, 150),
    blocks=st.sampled_from([(None, None, None, None), (16, 16, None, None), (16, 32, 2, 1), (32, 16, 8, 4)]),
    seed=st.integers(0, 10_000),
)
@pinned(*({**case, "rot_frac": rot, "qk_norm": norm} for case, rot, norm in  # the same boundaries, partial RoPE
          zip(ATTENTION_PINS, (0.25, 1.0, 0.25, 1.0), (True, False, False, True))))  # and qk-norm  # fmt: skip
def test_tree_attention_rope_equals_the_two_launches(rows, heads, d, rot_frac, prefix, qk_norm, blocks, dtype, seed):
    """One launch = tree_rope_kv_write then tree_attention: the same output and the same caches afterwards
    (the tree's slots written once, stale slots past the tree untouched)."""
    parents, lengths, ck, cv, _ = _attention_inputs(rows, heads, d, prefix, dtype, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    b, t = parents.shape
    h, hkv = heads
    qkv = torch.randn(b * t, (h + 2 * hkv) * d, generator=gen).to(dtype).to(DEVICE)
    qn = (1 + 0.2 * torch.randn(d, generator=gen)).to(dtype).to(DEVICE) if qk_norm else None
    kn = (1 + 0.2 * torch.randn(d, generator=gen)).to(dtype).to(DEVICE) if qk_norm else None
    depth, anc = node_depth(parents).to(DEVICE), ancestor_mask(parents).to(DEVICE)
    lengths, inv_freq = lengths.to(DEVICE), rope_inv_freq(d, rot_frac).to(DEVICE)
    two = [ck.to(DEVICE), cv.to(DEVICE)]
    one = [c.clone() for c in two]
    q = wt.tree_rope_kv_write(qkv, *two, lengths, depth, inv_freq, h, hkv, qn, kn, eps=1e-6)
    want = wt.tree_attention(q, *two, lengths, anc, h, hkv)
    block_r, block_s, warps, stages = blocks
    cos, sin = wt.rope_table(lengths, depth, inv_freq, dtype)
    got = wt.tree_attention_rope(qkv, *one, lengths, anc, cos, sin, h, hkv, qn, kn, eps=1e-6,
                                 block_r=block_r, block_s=block_s, num_warps=warps, num_stages=stages)  # fmt: skip
    assert_close("tree_attention_rope", want, got, TOL[dtype])
    assert torch.equal(two[1], one[1])
    if dtype == torch.float32 and qk_norm and DEVICE == "cuda":  # the kernels' k-norms round ~1 ulp apart
        assert_close("k cache", two[0], one[0], 1e-6)  # (H100, session 50: 4.8e-7 abs; bf16 and no norm: exact)
    else:
        assert torch.equal(two[0], one[0])


def test_tree_attention_rope_drops_slots_past_capacity_and_checks_inputs():
    gen = torch.Generator().manual_seed(0)
    parents = torch.tensor([[-1, 0, 1, 1, 0]])
    depth, anc = node_depth(parents).to(DEVICE), ancestor_mask(parents).to(DEVICE)
    lengths = torch.tensor([3], device=DEVICE)
    qkv = torch.randn(5, 3 * 16, generator=gen).to(DEVICE)
    inv_freq = rope_inv_freq(16, 1.0).to(DEVICE)
    big = [torch.zeros(1, 1, 8, 16, device=DEVICE) for _ in range(2)]
    want = wt.tree_attention(wt.tree_rope_kv_write(qkv, *big, lengths, depth, inv_freq, 1, 1), *big, lengths, anc, 1, 1)
    small = [torch.zeros(1, 1, 6, 16, device=DEVICE) for _ in range(2)]  # slots 6, 7 do not exist
    rope = wt.rope_table(lengths, depth, inv_freq, torch.float32)
    got = wt.tree_attention_rope(qkv, *small, lengths, anc, *rope, 1, 1)
    assert_close("o", want, got, 1e-5)  # nodes 3, 4 still see their own K/V (from registers)
    assert torch.equal(big[0][:, :, :6], small[0]) and torch.equal(big[1][:, :, :6], small[1])
    with pytest.raises(ValueError, match="dtype of qkv"):
        wt.tree_attention_rope(qkv, *(c.double() for c in small), lengths, anc, *rope, 1, 1)
    with pytest.raises(ValueError, match="anc"):
        wt.tree_attention_rope(qkv, *small, lengths, anc[:, :4], *rope, 1, 1)
    with pytest.raises(ValueError, match="qkv must be"):
        wt.tree_attention_rope(qkv[:4], *small, lengths, anc, *rope, 1, 1)
    with pytest.raises(ValueError, match="rope_table"):
        wt.tree_attention_rope(qkv, *small, lengths, anc, *(c.double() for c in rope), 1, 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_table_is_cos_sin_of_the_node_positions(dtype):
    gen = torch.Generator().manual_seed(2)
    parents = torch.tensor([[-1, 0, 1, 0, 3], [-1, 0, 0, 2, -1]])
    depth, lengths = node_depth(parents), torch.tensor([7, 3000])
    inv_freq = rope_inv_freq(32, 0.5) * (1 + 0.01 * torch.rand(8, generator=gen))
    cos, sin = wt.rope_table(lengths.to(DEVICE), depth.to(DEVICE), inv_freq.to(DEVICE), dtype)
    angle = (lengths[:, None] + depth).reshape(-1, 1).float() * inv_freq  # [B T, rot/2] fp32, as the kernels
    assert cos.shape == (10, 8) and cos.dtype == dtype
    assert_close("cos", angle.double().cos().to(dtype), cos, 1e-5 if dtype == torch.float32 else 1e-2)
    assert_close("sin", angle.double().sin().to(dtype), sin, 1e-5 if dtype == torch.float32 else 1e-2)


@settings(max_examples=12, deadline=None)
@given(
    rows=tree_batches(max_b=2, max_t=12),
    heads=st.sampled_from(HEADS),
    prefix=st.integers(0, 30),
    seed=st.integers(0, 10_000),
)
def test_tree_attention_equals_attention_over_each_root_path(rows, heads, prefix, seed):
    d = 16
    parents, lengths, ck, cv, q = _attention_inputs(rows, heads, d, prefix, torch.float32, seed)
    b, t = parents.shape
    h, hkv = heads
    got = wt.tree_attention(q.to(DEVICE), ck.to(DEVICE), cv.to(DEVICE), lengths.to(DEVICE),
                            ancestor_mask(parents).to(DEVICE), h, hkv).cpu()
    q = q.double().view(b, t, h, d)
    for r in range(b):
        length = int(lengths[r])
        for i in range(t):
            slots = list(range(length)) + [length + j for j in root_path(rows[r], i)]
            keys = ck[r, :, slots].double().repeat_interleave(h // hkv, dim=0)  # [H, n, D]
            values = cv[r, :, slots].double().repeat_interleave(h // hkv, dim=0)
            weights = torch.softmax((keys @ q[r, i, :, :, None])[..., 0] / math.sqrt(d), dim=-1)
            want = (weights[:, None, :] @ values)[:, 0].reshape(h * d)
            assert_close(f"row {r} node {i}", want, got[r * t + i], 1e-5)


def test_tree_kernels_reject_bad_shapes():
    ck = torch.zeros(1, 2, 8, 4, device=DEVICE)
    lengths = torch.zeros(1, dtype=torch.long, device=DEVICE)
    anc = torch.ones(1, 3, 3, dtype=torch.bool, device=DEVICE)
    with pytest.raises(ValueError, match="q must be"):
        wt.tree_attention(torch.zeros(2, 16, device=DEVICE), ck, ck, lengths, anc, 4, 2)
    with pytest.raises(ValueError, match="anc must be"):
        wt.tree_attention(torch.zeros(3, 16, device=DEVICE), ck, ck, lengths, anc[:, :2], 4, 2)
    depth = torch.zeros(1, 3, dtype=torch.long, device=DEVICE)
    inv_freq = torch.ones(2, device=DEVICE)
    with pytest.raises(ValueError, match="qkv must be"):
        wt.tree_rope_kv_write(torch.zeros(3, 16, device=DEVICE), ck, ck, lengths, depth, inv_freq, 4, 2)


def test_packaged_tuning_table(monkeypatch):
    """The packaged H200 table is a readable sweep table; RuntimeOptions.tuning overrides it, 'none' turns it off."""
    table = json.loads(tuning.PACKAGED["H200"].read_text())
    assert {"gemm_rows", "tree_attention", "tree_rope_kv_write"} <= set(table["best"])
    key = tuning.gemm_rows_key(960, 576, 16, torch.bfloat16, torch.bfloat16, True, False, False, False)
    assert len(table["best"]["gemm_rows"][key]["config"]) == 5
    monkeypatch.setattr(launch_config.settings(), "tuning", "none")
    assert tuning.table_path() is None
    monkeypatch.setattr(launch_config.settings(), "tuning", "/some/table.json")
    assert tuning.table_path() == "/some/table.json"
    monkeypatch.setattr(launch_config.settings(), "tuning", None)
    monkeypatch.setattr(tuning, "_packaged_path", lambda: str(tuning.PACKAGED["H200"]))
    assert tuning.tuned("gemm_rows", key) == table["best"]["gemm_rows"][key]["config"]


def test_programmatic_dependent_launch_only_compiled_on_hopper(monkeypatch):
    """The row GEMM asks for PDL only where it can work: compiled (not the interpreter), CUDA sm_90+, 16-bit
    weights, and not with RuntimeOptions(pdl=False) (the launch settings, read at every call)."""
    from weaver.kernels.triton.decode import pdl_gemm_options

    assert pdl_gemm_options(torch.device("cpu"), 576, 2) == {"PDL": False, "K_LINES": 1}
    if DEVICE == "cuda" and torch.cuda.get_device_capability()[0] >= 9:
        assert pdl_gemm_options(torch.device("cuda"), 576, 2) == {"PDL": True, "K_LINES": 16, "launch_pdl": True}
        # fp32 weights: the prefetch assumes 2 bytes
        assert pdl_gemm_options(torch.device("cuda"), 576, 4) == {"PDL": False, "K_LINES": 1}
        monkeypatch.setattr(launch_config.settings(), "pdl", False)
        assert pdl_gemm_options(torch.device("cuda"), 576, 2) == {"PDL": False, "K_LINES": 1}
