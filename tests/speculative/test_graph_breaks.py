"""Every function the engine torch.compiles traces as ONE graph: each stage of each method's round, the AR step,
and the prefill bodies. A graph break leaves eager code between compiled pieces (and stops fusion across it):
a dataclass default object in `build_step` once split every compiled forward into several graphs, silently.
CPU, the torch paths (the compiled ones where no fused kernel applies), dynamo's tracing only."""

from __future__ import annotations

import pytest
import torch

import weaver
from weaver.speculative.round import RoundConfig, RoundState, speculative_prefill
from weaver.speculative.sampling import SamplingParams


def _breaks(fn, *args) -> list[str]:
    torch._dynamo.reset()
    explained = torch._dynamo.explain(fn)(*args)
    return [reason.reason.splitlines()[0] for reason in explained.break_reasons] + (
        [f"{explained.graph_count} graphs"] if explained.graph_count != 1 else [])  # fmt: skip


def _llm(model: str, method: str):
    return weaver.LLM.from_config(model, random_weights=True, seed=7, drafter="random:2",
                                  adapter="random:32" if method == "weaver" else None, device="cpu", dtype="fp32",
                                  options=weaver.RuntimeOptions(kernels="torch"))  # fmt: skip


@pytest.mark.parametrize("model", ["tiny-llama", "tiny-qwen3_5"])
@pytest.mark.parametrize("method", ["chain", "ddtree", "weaver"])
@torch.no_grad()
def test_every_round_stage_is_one_graph(model: str, method: str) -> None:
    llm = _llm(model, method)
    engine = llm.engine
    engine._bind_draft_models()
    cfg = RoundConfig(method=method, budget=8, rule="greedy", params=SamplingParams())
    stages = engine.stages_for(cfg, None)
    state = speculative_prefill(llm.model, llm.drafter, engine.cache_for(64), [1, 2, 3, 4, 5], cfg.params, None,
                                llm.options)  # fmt: skip
    draft = stages.draft(state)
    tree = stages.build(state, draft)
    verified = stages.verify(state, tree)
    result = stages.accept(tree, verified)
    calls = {"draft": (state,), "build": (state, draft), "verify": (state, tree), "accept": (tree, verified),
             "commit": (state, tree, verified, result)}  # fmt: skip
    found = {name: _breaks(getattr(stages, name), *args) for name, args in calls.items()}
    assert not any(found.values()), found


@pytest.mark.parametrize("model", ["tiny-llama", "tiny-qwen3_5"])
@torch.no_grad()
def test_ar_step_and_prefill_bodies_are_one_graph(model: str) -> None:
    llm = _llm(model, "chain")
    engine, params = llm.engine, SamplingParams()
    engine._bind_draft_models()
    ar = engine.stages_for(RoundConfig(method="ar", budget=0, rule="greedy", params=params), None)
    cache = engine.cache_for(64)
    logits = engine.prefill(cache, [1, 2, 3])
    state = RoundState(cache=cache, root=logits.argmax(-1))
    found = {"ar verify": _breaks(ar.verify, state, None)}
    if not llm.config.has_gdn:  # hybrids prefill eagerly at the exact length (no padded, captured prefill)
        tokens, count = torch.zeros(1, 16, dtype=torch.long), torch.tensor([3])
        found["target prefill"] = _breaks(engine._prefill_body("target"), tokens, count, engine.cache_for(64))
        spec = speculative_prefill(llm.model, llm.drafter, engine.cache_for(64), [1, 2], params, None, llm.options)
        found["speculative prefill"] = _breaks(engine._prefill_body("speculative"), tokens, count, spec, params)
    assert not any(found.values()), found
