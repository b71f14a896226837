"""weaver.kernels.triton.fused_gemv / decode_attention vs their torch references (weaver.ops.decode).

CPU: interpreted at small sizes. GPU (`--triton-full`): compiled, SmolLM2 / Qwen3 shapes.
"""

from __future__ import annotations

import pytest
import torch
from helpers.triton_env import DEVICE, FULL, pinned  # sets TRITON_INTERPRET before triton loads
from hypothesis import given, settings
from hypothesis import strategies as st

from weaver.kernels import triton as wt
from weaver.kernels.triton.decode import gemv_config
from weaver.ops.decode import decode_attention_ref, fused_gemv_ref
from weaver.testing import assert_close

TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


@settings(max_examples=8, deadline=None)
@given(
    m=st.integers(1, 3),
    k=st.sampled_from([576, 1536]) if FULL else st.integers(1, 200),
    # interpreted: up to 48 outputs, three of the default 16-output tiles (2-output tiles: up to 24 programs)
    n=st.sampled_from([960, 3072, 49152]) if FULL else st.integers(1, 24).map(lambda v: 2 * v),
    norm=st.booleans(),
    swiglu=st.booleans(),
    residual=st.booleans(),
    fp32_out=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    config=st.sampled_from([None, (2, 64, 1), (16, 16, 4)]),  # (BLOCK_N, BLOCK_K, num_warps); None: gemv_config
    block_m=st.sampled_from([1, 2, 4]),  # rows a program
    seed=st.integers(0, 10_000),
)
@pinned(  # default tiles (16 x 128): K = 129, two K steps, the last of one column; SwiGLU's 17 outputs, a
    # masked tail; then one element; then K = 65 past 64-column steps, 2-output tiles, fp32 out
    dict(m=3, k=129, n=34, norm=True, swiglu=True, residual=True, fp32_out=False, dtype=torch.bfloat16, config=None,
         block_m=1, seed=1),
    dict(m=1, k=1, n=2, norm=False, swiglu=False, residual=False, fp32_out=False, dtype=torch.float32,
         config=(16, 16, 4), block_m=1, seed=2),
    dict(m=2, k=65, n=10, norm=True, swiglu=False, residual=False, fp32_out=True, dtype=torch.float32,
         config=(2, 64, 1), block_m=1, seed=3),
    # 3 rows in 2-row programs: the second program's row 4 is masked off; norm, SwiGLU and the residual per row
    dict(m=3, k=129, n=34, norm=True, swiglu=True, residual=True, fp32_out=False, dtype=torch.bfloat16, config=None,
         block_m=2, seed=4),
)
def test_fused_gemv_matches_reference(m, k, n, norm, swiglu, residual, fp32_out, dtype, config, block_m, seed):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, k, generator=gen) * 3).to(dtype).to(DEVICE)
    w = (torch.randn(n, k, generator=gen) / k**0.5).to(dtype).to(DEVICE)
    nw = (1 + 0.3 * torch.randn(k, generator=gen)).to(dtype).to(DEVICE) if norm else None
    n_out = n // 2 if swiglu else n
    res = torch.randn(m, n_out, generator=gen).to(dtype).to(DEVICE) if residual else None
    out_dtype = torch.float32 if fp32_out else None
    kw = dict(norm_weight=nw, eps=1e-5, residual=res, swiglu=swiglu, out_dtype=out_dtype)
    got = wt.fused_gemv(x, w, **kw, config=config, block_m=block_m)

    def exact(t):  # fp32 cases: a float64 reference; bf16 cases: the same bf16 rounding points
        return t.double() if t is not None and dtype == torch.float32 else t

    want = fused_gemv_ref(exact(x), exact(w), **{**kw, "norm_weight": exact(nw), "residual": exact(res)})
    assert got.shape == (m, n_out) and got.dtype == (out_dtype or dtype)
    assert_close("fused_gemv", want, got, TOL[dtype])


@settings(max_examples=6 if FULL else 8, deadline=None)
@given(
    b=st.integers(1, 3),
    heads=st.sampled_from([(9, 3), (4, 4), (8, 2)]),
    d=st.sampled_from([64, 128]) if FULL else st.sampled_from([8, 16, 24]),
    rot_frac=st.sampled_from([1.0, 0.25]),
    s=st.sampled_from([512, 2048]) if FULL else st.integers(1, 150),
    qk_norm=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    seed=st.integers(0, 10_000),
)
@pinned(  # GQA 3:1, a head dim of 24 in a 32-wide block, partial RoPE, qk-norm, bf16, 140 slots (seed 4): past
    # the first 128-slot step; then MHA rows at slot 0 or 1 (an empty or one-slot prefix)
    dict(b=1, heads=(9, 3), d=24, rot_frac=0.25, s=150, qk_norm=True, dtype=torch.bfloat16, seed=4),
    dict(b=3, heads=(4, 4), d=8, rot_frac=1.0, s=1, qk_norm=False, dtype=torch.float32, seed=5),
)
def test_decode_attention_matches_reference(b, heads, d, rot_frac, s, qk_norm, dtype, seed):
    h, hkv = heads
    rot = max(2, int(d * rot_frac) // 2 * 2)
    gen = torch.Generator().manual_seed(seed)
    qkv = torch.randn(b, (h + 2 * hkv) * d, generator=gen).to(dtype).to(DEVICE)
    ck = torch.randn(b, hkv, s + 1, d, generator=gen).to(dtype).to(DEVICE)
    cv = torch.randn(b, hkv, s + 1, d, generator=gen).to(dtype).to(DEVICE)
    lengths = torch.randint(0, s + 1, (b,), generator=gen).to(DEVICE)
    inv_freq = (1.0 / (10000 ** (torch.arange(0, rot, 2).float() / rot))).to(DEVICE)
    qn = (1 + 0.2 * torch.randn(d, generator=gen)).to(dtype).to(DEVICE) if qk_norm else None
    kn = (1 + 0.2 * torch.randn(d, generator=gen)).to(dtype).to(DEVICE) if qk_norm else None
    ck2, cv2 = ck.clone(), cv.clone()
    got = wt.decode_attention(qkv, ck, cv, lengths, inv_freq, h, hkv, qn, kn, eps=1e-6)
    want = decode_attention_ref(qkv, ck2, cv2, lengths, inv_freq, h, hkv, qn, kn, eps=1e-6)
    assert_close("decode_attention", want, got, TOL[dtype])
    # the new token's K/V land at slot lengths[b]; every other slot is untouched
    assert_close("cache_k", ck2, ck, TOL[dtype])
    assert torch.equal(cv, cv2)


def test_gemv_rejects_bad_shapes():
    x = torch.zeros(1, 8, device=DEVICE)
    with pytest.raises(ValueError, match="fused_gemv needs"):
        wt.fused_gemv(x, torch.zeros(4, 7, device=DEVICE))
    with pytest.raises(ValueError, match="swiglu"):
        wt.fused_gemv(x, torch.zeros(5, 8, device=DEVICE), swiglu=True)


@pytest.mark.parametrize("k, n", [(1500, 8), (40, 6)])
def test_adapter_rows_launch_loads_whole_rows(k, n):
    """The GPU launch gemv_config gives a program of several node rows (whole input rows, BLOCK_K >= K, masked past
    K) computes the reference, run here on this device: 4 rows in one 4-row program, norm + SwiGLU + residual."""
    config = gemv_config(n // 2, k, 4, torch.device("cuda"), block_m=4)
    assert config[1] >= min(k, 2048) and config[1] & (config[1] - 1) == 0
    gen = torch.Generator().manual_seed(k)
    x = (torch.randn(4, k, generator=gen) * 3).to(DEVICE)
    w = (torch.randn(n, k, generator=gen) / k**0.5).to(DEVICE)
    nw = (1 + 0.3 * torch.randn(k, generator=gen)).to(DEVICE)
    res = torch.randn(4, n // 2, generator=gen).to(DEVICE)
    kw = dict(norm_weight=nw, eps=1e-5, residual=res, swiglu=True)
    got = wt.fused_gemv(x, w, **kw, config=config, block_m=4)
    want = fused_gemv_ref(x.double(), w.double(), **{**kw, "norm_weight": nw.double(), "residual": res.double()})
    assert_close("fused_gemv, 4-row program", want, got, TOL[torch.float32])
