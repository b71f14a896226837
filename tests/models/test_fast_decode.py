"""The fused Triton decode step (models.fast_decode) against Decoder.forward: under Triton's interpreter on CPU,
compiled on a GPU (fp32 models either way); on a GPU also PDL launches against plain ones, bit for bit."""

from __future__ import annotations

import os

import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu":  # before triton loads: the kernels run in its interpreter on CPU
    os.environ.setdefault("TRITON_INTERPRET", "1")

import weaver  # noqa: E402
from weaver.models.fast_decode import FastDecoder, unsupported_reason  # noqa: E402

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [3], [40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52]]


@pytest.mark.parametrize("preset", ["tiny-llama", "tiny-qwen3"])
def test_fast_decode_logits_match_forward(preset):
    llm = weaver.LLM.from_config(preset, seed=1, device=DEVICE, dtype="fp32")
    model = llm.model
    fast = FastDecoder(model)
    a, b = model.allocate_cache(2, 64), model.allocate_cache(2, 64)
    prompt = torch.tensor([[5, 6, 7, 8, 9], [9, 8, 7, 6, 5]], device=DEVICE)
    model(prompt, a)
    model(prompt, b)
    token = torch.tensor([[11], [12]], device=DEVICE)
    for _ in range(6):
        want = model(token, a).logits[:, -1]
        got = fast(token, b)
        scale = want.abs().max()
        assert (got - want).abs().max() <= 1e-5 * scale
        assert torch.equal(a.lengths, b.lengths)
        token = want.argmax(-1, keepdim=True)
    for la, lb in zip(a.layers, b.layers):  # the K/V written by the kernel equal the model's
        assert (la.k[:, :, :12] - lb.k[:, :, :12]).abs().max() <= 1e-5 * la.k.abs().max()
        assert torch.allclose(la.v[:, :, :12], lb.v[:, :, :12], atol=1e-6)


@pytest.mark.parametrize("preset", ["tiny-llama", "tiny-qwen3"])
def test_fast_decode_greedy_equals_reference_engine(preset):
    torch_step = weaver.RuntimeOptions(kernels="torch", compile=False)  # the plain torch step (graphed on a GPU)
    ref = weaver.LLM.from_config(preset, seed=3, device=DEVICE, dtype="fp32", options=torch_step)
    new = 16 if DEVICE == "cuda" else 4  # interpreted on CPU: ~4.5 s a token for the three prompts, both engines
    want = [ref.generate(p, max_new_tokens=new, ignore_eos=True).token_ids for p in PROMPTS]
    llm = weaver.LLM.from_config(preset, seed=3, device=DEVICE, dtype="fp32")
    llm.engine.fast_decode = FastDecoder(llm.model)
    got = [llm.generate(p, max_new_tokens=new, ignore_eos=True).token_ids for p in PROMPTS]
    assert got == want


@pytest.mark.skipif(DEVICE == "cpu", reason="programmatic dependent launch exists only compiled, on Hopper")
@torch.no_grad()
def test_fast_decode_with_pdl_equals_without():
    """PDL only lets each launch start while the previous kernel ends (weight prefetch before its wait): a read
    before the wait of anything its predecessor writes would show as a difference here."""
    from weaver.kernels import launch_config
    from weaver.kernels.triton._utils import pdl_launch

    if not pdl_launch(torch.device(DEVICE), 2)["PDL"]:
        pytest.skip("this GPU has no programmatic dependent launch (before Hopper)")
    model = weaver.LLM.from_config("tiny-llama", seed=2, device=DEVICE, dtype="bf16").model
    fast = FastDecoder(model)
    runs = []
    for pdl in (True, False):
        launch_config.configure(weaver.RuntimeOptions(pdl=pdl))
        cache = model.allocate_cache(2, 64)
        model(torch.tensor([[5, 6, 7, 8, 9], [9, 8, 7, 6, 5]], device=DEVICE), cache)
        token, logits = torch.tensor([[11], [12]], device=DEVICE), []
        for _ in range(8):
            logits.append(fast(token, cache))
            token = logits[-1].argmax(-1, keepdim=True)
        runs.append((torch.stack(logits), [(layer.k.clone(), layer.v.clone()) for layer in cache.layers]))
    launch_config.configure(weaver.RuntimeOptions())
    (want, want_kv), (got, got_kv) = runs[1], runs[0]
    assert torch.equal(got, want)
    assert all(torch.equal(a, c) and torch.equal(b, d) for (a, b), (c, d) in zip(want_kv, got_kv, strict=True))


def test_fast_decode_refuses_unsupported_models():
    llm = weaver.LLM.from_config("tiny-qwen3_5", seed=0, device="cpu", dtype="fp32")
    assert unsupported_reason(llm.model) == "GDN layers"
    with pytest.raises(ValueError, match="GDN layers"):
        FastDecoder(llm.model)


def test_fused_paths_give_way_to_cublas_where_layers_are_large():
    """Bandwidth-bound layers (Qwen3-8B: 436 MB a layer in bf16) run the torch path; SmolLM2's 7 MB ones fuse."""
    from weaver.models.config import ModelConfig
    from weaver.models.decoder import Decoder
    from weaver.models.fused_layer import too_large_for_fused
    from weaver.models.presets import preset_config

    def meta_model(name: str) -> Decoder:
        with torch.device("meta"):
            return Decoder(ModelConfig.from_hf(preset_config(name))).to(torch.bfloat16)

    big = meta_model("qwen3-8b-shape")
    assert "MiB (bandwidth-bound" in unsupported_reason(big)
    assert too_large_for_fused(meta_model("smollm2-shape").model.layers[0]) is None
