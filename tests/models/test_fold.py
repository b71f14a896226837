"""models.fold: a decoder layer's RMSNorm weights moved into its projections keep the model, on the torch path and
through the one-row GEMV (its 1 / rms(x) and residual epilogue), interpreted here and compiled with --triton-full."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers.triton_env import DEVICE  # sets TRITON_INTERPRET before triton loads

from weaver.kernels import gemv
from weaver.models.config import ModelConfig
from weaver.models.fold import fold_norms
from weaver.models.fuse import fuse_projections
from weaver.models.loading import build_model, init_random_weights
from weaver.models.presets import preset_config
from weaver.options import RuntimeOptions
from weaver.testing import assert_close

TRITON, TORCH = RuntimeOptions(kernels="triton"), RuntimeOptions(kernels="torch")
PROMPT = [5, 17, 3, 44, 9, 61, 2, 30]


@pytest.fixture
def gemv_for_tiny(monkeypatch):
    """Let the tiny models' projections (K = 64 or 96, a few KB) count as large enough for the one-row GEMV."""
    monkeypatch.setattr(gemv, "GEMV_MIN_K", 16)
    monkeypatch.setattr(gemv, "GEMV_MIN_BYTES", 0)


def _models(family: str):
    """(unfolded, folded) copies of one bf16 model whose norms have random, non-unit weights."""
    cfg = ModelConfig.from_hf(preset_config(family, num_hidden_layers=2))
    model = init_random_weights(build_model(cfg, DEVICE, torch.bfloat16), seed=5)
    gen = torch.Generator().manual_seed(6)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layernorm.weight"):
                base = 0.0 if cfg.norm_offset else 1.0
                p.copy_((base + 0.5 * torch.randn(p.shape, generator=gen)).to(p))
    model = fuse_projections(model)
    return model, fold_norms(copy.deepcopy(model))


@pytest.mark.parametrize("family", ["tiny-llama", "tiny-qwen3_5"])
@torch.no_grad()
def test_folded_model_keeps_its_logits(family, gemv_for_tiny):
    plain, folded = _models(family)
    layers = folded.model.layers
    assert all(l.input_layernorm.folded and l.post_attention_layernorm.folded for l in layers)
    unit = 0.0 if folded.config.norm_offset else 1.0
    assert all(bool((l.input_layernorm.weight == unit).all()) for l in layers)
    assert not folded.model.norm.folded  # the final norm: the drafter reads the LM head behind it
    tokens = torch.tensor([PROMPT], device=DEVICE)
    want = plain(tokens, plain.allocate_cache(1, 16)).logits.float()
    got = folded(tokens, folded.allocate_cache(1, 16)).logits.float()
    assert_close(f"{family} folded prefill", want, got, 3e-2)


@pytest.mark.parametrize("family", ["tiny-llama", "tiny-qwen3_5"])
@torch.no_grad()
def test_folded_decode_step_through_the_gemv(family, gemv_for_tiny, monkeypatch):
    """A decode step whose projections take the GEMV (interpreted on CPU), with the folded norms' 1 / rms(x) and
    the residual adds in it, against the same folded model in torch; the kernel must run."""
    _, folded = _models(family)
    tokens = torch.tensor([PROMPT], device=DEVICE)
    logits, calls, real = {}, [], gemv.launch
    monkeypatch.setattr(gemv, "launch", lambda *a: calls.append(a[5:]) or real(*a))
    for options in (TORCH, TRITON):
        folded.options = options
        cache = folded.allocate_cache(1, 16)
        folded(tokens[:, :-1], cache)
        calls.clear()
        logits[options.kernels] = folded(tokens[:, -1:], cache).logits.float()
        if options is TRITON:  # (swiglu, rms, eps, residual) of each launch
            assert sum(rms for _, rms, _, _ in calls) == 2 * len(folded.model.layers)
            assert sum(res is not None for *_, res in calls) == 2 * len(folded.model.layers)
        else:
            assert not calls
    assert_close(f"{family} folded decode", logits["torch"], logits["triton"], 3e-2)
