"""The speculative round as CUDA graphs over static state: ONE graph for the whole round, or one per stage.

Every stage (draft, build, verify, accept, commit) is sync-free with static shapes (device builders, a
static path length for the accept rule), so a round is captured once per (method, budget, options,
capacity) and replayed every round; the host reads the round's emitted tokens once.

    mode "round"   one graph: one launch per round (the fast path; with timing, the round's device time)
    mode "stages"  five graphs, one per stage: four more launches per round, but CUDA events between them
                   give each stage's device time with no host sync (the per-stage breakdown)

Both modes run the stages through `SpeculativeDecoder.stage_calls`, the wiring the eager round uses.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

import torch

from weaver.speculative import graphs

STAGES = ("draft", "build", "verify", "accept", "commit")
MODES = ("round", "stages")


class RoundGraphs:
    """Captures `spec`'s round over `state` (which warm-up and capture advance: reset it afterwards)."""

    def __init__(self, spec, state, cfg, compile_stages: tuple[str, ...] = (), mode: str = "round") -> None:
        """spec: SpeculativeDecoder, state: SpecState, cfg: SpecConfig; `compile_stages` go through
        torch.compile first (fewer, fused kernels), each falling back to eager if compilation fails."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.state, self.mode = state, mode
        self.compiled: list[str] = []
        self.out: dict[str, object] = {}
        calls = spec.stage_calls(state, cfg, None, self.out)
        runs = {}
        for name in STAGES:  # one real round first, stage by stage: each later stage reads real inputs
            runs[name] = functools.partial(self._store, name, self._prepare(name, calls[name], name in compile_stages))
        if mode == "round":
            self.graphs = [graphs.capture(lambda: [run() for run in runs.values()])[0]]
        else:
            self.graphs = []
            for name in STAGES:
                graph, _ = graphs.capture(runs[name])
                graph.replay()  # real outputs for the next stage's warm-up
                self.graphs.append(graph)
        self.events = [torch.cuda.Event(enable_timing=True) for _ in range(len(self.graphs) + 1)]

    def _prepare(self, name: str, call: Callable[[], object], compile: bool) -> Callable[[], object]:
        """Run stage `name` once (through torch.compile when asked, eager if that fails); returns what ran."""
        if compile:
            compiled = torch.compile(call, dynamic=False)
            try:
                self.out[name] = compiled()
                self.compiled.append(name)
                return compiled
            except Exception as err:  # noqa: BLE001 - any compiler failure: capture the eager stage
                warnings.warn(f"stage {name!r} not compiled: {type(err).__name__}: {err}", stacklevel=3)
        self.out[name] = call()
        return call

    def _store(self, name: str, fn: Callable[[], object]) -> object:
        """Run a stage and keep its result where the later stages (and `replay`) read it."""
        self.out[name] = fn()
        return self.out[name]

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
        """Device time of the last timed replay (call after the host has synchronised): {"round": s} for
        one graph, each stage's for five."""
        names = ("round",) if self.mode == "round" else STAGES
        return {name: self.events[i].elapsed_time(self.events[i + 1]) / 1e3 for i, name in enumerate(names)}


def graphable(cfg, device: torch.device) -> bool:
    """Graphs need CUDA and a rule without host-side randomness or host loops (greedy, target-only)."""
    from weaver.speculative.builders import BUILDERS

    return device.type == "cuda" and cfg.rule in ("greedy",) and not cfg.method.endswith("_host") and (
        cfg.method in BUILDERS
    )
