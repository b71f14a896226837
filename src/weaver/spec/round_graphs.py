"""The speculative round as five CUDA graphs (draft, build, verify, accept, commit) over static state.

Every stage is sync-free with static shapes (device builders, a static path length for the accept
rule), so each is captured once per (method, budget, options, capacity) and replayed every round; the
host reads the round's emitted tokens once. Five graphs instead of one cost four extra graph launches
per round (~10 us) and give per-stage device times from CUDA events with no host sync between stages.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

STAGES = ("draft", "build", "verify", "accept", "commit")


class RoundGraphs:
    """Captures `spec`'s five round stages over `state` (which they mutate: reset it afterwards)."""

    def __init__(self, spec, state, cfg, compile_stages: tuple[str, ...] = ()) -> None:
        """spec: SpeculativeDecoder, state: SpecState, cfg: SpecConfig; `compile_stages` go through
        torch.compile first (fewer, fused kernels), each falling back to eager if compilation fails."""
        self.state = state
        self.compiled: list[str] = []
        out: dict[str, object] = {}
        fns: dict[str, Callable[[], object]] = {
            "draft": lambda: spec.stage_draft(state),
            "build": lambda: spec.stage_build(state, out["draft"], cfg),
            "verify": lambda: spec.stage_verify(state, out["build"]),
            "accept": lambda: spec._accept(
                out["build"], out["verify"].logits, cfg, None, path_len=spec.path_len(out["draft"])
            ),
            "commit": lambda: spec.stage_commit(state, out["build"], out["verify"], out["accept"]),
        }
        self.graphs: list[torch.cuda.CUDAGraph] = []
        side = torch.cuda.Stream()
        for name in STAGES:
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up on a side stream, as capture requires
                fns[name] = self._warm_up(name, fns[name], name in compile_stages)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out[name] = fns[name]()
            graph.replay()  # real outputs for the next stage's warm-up
            self.graphs.append(graph)
        self.out = out
        self.events = [torch.cuda.Event(enable_timing=True) for _ in range(len(STAGES) + 1)]

    def _warm_up(self, name: str, fn: Callable[[], object], compile: bool) -> Callable[[], object]:
        """Run `fn` twice (compiled when asked and possible); returns the callable to capture."""
        if compile:
            compiled = torch.compile(fn, dynamic=False)
            try:
                compiled()
                compiled()
                self.compiled.append(name)
                return compiled
            except Exception as err:  # noqa: BLE001 - any compiler failure: capture the eager stage
                warnings.warn(f"stage {name!r} not compiled: {type(err).__name__}: {err}", stacklevel=3)
        fn()
        fn()
        return fn

    def replay(self, timing: bool = False):
        """Run one round; returns (AcceptResult, emitted tokens [B, P]) in the graphs' static buffers."""
        for i, graph in enumerate(self.graphs):
            if timing:
                self.events[i].record()
            graph.replay()
        if timing:
            self.events[-1].record()
        return self.out["accept"], self.out["commit"]

    def stage_seconds(self) -> dict[str, float]:
        """Device time of each stage in the last timed replay (call after the host has synchronised)."""
        return {
            name: self.events[i].elapsed_time(self.events[i + 1]) / 1e3 for i, name in enumerate(STAGES)
        }


def graphable(cfg, device: torch.device) -> bool:
    """Graphs need CUDA and a rule without host-side randomness or host loops (greedy, target-only)."""
    from weaver.spec.builders import BUILDERS

    return device.type == "cuda" and cfg.rule in ("greedy",) and not cfg.method.endswith("_host") and (
        cfg.method in BUILDERS
    )
