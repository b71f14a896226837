"""The fused Triton draft (speculative.fast_drafter) against DFlashDrafter.draft: interpreted on CPU, compiled on a GPU.

Both run on equal copies of one context cache (rows of different lengths, poisoned stale slots past them):
logits, hidden and every K/V slot afterwards (the block's scratch slots included) must agree.
"""

from __future__ import annotations

import copy
import os

import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # fp32 either way
if DEVICE == "cpu":  # before triton loads: the kernels run in its interpreter on CPU
    os.environ.setdefault("TRITON_INTERPRET", "1")

from helpers.drafters import make_drafter, random_features, target_io  # noqa: E402

from weaver.models.fused_layer import ROPE_ATTENTION_MAX_NODES  # noqa: E402
from weaver.options import RuntimeOptions  # noqa: E402
from weaver.speculative.drafter import DFlashDrafter  # noqa: E402
from weaver.speculative.fast_drafter import FastDrafter, fast_drafter, unsupported_reason  # noqa: E402
from weaver.testing import assert_close  # noqa: E402

CASES = [
    pytest.param({}, id="bidirectional"),
    pytest.param({"is_causal": True}, id="causal"),
    pytest.param({"mask_token_id": 7}, id="mask-token"),
    pytest.param({"num_key_value_heads": 4}, id="mha"),
    pytest.param({"block_size": 16}, id="block16"),
    pytest.param({"block_size": ROPE_ATTENTION_MAX_NODES + 1}, id="block33"),  # RoPE + K/V write apart
]


def _contexts(drafter, lengths: list[int], seed: int = 4):
    """Two equal contexts holding each row's first lengths[b] features, stale slots filled with noise."""
    features = random_features(drafter, len(lengths), max(lengths)).to(DEVICE)
    ctx = drafter.new_context(len(lengths), 24)
    drafter.append_context(ctx, features, torch.tensor(lengths, device=DEVICE))
    gen = torch.Generator().manual_seed(seed)
    slot = torch.arange(ctx.num_slots, device=DEVICE)[None, None, None, :, None]
    stale = slot >= ctx.lengths[:, None, None, None, None]
    for buf in ctx.stacked:
        buf.copy_(torch.where(stale, 1e3 * torch.randn(buf.shape, generator=gen).to(DEVICE), buf))
    twin = copy.deepcopy(ctx)
    return ctx, twin


@pytest.mark.parametrize("overrides", CASES)
@torch.no_grad()
def test_fast_draft_matches_the_torch_draft(overrides):
    drafter = make_drafter(**overrides).to(DEVICE).fuse_projections()
    embed, head = (m.to(DEVICE) for m in target_io())
    lengths, roots = [11, 1, 6], torch.tensor([3, 0, 59], device=DEVICE)
    ref_ctx, fast_ctx = _contexts(drafter, lengths)
    want = drafter.draft(ref_ctx, roots, embed, head)
    got = FastDrafter(drafter, head)(fast_ctx, roots, embed, head)
    assert got.logits.shape == want.logits.shape and got.logits.dtype == torch.float32
    assert_close("logits", want.logits, got.logits, 1e-5)
    assert_close("hidden", want.hidden, got.hidden, 1e-5)
    assert torch.equal(ref_ctx.lengths, fast_ctx.lengths)
    for name, a, b in zip(("K", "V"), ref_ctx.stacked, fast_ctx.stacked):  # the block's slots too
        assert_close(f"drafter {name} cache", a, b, 1e-5)


@torch.no_grad()
def test_fast_draft_batch_one_and_repeated_calls():
    """Batch 1 (the MASK rows are a view, no copy) and a second call on the same context give the same block."""
    drafter = make_drafter(block_size=6).to(DEVICE).fuse_projections()
    embed, head = (m.to(DEVICE) for m in target_io())
    ref_ctx, fast_ctx = _contexts(drafter, [9])
    fast = FastDrafter(drafter, head)
    root = torch.tensor([5], device=DEVICE)
    want = drafter.draft(ref_ctx, root, embed, head)
    first = fast(fast_ctx, root, embed, head)
    second = fast(fast_ctx, root, embed, head)
    assert_close("logits", want.logits, first.logits, 1e-5)
    assert torch.equal(first.logits, second.logits)


def test_unsupported_drafters_are_refused():
    embed, head = target_io()
    sliding = make_drafter(layer_types=["sliding_attention", "full_attention"], sliding_window=4).fuse_projections()
    assert unsupported_reason(sliding, head) == "sliding-window layers"
    with pytest.raises(ValueError, match="sliding-window layers"):
        FastDrafter(sliding, head)
    assert "not fused" in unsupported_reason(make_drafter(), head)
    assert "bias" in unsupported_reason(make_drafter(attention_bias=True).fuse_projections(), head)
    assert "dtype" in unsupported_reason(make_drafter().fuse_projections(), head.double())
    if DEVICE == "cpu":  # the engine's switch: CUDA only
        assert fast_drafter(make_drafter().fuse_projections(), head) is None


def test_fast_drafter_follows_the_kernels_option():
    """kernels="torch" keeps the torch draft everywhere, "triton" takes the fused one on any device (here: the
    interpreter on CPU) where the drafter allows it; "auto" (the default) only on CUDA."""
    _, head = target_io()
    head = head.to(DEVICE)
    drafter = make_drafter().to(DEVICE).fuse_projections()
    assert fast_drafter(drafter, head, RuntimeOptions(kernels="torch")) is None
    assert isinstance(fast_drafter(drafter, head, RuntimeOptions(kernels="triton")), FastDrafter)
    assert fast_drafter(make_drafter().to(DEVICE), head, RuntimeOptions(kernels="triton")) is None  # not fused
    assert (fast_drafter(drafter, head) is not None) == (DEVICE == "cuda")


@torch.no_grad()
def test_engine_with_the_fast_draft_stays_lossless(monkeypatch):
    """The engine's draft stage through FastDrafter (forced here; CUDA-only by default): greedy chain and
    ddtree give exactly the ar tokens, and the draft stage is no longer torch.compile'd."""
    import weaver
    from weaver.speculative import fast_drafter as fast_drafter_module
    from weaver.speculative.engine import Engine
    from weaver.speculative.round import RoundConfig
    from weaver.speculative.sampling import SamplingParams

    forced = lambda drafter, lm_head, options: FastDrafter(drafter, lm_head)  # noqa: E731
    monkeypatch.setattr(fast_drafter_module, "fast_drafter", forced)
    monkeypatch.setattr(Engine, "compile", property(lambda self: True))
    llm = weaver.LLM.from_config("tiny-llama", random_weights=True, seed=7, drafter="random", adapter="random",
                                 device=DEVICE, dtype="fp32", options=weaver.RuntimeOptions(cuda_graphs="off"))
    prompt = [5, 17, 42, 8]
    ref = llm.generate(prompt, max_new_tokens=24, ignore_eos=True).token_ids
    for method in ("chain", "ddtree"):
        out = llm.generate(prompt, method=method, budget=16, max_new_tokens=24, ignore_eos=True)
        assert out.token_ids == ref, method
    cfg = RoundConfig(method="chain", budget=16, rule="greedy", params=SamplingParams())
    assert isinstance(llm.engine._fast_draft, FastDrafter) and "draft" not in llm.engine.compiled_stage_names(cfg)


def test_a_drafter_with_large_layers_drafts_through_torch():
    """A 27B-width drafter (640 MB a layer in bf16) is bandwidth-bound: its draft keeps cuBLAS's GEMVs."""
    import dataclasses

    from weaver.bench.scale import published_drafter_config
    from weaver.models.config import ModelConfig
    from weaver.models.presets import preset_config

    cfg = published_drafter_config(ModelConfig.from_hf(preset_config("qwen3.6-27b-shape")))
    cfg = dataclasses.replace(cfg, layer_types=["full_attention"] * cfg.num_hidden_layers, sliding_window=None)
    with torch.device("meta"):
        drafter = DFlashDrafter(cfg).to(torch.bfloat16)
        head = torch.nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False).to(torch.bfloat16)
    assert "MiB (bandwidth-bound" in unsupported_reason(drafter, head)


@torch.no_grad()
def test_fast_draft_with_a_draft_vocabulary():
    """A restricted head (draft_vocab): the fused draft scores the same rows as the torch draft, -inf elsewhere."""
    drafter = make_drafter(block_size=6).to(DEVICE).fuse_projections()
    embed, head = (m.to(DEVICE) for m in target_io())
    ids = torch.arange(3, 61, 2)  # 29 of the 61 tokens (set directly: MIN_SIZE is waived in a kernel test)
    drafter.vocab_ids, drafter.vocab_head = ids.to(DEVICE), head.weight[ids.to(DEVICE)].contiguous()
    ref_ctx, fast_ctx = _contexts(drafter, [9, 4])
    roots = torch.tensor([5, 2], device=DEVICE)
    want = drafter.draft(ref_ctx, roots, embed, head)
    got = FastDrafter(drafter, head)(fast_ctx, roots, embed, head)
    outside = torch.ones(61, dtype=torch.bool)
    outside[ids] = False
    assert torch.isneginf(got.logits[..., outside.to(DEVICE)]).all()
    assert_close("logits on the draft vocabulary", want.logits[..., ids], got.logits[..., ids], 1e-5)
