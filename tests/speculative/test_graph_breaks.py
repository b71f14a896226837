"""Every function the engine torch.compiles traces as ONE graph: each stage of each method's round and the AR
step (the prefill is not compiled: on CUDA it runs the fused kernels). A graph break leaves eager code between
compiled pieces (and stops fusion across it): a dataclass default object in `build_step` once split every
compiled forward into several graphs, silently. CPU: the torch paths, all five stages traced (dynamo's tracing
only). On a GPU (the device scripts run this file there): the engine's own configuration (kernels="auto", bf16)
and the stages it compiles, so a break that only CUDA shows (as the symbolic-length prefill had,
rounds/h200_v29_prefill) fails here too."""

from __future__ import annotations

import pytest
import torch

import weaver
from weaver.speculative.round import RoundConfig, RoundState, speculative_prefill
from weaver.speculative.sampling import SamplingParams


def _breaks(fn, *args) -> list[str]:
    torch._dynamo.reset()
    explained = torch._dynamo.explain(fn)(*args)
    return [f"{reason.reason.splitlines()[0]} at {_where(reason.user_stack)}" for reason in explained.break_reasons] + (
        [f"{explained.graph_count} graphs"] if explained.graph_count != 1 else [])  # fmt: skip


def _where(stack) -> str:
    """The innermost frames of a break (file:line function), where a failure message can name them."""
    return " <- ".join(f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno} {frame.name}" for frame in stack[::-1][:4])


CUDA = torch.cuda.is_available()


def _llm(model: str, method: str, gemv: str = "auto"):
    kernels, dtype = ("auto", "bf16") if CUDA else ("torch", "fp32")
    return weaver.LLM.from_config(model, random_weights=True, seed=7, drafter="random:2",
                                  adapter="random:32" if method == "weaver" else None, device="cuda" if CUDA else "cpu",
                                  dtype=dtype, options=weaver.RuntimeOptions(kernels=kernels, gemv=gemv))  # fmt: skip


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
    compiled = engine.compiled_stage_names(cfg) if CUDA else tuple(calls)  # CPU: trace all five as a proxy
    found = {name: _breaks(getattr(stages, name), *args) for name, args in calls.items() if name in compiled}
    assert not any(found.values()), found


@pytest.mark.parametrize("gemv", ["auto", "tma"])  # tma: the layers hand their norms to the projections
@pytest.mark.parametrize("model", ["tiny-llama", "tiny-qwen3_5"])
@torch.no_grad()
def test_ar_step_is_one_graph(model: str, gemv: str) -> None:
    llm = _llm(model, "chain", gemv)
    engine, params = llm.engine, SamplingParams()
    cfg = RoundConfig(method="ar", budget=0, rule="greedy", params=params)
    ar = engine.stages_for(cfg, None)
    cache = engine.cache_for(64)
    logits = engine.prefill(cache, [1, 2, 3])
    state = RoundState(cache=cache, root=logits.argmax(-1))
    if CUDA and "verify" not in engine.compiled_stage_names(cfg):  # nothing compiled: the fused step runs
        assert engine.fast_decode is not None
        return
    assert _breaks(ar.verify, state, None) == []
