"""`padded_speculative_prefill` (the captured rounds' prefill on CUDA: one graph per power-of-two bucket) leaves
the same state as the eager `speculative_prefill` of the unpadded prompt: root, target hidden, committed length,
the target's K/V of the prompt and the drafter's context. CPU, fp32, eager (the graph wraps exactly this call)."""

from __future__ import annotations

import pytest
import torch

import weaver
from weaver.speculative.round import padded_speculative_prefill, speculative_prefill
from weaver.speculative.sampling import SamplingParams


@pytest.mark.parametrize("n, bucket", [(5, 16), (16, 16), (9, 32)])
@torch.no_grad()
def test_padded_prefill_leaves_the_eager_state(n, bucket) -> None:
    llm = weaver.LLM.from_config("tiny-llama", random_weights=True, seed=3, drafter="random:2", adapter=None,
                                 device="cpu", dtype="fp32")
    model, drafter, params = llm.model, llm.drafter, SamplingParams()
    prompt = [(7 * j + 3) % llm.config.vocab_size for j in range(n)]
    eager = speculative_prefill(model, drafter, llm.engine.cache_for(64), prompt, params, None, llm.options)
    want_k = eager.cache.stacked_kv[0][:, :, :, :n].clone()
    want_ctx = eager.context.stacked[0][:, :, :, :n].clone()
    eager_root, eager_hidden = eager.root.clone(), eager.target_hidden.clone()

    state = speculative_prefill(model, drafter, llm.engine.cache_for(64), [1, 2, 3], params, None, llm.options)
    tokens = torch.zeros(1, bucket, dtype=torch.long)
    tokens[0, :n] = torch.tensor(prompt)
    root = padded_speculative_prefill(model, drafter, state, tokens, torch.tensor([n]), params, llm.options)
    assert torch.equal(root, eager_root) and root is state.root
    assert state.cache.lengths.tolist() == [n] and state.context.lengths.tolist() == [n]
    torch.testing.assert_close(state.target_hidden, eager_hidden, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(state.cache.stacked_kv[0][:, :, :, :n], want_k, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(state.context.stacked[0][:, :, :, :n], want_ctx, rtol=1e-5, atol=1e-5)
