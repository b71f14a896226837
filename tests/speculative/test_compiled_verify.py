"""A hybrid (GDN) target has no fused verify, so its verify stage is torch.compile'd like the other stages
before capture (before, it ran uncompiled: thousands of small kernels a round at the 27B shape). On CPU with
the torch paths, and on CUDA with the Triton GDN kernels (bf16 and fp32): the stage compiles without falling back
to eager and gives the eager stage's logits and GDN tree factors. (On the H200, torch 2.11's inductor could not
launch a user kernel whose defaulted constexpr was left out, and the stage fell back to eager with a warning:
the CUDA case is what catches that.)"""

from __future__ import annotations

import warnings

import pytest
import torch

import weaver
from weaver.bench.kernels import proposal_tree
from weaver.models.cache import GDNCache
from weaver.speculative.capture import compile_stages
from weaver.speculative.engine import Engine
from weaver.speculative.round import RoundConfig, RoundState
from weaver.speculative.sampling import SamplingParams
from weaver.speculative.tree import DraftTree

CASES = [
    pytest.param("cpu", "fp32", "torch", id="cpu-torch"),
    pytest.param("cpu", "fp32", "triton", id="cpu-triton-interpreted",  # the kernels' custom ops, compiled
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter runs where CUDA is not; "
                                          "the cuda cases run the compiled kernels")),  # fmt: skip
    pytest.param("cuda", "fp32", "auto", id="cuda-triton-fp32", marks=pytest.mark.gpu),
    pytest.param("cuda", "bf16", "auto", id="cuda-triton-bf16", marks=pytest.mark.gpu),
]


def _verify(llm, verify, nodes: int = 9, context: int = 6):
    """One verify of a proposal-shaped tree after `context` committed tokens: (logits, each GDN layer's aux)."""
    vocab = llm.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, vocab, (nodes,), generator=gen).tolist()
    device = llm.model.device
    tree = DraftTree.from_parent_lists([proposal_tree(nodes, seed=1)], [tokens], device=device).with_ancestors()
    cache = llm.engine.cache_for(context + nodes + 1)
    llm.model(torch.arange(context, device=device)[None] % vocab, cache, last_only=True)
    out = verify(RoundState(cache=cache, root=tree.tokens[:, 0]), tree)
    return out.logits, [layer.aux for layer in cache.layers if isinstance(layer, GDNCache)]


@pytest.mark.parametrize(("device", "dtype", "kernels"), CASES)
@torch.no_grad()
def test_hybrid_verify_is_compiled_and_matches_eager(monkeypatch, device: str, dtype: str, kernels: str) -> None:
    llm = weaver.LLM.from_config("tiny-qwen3_5", random_weights=True, seed=7, drafter="random", adapter=None,
                                 device=device, dtype=dtype, options=weaver.RuntimeOptions(kernels=kernels))
    llm.engine._bind_draft_models()
    cfg = RoundConfig(method="chain", budget=8, rule="greedy", params=SamplingParams())
    monkeypatch.setattr(Engine, "compile", property(lambda self: True))
    assert llm.engine._fast_verify is None and "verify" in llm.engine.compiled_stage_names(cfg)
    eager = llm.engine.stages_for(cfg, None)
    compiled = compile_stages(eager, ("verify",))
    ref_logits, ref_aux = _verify(llm, eager.verify)
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        logits, aux = _verify(llm, compiled.verify)
    assert not [str(w.message) for w in caught if "not compiled" in str(w.message)]
    assert compiled.verify.compiled
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == "fp32" else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(logits, ref_logits, **tol)
    assert len(aux) == len(ref_aux) > 0
    for a, b in zip(aux, ref_aux, strict=True):
        for x, y in zip(a, b, strict=True):
            torch.testing.assert_close(x, y, **tol)
