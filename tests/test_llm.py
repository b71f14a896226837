"""Engine + public API on random tiny models: greedy equals a cache-free reference, sampling is seeded."""

from __future__ import annotations

import pytest
import torch

import weaver
from weaver.models.presets import preset_config
from weaver.speculative.sampling import SamplingParams, process_logits


@pytest.fixture(scope="module", params=["tiny-llama", "tiny-qwen3_5"])
def llm(request):
    return weaver.LLM.from_config(request.param, random_weights=True, seed=5)


@torch.no_grad()
def _greedy_without_cache(llm, prompt: list[int], n: int) -> list[int]:
    """Slow path kept on purpose: recompute the whole sequence every step (no cache reuse)."""
    seq = list(prompt)
    for _ in range(n):
        cache = llm.model.allocate_cache(1, len(seq) + 1)
        seq.append(int(llm.model(torch.tensor([seq]), cache).logits[0, -1].argmax()))
    return seq[len(prompt):]


def test_greedy_matches_cache_free_reference(llm):
    prompt = [5, 17, 42, 8, 9, 60]
    out = llm.generate(prompt, max_new_tokens=24)
    ref = _greedy_without_cache(llm, prompt, 24)
    n = len(out.token_ids)
    assert out.token_ids == ref[:n]
    eos = set(llm.eos_token_ids)
    assert n == 24 or out.token_ids[-1] in eos
    assert out.stats.tau == 1.0 and out.stats.new_tokens == n


def test_seed_reproducible_and_seed_matters(llm):
    kw = dict(max_new_tokens=16, temperature=1.0, top_k=0)
    a = llm.generate([3, 4, 5], seed=1, **kw).token_ids
    b = llm.generate([3, 4, 5], seed=1, **kw).token_ids
    outs = {tuple(llm.generate([3, 4, 5], seed=s, **kw).token_ids) for s in range(2, 6)}
    assert a == b
    assert len(outs) > 1


def test_sampling_follows_the_target_distribution():
    """First sampled token frequencies vs the processed target distribution (temperature, top-k, top-p)."""
    llm = weaver.LLM.from_config("tiny-llama", random_weights=True, seed=9)
    prompt = [7, 8, 9]
    params = SamplingParams(temperature=5.0, top_p=0.9, top_k=20)
    probs = process_logits(llm.logits(prompt)[-1], params)
    counts = torch.zeros_like(probs)
    n = 3000
    gen = torch.Generator().manual_seed(0)
    from weaver.speculative.sampling import sample_from_probs

    for _ in range(n):
        counts[sample_from_probs(probs, gen)] += 1
    tv = 0.5 * (counts / n - probs).abs().sum().item()
    assert tv < 0.06, tv
    first = [llm.generate(prompt, max_new_tokens=1, temperature=5.0, top_p=0.9, top_k=20, seed=s).token_ids[0]
             for s in range(300)]
    assert all(probs[t] > 0 for t in first), "sampled a token outside top-k/top-p"


def test_max_new_tokens_and_eos():
    cfg = preset_config("tiny-llama")
    llm = weaver.LLM.from_config(cfg, random_weights=True, seed=1)
    out = llm.generate([1, 2, 3], max_new_tokens=7)
    greedy = out.token_ids
    assert 1 <= len(greedy) <= 7
    # Declare the 3rd greedy token an EOS: generation must stop right there.
    llm2 = weaver.LLM.from_config({**cfg, "eos_token_id": greedy[2]}, random_weights=True, seed=1)
    out2 = llm2.generate([1, 2, 3], max_new_tokens=7)
    stop_at = greedy.index(greedy[2]) + 1
    assert out2.token_ids == greedy[:stop_at]
    assert out2.stats.finish_reason == "eos"


def test_stop_strings_with_byte_tokenizer():
    cfg = preset_config("tiny-llama", vocab_size=300, eos_token_id=299)
    llm = weaver.LLM.from_config(cfg, random_weights=True, seed=2)
    full = llm.generate("ab", max_new_tokens=40, chat=False)
    text = full.text
    assert len(text) >= 3
    stop = text[2:4]
    streamed: list[str] = []
    out = llm.generate("ab", max_new_tokens=40, chat=False, stop=[stop], on_text=streamed.append)
    assert out.stats.finish_reason == "stop"
    assert out.text == text[: text.find(stop)]
    assert "".join(streamed) == out.text


def test_logits_equals_one_prefill(llm):
    ids = [4, 9, 33, 2, 71]
    logits = llm.logits(ids)
    assert logits.shape == (5, llm.config.vocab_size)
    cache = llm.model.allocate_cache(1, 8)
    with torch.no_grad():
        ref = llm.model(torch.tensor([ids]), cache).logits[0]
    assert (logits - ref).abs().max() <= 1e-5  # cache capacities differ: same math, other reduction order


def test_stop_string_token_ids_do_not_depend_on_the_method():
    """A round emits several tokens at once: those past the stop string are dropped, so every method (and a
    server's usage count) reports the same tokens as AR."""
    cfg = preset_config("tiny-llama", vocab_size=300, eos_token_id=299)
    llm = weaver.LLM.from_config(cfg, random_weights=True, seed=2, drafter="random", adapter="random")
    text = llm.generate("ab", max_new_tokens=40, chat=False).text
    stop = text[5:7]
    outs = [llm.generate("ab", method=m, budget=8, max_new_tokens=40, chat=False, stop=[stop])
            for m in ("ar", "ddtree", "weaver")]  # fmt: skip
    assert all(o.stats.finish_reason == "stop" for o in outs)
    assert outs[0].token_ids == outs[1].token_ids == outs[2].token_ids
    assert stop in llm.tokenizer.decode(outs[0].token_ids) and stop not in llm.tokenizer.decode(outs[0].token_ids[:-1])


def test_should_stop_ends_generation_between_rounds():
    cfg = preset_config("tiny-llama", vocab_size=300, eos_token_id=[])
    llm = weaver.LLM.from_config(cfg, random_weights=True, seed=2)
    asked = []
    out = llm.generate("ab", max_new_tokens=40, chat=False, should_stop=lambda: asked.append(1) or len(asked) >= 3)
    assert out.stats.finish_reason == "cancelled"
    assert len(out.token_ids) == 3 == len(asked)  # ar: one token a round, the flag asked after each
    assert out.token_ids == llm.generate("ab", max_new_tokens=40, chat=False).token_ids[:3]
