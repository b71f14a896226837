"""Our decoder vs transformers on random tiny configs: prefill + 5 cached decode steps, fp32."""

from __future__ import annotations

import pytest
import torch
from helpers.hf_reference import build_hf_and_ours, hf_logits

from weaver.models.presets import preset_config

FAMILIES = [
    pytest.param(preset_config("tiny-llama"), id="llama"),
    pytest.param(preset_config("tiny-llama", tie_word_embeddings=True, num_key_value_heads=4), id="llama-tied-mha"),
    pytest.param(
        preset_config(
            "tiny-llama",
            rope_parameters={
                "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 64,
            },
        ),
        id="llama3-rope",
    ),
    pytest.param(preset_config("tiny-qwen3"), id="qwen3"),
    pytest.param(preset_config("tiny-qwen3_5"), id="qwen3_5-HV3H"),
    pytest.param(preset_config("tiny-qwen3_5", linear_num_value_heads=2), id="qwen3_5-HV=H"),
]


@pytest.mark.parametrize("hf_config", FAMILIES)
def test_prefill_and_decode_match_transformers(hf_config):
    hf, ours = build_hf_and_ours(hf_config, seed=3)
    gen = torch.Generator().manual_seed(0)
    vocab = hf_config["vocab_size"]
    prompt = torch.randint(0, vocab, (11,), generator=gen).tolist()
    extra = torch.randint(0, vocab, (5,), generator=gen).tolist()
    ref = hf_logits(hf, prompt + extra)

    cache = ours.allocate_cache(batch_size=1, capacity=32)
    with torch.no_grad():
        out = ours(torch.tensor([prompt]), cache)
        got = [out.logits[0]]
        for tok in extra[:-1]:
            got.append(ours(torch.tensor([[tok]]), cache).logits[0])
    got = torch.cat(got)
    diff = (got - ref[: len(prompt) + len(extra) - 1]).abs().max().item()
    print(f"{hf_config['model_type']}: max abs logit diff {diff:.2e}")
    assert diff <= 1e-4, f"max abs logit diff {diff:.3e} > 1e-4"
    assert int(cache.lengths[0]) == len(prompt) + len(extra) - 1
