"""The prefix-split tree attention against the torch reference: chunk borders, long prefixes, the output gate."""

from __future__ import annotations

import pytest
import torch
from helpers.attention import HEADS, cache_inputs
from helpers.trees import tree_batches
from helpers.triton_env import DEVICE, FULL, pinned  # sets TRITON_INTERPRET before triton loads
from hypothesis import given, settings
from hypothesis import strategies as st

from weaver.kernels.triton.split_attention import split_tree_attention
from weaver.ops.decode import tree_attention_ref
from weaver.ops.tree import ancestor_mask
from weaver.testing import assert_close

TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2}


def _inputs(parents, heads, d, prefix, dtype, seed, gated):
    gen = torch.Generator().manual_seed(seed)
    b, t = parents.shape
    h, _ = heads
    lengths, ck, cv = cache_inputs(gen, parents, heads, d, prefix, dtype)
    q = torch.randn(b * t, h * d, generator=gen).to(dtype)
    # Qwen3.5's projection: per head [query | gate], so the gate is a strided view
    gate = torch.randn(b * t, h, 2 * d, generator=gen).to(dtype)[:, :, d:] if gated else None
    return lengths, ck, cv, q, gate


def _reference(q, ck, cv, lengths, anc, heads, gate):
    h, hkv = heads
    out = tree_attention_ref(q, ck, cv, lengths, anc, h, hkv)
    if gate is not None:
        out = out * torch.sigmoid(gate.reshape(out.shape))
    return out


def _device(*xs):
    return [None if x is None else x.to(DEVICE) for x in xs]


@settings(max_examples=4 if FULL else 8, deadline=None)
@given(
    rows=tree_batches(max_b=2, max_t=65 if FULL else 20),
    heads=st.sampled_from(HEADS + [(24, 4)]),
    d=st.sampled_from([128, 256]) if FULL else st.sampled_from([8, 16]),
    prefix=st.sampled_from([300, 5000]) if FULL else st.integers(0, 100),
    splits=st.sampled_from([None, 0, 1, 3]),
    gated=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    seed=st.integers(0, 10_000),
)
@pinned(
    {"rows": [[-1]], "heads": (24, 4), "d": 16, "prefix": 100, "splits": None, "gated": True,
     "dtype": torch.float32, "seed": 1},  # a decode step over many chunks
    {"rows": [[-1, 0, 0, 1, 1, 2]], "heads": (9, 3), "d": 8, "prefix": 0, "splits": 3, "gated": False,
     "dtype": torch.float32, "seed": 2},  # no prefix: only the tree item
)
def test_split_tree_attention_matches_reference(rows, heads, d, prefix, splits, gated, dtype, seed):
    parents = torch.tensor(rows)
    lengths, ck, cv, q, gate = _inputs(parents, heads, d, prefix, dtype, seed, gated)
    anc = ancestor_mask(parents)
    h, hkv = heads
    got = split_tree_attention(*_device(q, ck, cv, lengths, anc), h, hkv, gate=_device(gate)[0], splits=splits)
    want = _reference(q, ck, cv, lengths, anc, heads, gate)
    assert_close("split_tree_attention", want, got, TOL[dtype])


@settings(max_examples=4 if FULL else 6, deadline=None)
@given(
    t=st.integers(1, 16),
    causal=st.booleans(),
    extra=st.sampled_from([0, 3, 40, 3000]),  # window - t
    prefix=st.sampled_from([300, 5000]) if FULL else st.integers(0, 100),
    splits=st.sampled_from([None, 0, 3]),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    seed=st.integers(0, 10_000),
)
def test_split_tree_attention_window_matches_a_masked_reference(t, causal, extra, prefix, splits, dtype, seed):
    """The drafter's sliding layers: node i at position L + i sees prefix slots s > L + i - window and the block's
    slots its mask allows; the reference is SDPA under that mask, written here."""
    heads, d = ((8, 2), 128) if FULL else ((4, 2), 16)
    parents = torch.zeros(1, t, dtype=torch.long)  # only the shape matters: the block's mask is given below
    lengths, ck, cv, q, _ = _inputs(parents, heads, d, prefix, dtype, seed, False)
    window = t + extra
    anc = torch.ones(1, t, t, dtype=torch.bool)
    if causal:
        anc = anc.tril()
    s = ck.shape[2]
    slot, node = torch.arange(s)[None, :], torch.arange(t)[:, None]
    length = int(lengths[0])
    visible = (slot < length) & (slot > length + node - window)
    visible[:, length : length + t] = anc[0]
    h, hkv = heads
    want = torch.nn.functional.scaled_dot_product_attention(
        q.view(1, t, h, d).transpose(1, 2).float(), ck.float(), cv.float(), attn_mask=visible[None, None],
        enable_gqa=True).transpose(1, 2).reshape(t, h * d)  # fmt: skip
    got = split_tree_attention(*_device(q, ck, cv, lengths, anc), h, hkv, splits=splits, window=window)
    assert_close("split_tree_attention window", want, got, TOL[dtype])


def test_split_tree_attention_uses_every_chunk_of_a_long_prefix():
    """A prefix over all three chunks against one whose last chunk is changed: o moves."""
    parents = torch.tensor([[-1, 0]])
    heads, d = (4, 2), 8
    lengths, ck, cv, q, _ = _inputs(parents, heads, d, 200, torch.float32, 3, False)
    lengths[:] = 200
    anc = ancestor_mask(parents)
    got = split_tree_attention(*_device(q, ck, cv, lengths, anc), *heads, splits=3, min_chunk=64)
    assert_close("split_tree_attention", _reference(q, ck, cv, lengths, anc, heads, None), got, TOL[torch.float32])
    cv2 = cv.clone()
    cv2[:, :, 195] += 10.0  # a slot of the last chunk
    moved = split_tree_attention(*_device(q, ck, cv2, lengths, anc), *heads, splits=3, min_chunk=64)
    assert (moved.cpu() - got.cpu()).abs().max() > 1e-3


def test_split_tree_attention_checks_its_inputs():
    parents = torch.tensor([[-1, 0]])
    lengths, ck, cv, q, _ = _inputs(parents, (4, 2), 8, 10, torch.float32, 0, False)
    anc = ancestor_mask(parents)
    with pytest.raises(ValueError, match="q must be"):
        split_tree_attention(*_device(q[:1], ck, cv, lengths, anc), 4, 2)
    with pytest.raises(ValueError, match="window must be"):
        split_tree_attention(*_device(q, ck, cv, lengths, anc), 4, 2, window=1)
    with pytest.raises(ValueError, match="gate must be"):
        split_tree_attention(*_device(q, ck, cv, lengths, anc), 4, 2, gate=q.view(2, 4, 8)[:1].to(DEVICE))


@torch.no_grad()
def test_hybrid_model_attention_through_the_kernel_equals_sdpa(monkeypatch):
    """tiny-qwen3_5 (gated attention, partial RoPE) in fp32 with kernels="triton": a prefill, a decode step and a
    tree verify give the same logits with the attention layers on the split kernel as on SDPA (the same GDN paths
    both times: only `attend_tree` is switched off for the reference)."""
    from weaver.models import attention
    from weaver.models.config import ModelConfig
    from weaver.models.loading import build_model, init_random_weights
    from weaver.models.presets import preset_config
    from weaver.ops.tree import node_depth
    from weaver.options import RuntimeOptions

    cfg = ModelConfig.from_hf(preset_config("tiny-qwen3_5", num_hidden_layers=4))
    model = init_random_weights(build_model(cfg, DEVICE), seed=5).eval()
    model.options = RuntimeOptions(kernels="triton")
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, cfg.vocab_size, (1, 40), generator=gen).to(DEVICE)
    step = torch.randint(0, cfg.vocab_size, (1, 1), generator=gen).to(DEVICE)
    parents = torch.tensor([[-1, 0, 0, 1, 2]], device=DEVICE)
    tree = torch.randint(0, cfg.vocab_size, (1, 5), generator=gen).to(DEVICE)
    logits = {}
    kernel = attention.attend_tree
    for side in ("sdpa", "kernel"):
        monkeypatch.setattr(attention, "attend_tree", kernel if side == "kernel" else lambda *args: None)
        cache = model.allocate_cache(1, 64)
        outs = [model(prompt, cache).logits, model(step, cache).logits]
        outs.append(model(tree, cache, parents=parents, depth=node_depth(parents)).logits)
        logits[side] = outs
    for name, want, got in zip(("prefill", "decode", "verify"), logits["sdpa"], logits["kernel"], strict=True):
        assert_close(name, want, got, 1e-4)
