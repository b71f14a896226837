"""The fused Triton decode step (models.fast_decode) against Decoder.forward, run under Triton's interpreter."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():  # before triton loads: the kernels run in its interpreter on CPU
    os.environ.setdefault("TRITON_INTERPRET", "1")

import weaver  # noqa: E402
from weaver.models.fast_decode import FastDecoder, unsupported_reason  # noqa: E402

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [3], [40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52]]


@pytest.mark.parametrize("preset", ["tiny-llama", "tiny-qwen3"])
def test_fast_decode_logits_match_forward(preset):
    llm = weaver.LLM.from_config(preset, seed=1, device="cpu", dtype="fp32")
    model = llm.model
    fast = FastDecoder(model)
    a, b = model.allocate_cache(2, 64), model.allocate_cache(2, 64)
    prompt = torch.tensor([[5, 6, 7, 8, 9], [9, 8, 7, 6, 5]])
    model(prompt, a)
    model(prompt, b)
    token = torch.tensor([[11], [12]])
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
    llm = weaver.LLM.from_config(preset, seed=3, device="cpu", dtype="fp32")
    assert llm.engine.fast_decode is None  # CPU default: the torch step
    want = [llm.generate(p, max_new_tokens=16, ignore_eos=True).token_ids for p in PROMPTS]
    llm.engine.fast_decode = FastDecoder(llm.model)
    got = [llm.generate(p, max_new_tokens=16, ignore_eos=True).token_ids for p in PROMPTS]
    assert got == want


def test_fast_decode_refuses_unsupported_models():
    llm = weaver.LLM.from_config("tiny-qwen3_5", seed=0, device="cpu", dtype="fp32")
    assert unsupported_reason(llm.model) == "GDN layers"
    with pytest.raises(ValueError, match="GDN layers"):
        FastDecoder(llm.model)
