"""Speed applied from outside the round (gpt-fast style): torch.compile of stage functions, CUDA graphs.

    stages = compile_stages(stages, ("draft", "build", "accept", "commit"))   # fewer, fused kernels
    round_ = RoundGraph(stages, state)      # ONE graph per round: replay() -> emitted tokens
    graphed = StageGraphs(stages, state)    # one graph per stage: decode_round(graphed.stages, state)

Every stage is sync-free with static shapes, so a configuration is compiled and captured once and replayed
every round. Each configuration compiles its own copy of the stage functions (`own_code`): dynamo keeps
compiled code per code object, and a copy shared by every (method, budget) would pile one guard set per
configuration on it until `recompile_limit` sends the later ones back to eager, silently.
"""

from __future__ import annotations

import types
import warnings
from collections.abc import Callable

import torch

from weaver.speculative.round import RoundState, Stages, decode_round

__all__ = ["GraphedStep", "RoundGraph", "StageGraphs", "capture", "compile_fallbacks", "compile_stages", "own_code"]


def capture(fn: Callable[[], object], warmup: int = 2) -> tuple[torch.cuda.CUDAGraph, object]:
    """Run `fn` `warmup` times on a side stream (as PyTorch requires before capture), then capture one call.

    Returns the graph and that call's output (static tensors every replay rewrites). The warm-up runs are
    real, so callers reset any state they advanced.
    """
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


class GraphedStep:
    """Capture `fn(*static_inputs) -> tensor` once; each call copies the inputs in and replays the graph."""

    def __init__(self, fn: Callable[..., torch.Tensor], *examples: torch.Tensor, warmup: int = 3) -> None:
        self.static_in = [x.clone() for x in examples]
        self.graph, self.static_out = capture(lambda: fn(*self.static_in), warmup)

    def __call__(self, *inputs: torch.Tensor) -> torch.Tensor:
        for static, x in zip(self.static_in, inputs, strict=True):
            if x.data_ptr() != static.data_ptr():
                static.copy_(x)
        self.graph.replay()
        return self.static_out


def own_code(fn: Callable) -> Callable:
    """`fn` with a code object of its own, so torch.compile caches it apart from every other copy (a callable
    that is not a plain function is returned as it is)."""
    if not isinstance(fn, types.FunctionType):
        return fn
    code = fn.__code__.replace()
    return types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


class _CompiledOrEager:
    """A stage compiled on first call (static shapes); if the compiler fails, warn once and run the eager stage
    from then on (the error stays in `error`, for `compile_fallbacks`)."""

    def __init__(self, name: str, fn: Callable, fullgraph: bool, pdl: bool) -> None:
        self.name, self.eager = name, fn
        # pdl: inductor's kernels launched with programmatic dependent launch too (Hopper and later; elsewhere
        # inductor leaves it off), so the norms between two GEMVs let the next one's weight prefetch start
        self.fn = torch.compile(own_code(fn), dynamic=False, fullgraph=fullgraph, options={"triton.enable_pdl": pdl})
        self.compiled = True
        self.error: str | None = None

    def __call__(self, *args):
        if not self.compiled:
            return self.eager(*args)
        try:
            return self.fn(*args)
        except Exception as err:  # noqa: BLE001 - any compiler failure: keep the eager stage
            self.error = f"{type(err).__name__}: {err}".splitlines()[0][:300]
            warnings.warn(f"stage {self.name!r} not compiled: {self.error}", stacklevel=2)
            self.compiled = False
            return self.eager(*args)


def compile_fallbacks(stages: Stages) -> dict[str, str]:
    """{stage name: compiler error} for the stages of `stages` that fell back to eager: benchmarks report them, so
    an eager stage is never timed as a compiled one without a word (the H200's hybrid verify once was)."""
    found = (getattr(stages, name) for name in stages.NAMES)
    return {s.name: s.error or "" for s in found if isinstance(s, _CompiledOrEager) and not s.compiled}


# Stages whose inductor kernels launch without PDL whatever `pdl` says: with it the commit's timeline grew 61 -> 73 us
# in the 135M rounds (H100, session 50; the 27B commit moved within noise), while every other stage gained or held.
NO_INDUCTOR_PDL = frozenset({"commit"})


def compile_stages(stages: Stages, names: tuple[str, ...], fullgraph: bool = False, pdl: bool = True) -> Stages:
    """`stages` with the named ones torch.compile'd (each on its own code object; eager if compiling fails), their
    kernels launched with PDL where `pdl` (RuntimeOptions.pdl) and the stage is not in NO_INDUCTOR_PDL (session 49:
    -0.18 to -0.21 ms of the 27B AR step on an H100; session 50: the 135M rounds; docs/performance.md)."""
    compiled = {
        name: _CompiledOrEager(name, getattr(stages, name), fullgraph, pdl and name not in NO_INDUCTOR_PDL)
        for name in names
    }
    return stages.replace(**compiled)


class RoundGraph:
    """`decode_round(stages, state)` captured as one CUDA graph (warm-up and capture advance `state`)."""

    def __init__(self, stages: Stages, state: RoundState) -> None:
        self.state = state
        self.graph, self.emitted = capture(lambda: decode_round(stages, state))
        self.events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        self.timed = False

    def replay(self, timing: bool = False) -> torch.Tensor:
        """Run one round; returns the emitted tokens [B, P] in the graph's static buffer."""
        self.timed = timing
        if timing:
            self.events[0].record()
        self.graph.replay()
        if timing:
            self.events[1].record()
        return self.emitted

    def stage_seconds(self) -> dict[str, float]:
        """{"round": device seconds} of the last timed replay (after the host synchronised), else {}."""
        return {"round": self.events[0].elapsed_time(self.events[1]) / 1e3} if self.timed else {}


class StageGraphs:
    """Each stage captured as a CUDA graph of its own: `self.stages` replays them (four more launches a round,
    but CUDA events between them give each stage's device time without a host sync)."""

    def __init__(self, stages: Stages, state: RoundState) -> None:
        self.state = state
        self.events = [torch.cuda.Event(enable_timing=True) for _ in range(len(Stages.NAMES) + 1)]
        self.timed = False
        draft = self._capture(0, lambda: stages.draft(state))
        tree = self._capture(1, lambda: stages.build(state, draft.out))
        verified = self._capture(2, lambda: stages.verify(state, tree.out))
        result = self._capture(3, lambda: stages.accept(tree.out, verified.out))
        emitted = self._capture(4, lambda: stages.commit(state, tree.out, verified.out, result.out))
        self.stages = Stages(draft, tree, verified, result, emitted)
        self.emitted = emitted.out

    def _capture(self, index: int, fn: Callable[[], object]) -> _StageGraph:
        stage = _StageGraph(self, index, fn)
        stage.graph.replay()  # real outputs for the next stage's warm-up
        return stage

    def replay(self, timing: bool = False) -> torch.Tensor:
        """Run one round through the five graphs; returns the emitted tokens [B, P]."""
        self.timed = timing
        decode_round(self.stages, self.state)
        if timing:
            self.events[-1].record()
        return self.emitted

    def stage_seconds(self) -> dict[str, float]:
        """Each stage's device seconds in the last timed replay (after the host synchronised), else {}."""
        if not self.timed:
            return {}
        return {name: self.events[i].elapsed_time(self.events[i + 1]) / 1e3 for i, name in enumerate(Stages.NAMES)}


class _StageGraph:
    """One stage's graph: called with the stage's usual arguments (ignored: the graph holds their addresses)."""

    def __init__(self, owner: StageGraphs, index: int, fn: Callable[[], object]) -> None:
        self.owner, self.index = owner, index
        self.graph, self.out = capture(fn)

    def __call__(self, *args) -> object:
        if self.owner.timed:
            self.owner.events[self.index].record()
        self.graph.replay()
        return self.out
