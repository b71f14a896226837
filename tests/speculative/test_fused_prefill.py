"""The engine's prefill bodies through the fused verify (`FastVerifier` without parents, as on CUDA) against the
torch forward: the same last-position logits, committed length, K/V and (speculative) root, target hidden and
drafter context. fp32; on CPU the Triton kernels interpreted (kernels="triton"), compiled on a GPU."""

from __future__ import annotations

import pytest
import torch

import weaver
from weaver.models.fast_verify import FastVerifier
from weaver.speculative.round import speculative_prefill
from weaver.speculative.sampling import SamplingParams

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _llm(kernels: str):
    options = weaver.RuntimeOptions(kernels=kernels, cuda_graphs="off")  # uncaptured: each prefill call is seen
    return weaver.LLM.from_config("tiny-llama", random_weights=True, seed=5, drafter="random:2", adapter=None,
                                  device=DEVICE, dtype="fp32", options=options)  # fmt: skip


@pytest.fixture(scope="module")
def pair():
    return _llm("triton"), _llm("torch")


def _prompt(vocab: int, n: int, bucket: int) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.zeros(1, bucket, dtype=torch.long)
    tokens[0, :n] = torch.tensor([(5 * j + 2) % vocab for j in range(n)])
    return tokens.to(DEVICE), torch.tensor([n], device=DEVICE)


@torch.no_grad()
def test_fused_target_prefill_equals_the_torch_forward(pair) -> None:
    fused, ref = pair
    assert isinstance(fused.engine.fast_prefill, FastVerifier) and ref.engine.fast_prefill is None
    for n, bucket in [(5, 16), (40, 64)]:  # 16: RoPE inside the attention launch; 64: inside the qkv launch
        tokens, count = _prompt(fused.config.vocab_size, n, bucket)
        caches = fused.engine.cache_for(256), ref.engine.cache_for(256)
        got = fused.engine._prefill_body("target")(tokens, count, caches[0])
        want = ref.engine._prefill_body("target")(tokens, count, caches[1])
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        assert caches[0].lengths.tolist() == caches[1].lengths.tolist() == [n]  # the pads are not committed
        for a, b in zip(caches[0].layers, caches[1].layers, strict=True):
            torch.testing.assert_close(a.k[..., :n, :], b.k[..., :n, :], rtol=1e-5, atol=1e-5)


@torch.no_grad()
def test_fused_speculative_prefill_equals_the_torch_forward(pair) -> None:
    fused, ref = pair
    params = SamplingParams()
    states = []
    for llm in pair:
        llm.engine._bind_draft_models()
        state = speculative_prefill(llm.model, llm.drafter, llm.engine.cache_for(256), [1, 2, 3], params, None,
                                    llm.options)  # fmt: skip
        tokens, count = _prompt(llm.config.vocab_size, 33, 64)
        root = llm.engine._prefill_body("speculative")(tokens, count, state, params)
        states.append((root.clone(), state))
    (root_a, a), (root_b, b) = states
    assert torch.equal(root_a, root_b)
    assert a.cache.lengths.tolist() == b.cache.lengths.tolist() == [33] == a.context.lengths.tolist()
    torch.testing.assert_close(a.target_hidden, b.target_hidden, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(a.context.stacked[0][:, :, :, :33], b.context.stacked[0][:, :, :, :33], rtol=1e-5,
                               atol=1e-5)  # fmt: skip


@torch.no_grad()
def test_ar_and_speculative_generations_prefill_through_the_same_pass(pair) -> None:
    """Uncaptured rounds (CPU here; cuda_graphs="off" on a GPU) prefill through the engine's fused pass as `ar`
    does: the same prompt K/V on both sides, so greedy output equals `ar`'s."""
    fused, _ = pair
    engine = fused.engine
    real, calls = engine.fast_prefill, []

    def counted(*args, **kwargs):
        calls.append(kwargs.get("capture_layers", ()))
        return real(*args, **kwargs)

    engine.fast_prefill = counted
    engine._prefill_bodies.clear()  # a prefill body binds the pass when it is first built
    try:
        want = fused.generate([3, 1, 4, 1, 5], max_new_tokens=12, ignore_eos=True).token_ids
        got = fused.generate([3, 1, 4, 1, 5], method="chain", max_new_tokens=12, ignore_eos=True).token_ids
    finally:
        engine.fast_prefill = real
        engine._prefill_bodies.clear()
    assert got == want
    assert len(calls) == 2 and calls[1] == tuple(fused.drafter.config.target_layer_ids)  # ar, then speculative
