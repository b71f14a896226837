"""The engine's prefill bodies torch.compile'd as on CUDA (`capture.compile_prefill`: the prompt length symbolic):
equal to the eager bodies, and ONE compile serves every prompt bucket (and, for the speculative prefill, every
configuration's round state). CPU, fp32, inductor."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

import weaver
from weaver.speculative.capture import compile_prefill
from weaver.speculative.round import speculative_prefill
from weaver.speculative.sampling import SamplingParams


def _graphs() -> int:
    return counters["stats"]["unique_graphs"]


def _prompt(llm, n: int, bucket: int) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.zeros(1, bucket, dtype=torch.long)
    tokens[0, :n] = torch.tensor([(5 * j + 2) % llm.config.vocab_size for j in range(n)])
    return tokens, torch.tensor([n])


@pytest.fixture(scope="module")
def llm():
    return weaver.LLM.from_config("tiny-llama", random_weights=True, seed=5, drafter="random:2", adapter=None,
                                  device="cpu", dtype="fp32")  # fmt: skip


@torch.no_grad()
def test_compiled_target_prefill_equals_eager_with_one_compile_for_every_bucket(llm) -> None:
    engine = llm.engine
    eager = engine._prefill_body("target")  # CPU: the engine does not compile, so this is the eager body
    compiled = compile_prefill("test target prefill", eager)
    before = _graphs()
    for n, bucket in [(5, 16), (20, 32), (40, 64)]:  # 16 = the tiny model's head_dim: no specialisation
        tokens, count = _prompt(llm, n, bucket)
        want = eager(tokens, count, engine.cache_for(256)).clone()
        cache = engine.cache_for(256)
        got = compiled(tokens, count, cache)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        assert cache.lengths.tolist() == [n]  # the pads are not committed
    assert _graphs() - before == 1, "a prompt bucket recompiled the prefill"


@torch.no_grad()
def test_compiled_speculative_prefill_serves_every_bucket_and_round_state(llm) -> None:
    engine, params = llm.engine, SamplingParams()
    engine._bind_draft_models()
    eager = engine._prefill_body("speculative")
    compiled = compile_prefill("test speculative prefill", eager)
    # two round states (two configurations' captured rounds each own one), over caches of one capacity
    states = [speculative_prefill(llm.model, llm.drafter, engine.cache_for(256), [1, 2, 3], params, None,
                                  llm.options) for _ in range(2)]  # fmt: skip
    before = _graphs()
    for state, (n, bucket) in zip(states * 2, [(20, 32), (9, 16), (5, 16), (33, 64)], strict=True):
        tokens, count = _prompt(llm, n, bucket)
        want = speculative_prefill(llm.model, llm.drafter, engine.cache_for(256), tokens[0, :n].tolist(), params,
                                   None, llm.options)  # fmt: skip
        want_root, want_hidden = want.root.clone(), want.target_hidden.clone()
        want_ctx = want.context.stacked[0][:, :, :, :n].clone()
        root = compiled(tokens, count, state, params)
        assert torch.equal(root, want_root)
        assert state.cache.lengths.tolist() == [n] and state.context.lengths.tolist() == [n]
        torch.testing.assert_close(state.target_hidden, want_hidden, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(state.context.stacked[0][:, :, :, :n], want_ctx, rtol=1e-5, atol=1e-5)
    assert _graphs() - before == 1, "a bucket or another round state recompiled the prefill"
