"""Batched regeneration decoding: greedy rows equal batch-1 greedy decoding of the engine (prompts of different
lengths in one batch, prefill split into row chunks), and the T=1 rule samples softmax(logits) exactly."""

from __future__ import annotations

import pytest
import torch

import weaver
from weaver.train.batched_decode import _next_tokens, decode_batch


@pytest.mark.parametrize("preset", ["tiny-llama", "tiny-qwen3_5"])
def test_greedy_rows_equal_the_engine_one_prompt_at_a_time(preset: str) -> None:
    llm = weaver.LLM.from_config(preset, seed=3, device="cpu", dtype="fp32")
    gen = torch.Generator().manual_seed(0)
    vocab = llm.config.vocab_size
    prompts = [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in (5, 1, 9, 3, 7)]
    eos = llm.eos_token_ids
    got = decode_batch(llm.model, prompts, max_new_tokens=12, eos=eos, prefill_rows=2)
    for p, reply in zip(prompts, got, strict=True):
        want = llm.generate(p, max_new_tokens=12, chat=False).token_ids
        assert reply == want
    assert decode_batch(llm.model, [], 4, eos) == []
    with pytest.raises(ValueError):
        decode_batch(llm.model, [[1, 2]], 0, eos)


def test_sampled_rows_follow_softmax_and_greedy_rows_take_the_argmax() -> None:
    torch.manual_seed(0)
    logits = torch.tensor([[1.0, 0.0, -1.0, 2.0]]).repeat(40_000, 1)
    draws = _next_tokens(logits, torch.ones(40_000, dtype=torch.bool))
    freq = torch.bincount(draws, minlength=4).float() / draws.numel()
    assert torch.allclose(freq, torch.softmax(logits[0], -1), atol=0.01)
    assert (_next_tokens(logits[:3], torch.zeros(3, dtype=torch.bool)) == 3).all()
