"""The tree verify's fused (norm + qkv + qk-norm + RoPE + K/V write) launch vs the two launches it replaces.

CPU: under TRITON_INTERPRET=1 at small sizes. GPU (`WEAVER_TRITON_FULL=1`): compiled, at SmolLM2's attention
(hidden 576, 9 q / 3 kv heads of 64) and a qk-norm (Qwen3-like) case, 16 and 65 tree rows.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_triton_verify import TOL, _inputs, _inv_freq, trees
from triton_env import DEVICE, FULL  # sets TRITON_INTERPRET before triton loads

from weaver.ops import triton as wt
from weaver.ops.tree import node_depth
from weaver.ops.triton.verify_qkv import qkv_rope_write
from weaver.testing import assert_close


@settings(max_examples=6 if FULL else 12, deadline=None)
@given(
    rows=trees(max_b=2, max_t=65 if FULL else 12),
    heads=st.sampled_from([(9, 3), (4, 1), (2, 2)]),
    d=st.sampled_from([64, 128]) if FULL else st.sampled_from([32, 64]),
    hidden=st.sampled_from([576]) if FULL else st.integers(4, 70),
    prefix=st.sampled_from([100, 1000]) if FULL else st.integers(0, 30),
    qk_norm=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    seed=st.integers(0, 10_000),
)
def test_qkv_rope_write_matches_the_two_launches(rows, heads, d, hidden, prefix, qk_norm, dtype, seed) -> None:
    gen = torch.Generator().manual_seed(seed)
    parents = torch.tensor(rows)
    b, t = parents.shape
    h, hkv = heads
    depth = node_depth(parents).to(DEVICE)
    lengths, ck, cv = (v.to(DEVICE) for v in _inputs(gen, parents, heads, d, prefix, dtype))
    x = (torch.randn(b * t, hidden, generator=gen) * 2).to(DEVICE, dtype)
    w = (torch.randn((h + 2 * hkv) * d, hidden, generator=gen) / hidden**0.5).to(DEVICE, dtype)
    ln = (1 + 0.2 * torch.randn(hidden, generator=gen)).to(DEVICE, dtype)
    inv_freq = _inv_freq(d, 1.0).to(DEVICE)
    qn, kn = ((1 + 0.2 * torch.randn(d, generator=gen)).to(DEVICE, dtype) if qk_norm else None for _ in range(2))
    ck2, cv2 = ck.clone(), cv.clone()
    qkv = wt.fused_gemv(x, w, norm_weight=ln, eps=1e-6, row_tiles=True)
    want = wt.tree_rope_kv_write(qkv, ck2, cv2, lengths, depth, inv_freq, h, hkv, qn, kn, eps=1e-6)
    got = qkv_rope_write(x, w, ln, 1e-6, ck, cv, lengths, depth, inv_freq, h, hkv, qn, kn, qk_eps=1e-6)
    assert_close("q", want, got, TOL[dtype])
    assert_close("cache_k", ck2, ck, TOL[dtype])  # the tree's slots written, every other slot untouched
    assert_close("cache_v", cv2, cv, TOL[dtype])


def test_qkv_rope_write_rejects_partial_rope_and_bad_shapes() -> None:
    x = torch.randn(3, 8, device=DEVICE)
    cache = [torch.zeros(1, 1, 8, 32, device=DEVICE) for _ in range(2)]
    lengths, depth = torch.zeros(1, dtype=torch.long, device=DEVICE), torch.zeros(1, 3, dtype=torch.long, device=DEVICE)
    w, ln = torch.randn(3 * 32, 8, device=DEVICE), torch.ones(8, device=DEVICE)
    with pytest.raises(ValueError, match="whole head"):
        qkv_rope_write(x, w, ln, 1e-6, *cache, lengths, depth, _inv_freq(32, 0.25).to(DEVICE), 1, 1)
    with pytest.raises(ValueError, match="weight"):
        qkv_rope_write(x, w[:64], ln, 1e-6, *cache, lengths, depth, _inv_freq(32, 1.0).to(DEVICE), 1, 1)


def test_qkv_rope_config_and_its_override(monkeypatch) -> None:
    from weaver.ops.triton.verify_qkv import qkv_rope_config

    monkeypatch.delenv("WEAVER_VERIFY_QKV_TILES", raising=False)
    assert qkv_rope_config(576) == (16, 128) and qkv_rope_config(40) == (16, 64)
    monkeypatch.setenv("WEAVER_VERIFY_QKV_TILES", "32,64")
    assert qkv_rope_config(576) == (32, 64)
