"""The one-launch qkv + RoPE + K/V write (weaver.kernels.triton.qkv_rope) against the two launches it replaces.

CPU: interpreted at small sizes on random trees (pad nodes included): at the same tiles the results are the
two launches' bit for bit (qkv rows, q after RoPE, the caches afterwards). GPU (`--triton-full`):
compiled, at SmolLM2 / Qwen3 head shapes and up to the weaver verify's 65 nodes, within the dtype's
tolerance (two compiled kernels may contract or schedule the RoPE arithmetic differently), and without
hypothesis' shrinking, which recompiles the kernels for every shape it tries.
"""

from __future__ import annotations

import pytest
import torch
from helpers.attention import HEADS, cache_inputs, rope_inv_freq
from helpers.trees import tree_batches
from helpers.triton_env import DEVICE, FULL, pinned  # sets TRITON_INTERPRET before triton loads
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from weaver.kernels import triton as wt
from weaver.kernels.triton.decode import GemmTiles
from weaver.kernels.triton.qkv_rope import qkv_rope_kv
from weaver.ops.tree import node_depth
from weaver.testing import assert_close

TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


def _case(rows, heads, d, hidden, prefix, qk_norm, dtype, seed, extra_slots=3):
    """A random tree batch, its input rows, weights, caches and RoPE inputs, on DEVICE."""
    gen = torch.Generator().manual_seed(seed)
    parents = torch.tensor(rows)
    b, t = parents.shape
    h, hkv = heads
    lengths, ck, cv = cache_inputs(gen, parents, heads, d, prefix, dtype, extra_slots)
    x = torch.randn(b * t, hidden, generator=gen).to(dtype)
    weight = (torch.randn((h + 2 * hkv) * d, hidden, generator=gen) / hidden**0.5).to(dtype)
    norm_w = (1 + 0.2 * torch.randn(hidden, generator=gen)).to(dtype)
    qn = (1 + 0.2 * torch.randn(d, generator=gen)).to(dtype) if qk_norm else None
    kn = (1 + 0.2 * torch.randn(d, generator=gen)).to(dtype) if qk_norm else None
    dev = [None if v is None else v.to(DEVICE) for v in (x, weight, norm_w, ck, cv, lengths, node_depth(parents))]
    return dev, [None if v is None else v.to(DEVICE) for v in (qn, kn)]


@settings(max_examples=4 if FULL else 6, deadline=None,
          phases=[Phase.explicit, Phase.reuse, Phase.generate] if FULL else list(Phase))  # fmt: skip
@given(
    rows=tree_batches(max_b=2, max_t=65 if FULL else 20),
    heads=st.sampled_from(HEADS),
    d=st.sampled_from([64, 128]) if FULL else st.sampled_from([16, 32]),
    hidden=st.sampled_from([576, 1024]) if FULL else st.integers(1, 70),
    rot_frac=st.sampled_from([1.0, 0.25]),
    prefix=st.sampled_from([40, 1000]) if FULL else st.integers(0, 40),
    qk_norm=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    tiles=st.sampled_from([(16, 16, 1, 1), (16, 64, 4, 3), (32, 32, 2, 2)]),
    seed=st.integers(0, 10_000),
)
@pinned(  # 17 rows in 16-row tiles (the last partial), hidden 65 in 64-column steps (a one-column tail), a single
    # kv head (4:1), partial RoPE, qk-norm, bf16, a pad node; then one node, hidden 1, GQA 3:1, fp32
    dict(rows=[[-1, 0, 1, 2, 3, 4, 5, -1, 7, 8, 9, 10, 11, 12, 13, 14, 15]], heads=(4, 1), d=32, hidden=65,
         rot_frac=0.25, prefix=40, qk_norm=True, dtype=torch.bfloat16, tiles=(16, 64, 4, 3), seed=1),
    dict(rows=[[-1]], heads=(9, 3), d=16, hidden=1, rot_frac=1.0, prefix=0, qk_norm=False, dtype=torch.float32,
         tiles=(16, 16, 1, 1), seed=2),
)
def test_qkv_rope_kv_matches_gemm_then_rope_kv_write(rows, heads, d, hidden, rot_frac, prefix, qk_norm, dtype, tiles,
                                                    seed):  # fmt: skip
    (x, weight, norm_w, ck, cv, lengths, depth), (qn, kn) = _case(rows, heads, d, hidden, prefix, qk_norm, dtype, seed)
    h, hkv = heads
    inv_freq = rope_inv_freq(d, rot_frac).to(DEVICE)
    block_m, block_k, warps, stages = tiles
    gemm_tiles = GemmTiles(block_m, d, block_k, warps, stages)
    two = [ck.clone(), cv.clone()]
    qkv_want = wt.fused_gemv(x, weight, norm_weight=norm_w, eps=1e-6, tiles=gemm_tiles)
    q_want = wt.tree_rope_kv_write(qkv_want, *two, lengths, depth, inv_freq, h, hkv, qn, kn, eps=1e-6)
    qkv_got, q_got = qkv_rope_kv(x, weight, norm_w, 1e-6, ck, cv, lengths, depth, inv_freq, h, hkv, qn, kn,
                                 tiles=gemm_tiles)  # fmt: skip
    results = (("qkv", qkv_want, qkv_got), ("q", q_want, q_got), ("cache k", two[0], ck), ("cache v", two[1], cv))
    for name, want, got in results:  # caches: the tree's slots written, every other slot untouched
        if FULL:
            assert_close(name, want, got, TOL[dtype])
        else:
            assert torch.equal(got, want), name


def test_qkv_rope_kv_drops_slots_past_capacity_and_checks_inputs():
    (x, weight, norm_w, ck, cv, lengths, depth), _ = _case([[-1, 0, 1, 1, 0]], (2, 1), 16, 24, 3, False,
                                                          torch.float32, 0, extra_slots=0)  # fmt: skip
    lengths.fill_(3)  # slots 3..7 of a cache of 3 + 5 slots: all there
    small = [c[:, :, :6].clone() for c in (ck, cv)]  # slots 6, 7 do not exist
    inv_freq = rope_inv_freq(16, 1.0).to(DEVICE)
    qkv_rope_kv(x, weight, norm_w, 1e-6, ck, cv, lengths, depth, inv_freq, 2, 1)
    qkv_rope_kv(x, weight, norm_w, 1e-6, *small, lengths, depth, inv_freq, 2, 1)
    assert torch.equal(small[0], ck[:, :, :6]) and torch.equal(small[1], cv[:, :, :6])
    with pytest.raises(ValueError, match="weight"):
        qkv_rope_kv(x, weight[:-1], norm_w, 1e-6, ck, cv, lengths, depth, inv_freq, 2, 1)
    with pytest.raises(ValueError, match="head dim"):
        odd = [torch.zeros(1, 1, 8, 12, device=DEVICE) for _ in range(2)]
        qkv_rope_kv(x, torch.zeros(48, 24, device=DEVICE), norm_w, 1e-6, *odd, lengths, depth, inv_freq[:6], 2, 1)
    with pytest.raises(ValueError, match="come together"):
        qkv_rope_kv(x, weight, norm_w, 1e-6, ck, cv, lengths, depth, inv_freq, 2, 1, q_norm=norm_w[:16])
