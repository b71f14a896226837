"""weaver.kernels.triton.gdn_decode (one GDN decode step in one launch) vs the layer's torch path.

A GatedDeltaNet layer with random weights runs one token from a random committed state and conv window,
once with kernels="torch" (the recurrence and norm in torch) and once with the kernel; the outputs, the
advanced state and the conv window must agree. CPU: interpreted at the tiny hybrid shape (HV = 3 H, as the
27B); GPU (`--triton-full`): compiled at the Qwen3.6-27B GDN shape (H 16, HV 48, K = V = 128).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from helpers.triton_env import DEVICE, FULL  # sets TRITON_INTERPRET before triton loads

from weaver.models.cache import GDNCache
from weaver.models.config import ModelConfig
from weaver.models.gdn import GatedDeltaNet
from weaver.models.presets import preset_config
from weaver.models.step import build_step
from weaver.options import RuntimeOptions
from weaver.testing import assert_close

TORCH, TRITON = RuntimeOptions(kernels="torch"), RuntimeOptions(kernels="triton")
PRESET = "qwen3.6-27b-shape" if FULL else "tiny-qwen3_5"
# (out, state) tolerances. fp32: the same math in another order. bf16 compiled: the kernel rounds where torch
# does (beta, o, the norm), so at most an ulp of the output apart; the interpreter truncates bf16 casts instead
# of rounding (~2^-7 on beta, which moves the state by ~4e-3)
TOL = {torch.float32: (2e-5, 2e-5), torch.bfloat16: (8e-3, 1e-4) if FULL else (1.6e-2, 1e-2)}


def make_layer(dtype: torch.dtype, seed: int) -> tuple[GatedDeltaNet, ModelConfig]:
    cfg = ModelConfig.from_hf(preset_config(PRESET))
    torch.manual_seed(seed)
    layer = GatedDeltaNet(cfg, layer_idx=0)
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if name == "A_log":
                p.uniform_(-1.0, 1.0)
            elif name in ("dt_bias", "norm.weight"):
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, p.shape[-1] ** -0.5)
    return layer.to(device=DEVICE, dtype=dtype).eval(), cfg


def make_cache(cfg: ModelConfig, batch: int, dtype: torch.dtype, seed: int) -> GDNCache:
    gen = torch.Generator().manual_seed(seed)
    state = torch.randn(batch, cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim,
                        generator=gen) * 0.3  # fmt: skip
    conv = torch.randn(batch, cfg.gdn_conv_dim, cfg.linear_conv_kernel_dim - 1, generator=gen)
    return GDNCache(state=state.to(DEVICE), conv=conv.to(device=DEVICE, dtype=dtype))


def copy(cache: GDNCache) -> GDNCache:
    return GDNCache(state=cache.state.clone(), conv=cache.conv.clone())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch", [1, 2])
@torch.no_grad()
def test_one_decode_step_equals_the_torch_layer(dtype, batch) -> None:
    layer, cfg = make_layer(dtype, seed=batch)
    cache = make_cache(cfg, batch, dtype, seed=10 + batch)
    gen = torch.Generator().manual_seed(20 + batch)
    x = (torch.randn(batch, 1, cfg.hidden_size, generator=gen)).to(device=DEVICE, dtype=dtype)
    step = build_step(torch.full((batch,), 7, device=DEVICE), 1, 16)
    ref_cache, ker_cache = copy(cache), copy(cache)
    ref = layer(x, ref_cache, dataclasses.replace(step, options=TORCH))
    out = layer(x, ker_cache, dataclasses.replace(step, options=TRITON))
    assert out.shape == ref.shape and out.dtype == ref.dtype
    tol_out, tol_state = TOL[dtype]
    assert_close("out", ref.float(), out.float(), tol_out)
    assert_close("state", ref_cache.state, ker_cache.state, tol_state)
    assert torch.equal(ref_cache.conv, ker_cache.conv)
    assert not torch.equal(ker_cache.state, cache.state)  # the step did advance the state


@torch.no_grad()
def test_several_steps_track_the_torch_layer() -> None:
    """Eight tokens one at a time (fp32): the in-place state stays on the torch path's."""
    layer, cfg = make_layer(torch.float32, seed=3)
    ref_cache = make_cache(cfg, 1, torch.float32, seed=4)
    ker_cache = copy(ref_cache)
    gen = torch.Generator().manual_seed(5)
    for i in range(8):
        x = torch.randn(1, 1, cfg.hidden_size, generator=gen).to(DEVICE)
        step = build_step(torch.full((1,), 3 + i, device=DEVICE), 1, 16)
        ref = layer(x, ref_cache, dataclasses.replace(step, options=TORCH))
        out = layer(x, ker_cache, dataclasses.replace(step, options=TRITON))
        assert_close(f"out {i}", ref, out, 2e-5)
    assert_close("state", ref_cache.state, ker_cache.state, 2e-5)


def test_bad_shapes_are_value_errors() -> None:
    from weaver.kernels.triton.gdn_decode import gdn_decode

    state = torch.zeros(1, 6, 16, 16, device=DEVICE)
    mixed = torch.zeros(1, 1, 2 * 2 * 16 + 6 * 16, device=DEVICE)
    gates, z = torch.zeros(1, 1, 6, device=DEVICE), torch.zeros(1, 1, 96, device=DEVICE)
    ones6, ones16 = torch.ones(6, device=DEVICE), torch.ones(16, device=DEVICE)
    with pytest.raises(ValueError, match="mixed must be"):
        gdn_decode(mixed[..., :-1], gates, gates, z, ones6, ones6, ones16, 1e-6, state, 2)
    with pytest.raises(ValueError, match="state must be"):
        gdn_decode(mixed, gates, gates, z, ones6, ones6, ones16, 1e-6, state.double(), 2)
    with pytest.raises(ValueError, match="shapes disagree"):
        gdn_decode(mixed, gates, gates, z, ones6, ones6, ones16, 1e-6, state, 4)


@torch.no_grad()
def test_decode_steps_of_a_tiny_hybrid_model_match_the_torch_path() -> None:
    """The whole model (fp32): a prefill, then ten one-token steps fed their own argmax; every step's logits
    with the kernel in each GDN layer match the torch path's, and so do the tokens. Both runs prefill through the
    torch path: on a GPU the kernels' prefill is fla's chunk kernel, whose TF32 dots move the logits ~3e-4
    (session 49's H100 run), which is not what this test is about."""
    import weaver
    from weaver.models.cache import allocate_cache

    model = weaver.LLM.from_config("tiny-qwen3_5", random_weights=True, seed=7, device=DEVICE, dtype="fp32").model

    def decode(options: RuntimeOptions) -> tuple[list[int], list[torch.Tensor]]:
        model.options = TORCH
        cache = allocate_cache(model.config, 1, 32, DEVICE, torch.float32)
        logits = model(torch.tensor([[5, 17, 42, 8]], device=DEVICE), cache, last_only=True).logits
        model.options = options
        tokens, steps = [], []
        for _ in range(10):
            tokens.append(int(logits[0, -1].argmax()))
            logits = model(torch.tensor([[tokens[-1]]], device=DEVICE), cache).logits
            steps.append(logits[0, -1])
        return tokens, steps

    try:
        ref_tokens, ref_steps = decode(TORCH)
        tokens, steps = decode(TRITON)
    finally:
        model.options = TORCH
    for i, (a, b) in enumerate(zip(ref_steps, steps, strict=True)):
        assert_close(f"logits of step {i}", a, b, 1e-4)
    assert tokens == ref_tokens
