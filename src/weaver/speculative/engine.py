"""The generation loop: prefill, then rounds (`weaver.speculative.round.decode_round`) until the caller stops.

Every method runs through `Engine.generate` and the same loop: autoregressive decoding is a round of one node,
a speculative method a round of a tree. The engine works on token ids only (no text): it yields the tokens
each round emits, and the caller decides when to stop (EOS, stop strings, max tokens) by closing the
generator. Caches are preallocated per capacity bucket and reused; on CUDA every configuration's round is
compiled and captured once (`weaver.speculative.capture`) and replayed, keyed by (configuration, capacity,
graph mode).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from weaver.kernels import launch_config
from weaver.kernels.dispatch import use_kernel
from weaver.models.cache import ModelCache
from weaver.models.decoder import Decoder
from weaver.options import DEFAULT_OPTIONS, RuntimeOptions
from weaver.speculative.capture import GraphedStep, RoundGraph, StageGraphs, compile_fallbacks, compile_stages
from weaver.speculative.readback import ChunkReadback
from weaver.speculative.round import (
    RoundConfig,
    RoundState,
    Stages,
    ar_stages,
    decode_round,
    padded_speculative_prefill,
    speculative_prefill,
    speculative_stages,
)
from weaver.speculative.sampling import sample_next_token

CAPACITY_BUCKET = 256  # caches (and captured graphs) come in multiples of this many slots
PREFILL_MIN_BUCKET = 16  # smallest padded prompt length (attention-only models)
AR_LOOKAHEAD = 8  # one-token rounds queued per host read-back on CUDA (a round's count is known: 1)
# torch.compile'd before capture: every stage (compiling accept and commit halves their kernels on the H200) but
# a fused one: the fused verify (attention-only models) and the fused draft are already a few launches a layer;
# the hybrid models' verify has no fused path and runs thousands of small torch kernels uncompiled
COMPILED_STAGES = ("draft", "build", "verify", "accept", "commit")


@dataclass
class RoundStats:
    """What one generation's rounds did; tau counts the bonus token (a round emits >= 1 token)."""

    rounds: int = 0
    emitted: int = 0
    accepted_per_depth: list[int] = field(default_factory=list)
    stage_seconds: dict[str, float] = field(default_factory=dict)  # totals
    stage_samples: dict[str, list[float]] = field(default_factory=dict)  # every add_time, in order

    def add_time(self, stage: str, seconds: float) -> None:
        self.stage_seconds[stage] = self.stage_seconds.get(stage, 0.0) + seconds
        self.stage_samples.setdefault(stage, []).append(seconds)

    def add_round(self, emitted: int) -> None:
        self.rounds += 1
        self.emitted += emitted
        while len(self.accepted_per_depth) < emitted:
            self.accepted_per_depth.append(0)
        self.accepted_per_depth[emitted - 1] += 1  # histogram: rounds that accepted emitted-1 drafts

    @property
    def tau(self) -> float:
        return self.emitted / self.rounds if self.rounds else 0.0


class Engine:
    """Runs generation for one target model (and its drafter / adapter); owns caches and captured rounds."""

    def __init__(
        self, model: Decoder, options: RuntimeOptions | None = None, drafter=None, adapter=None, timing: bool = False
    ) -> None:
        self.model, self.drafter, self.adapter = model, drafter, adapter
        self.options = options or DEFAULT_OPTIONS
        self.device = model.device
        self.timing = timing  # per-stage times (device events or syncs; off for speed runs)
        launch_config.configure(self.options, model.config.hidden_size, cuda=self.device.type == "cuda")
        self.fast_decode = _fast_decoder(model, self.options)
        self.fast_prefill = _fast_verifier(model, self.options)  # the prompt as a chain through the fused verify
        self._fast_verify = self._fast_draft = None
        self._bound = False
        self.min_capacity = 0  # a server sets its context here: one cache (and one captured round) per configuration
        self._caches: dict[int, ModelCache] = {}
        self._prefill_graphs: dict[tuple, GraphedStep] = {}
        self._prefill_bodies: dict[str, Callable] = {}  # "target" / "speculative"
        self._captured: dict[tuple, object] = {}  # RoundGraph / StageGraphs / AR step graph per configuration
        # "<method>/<budget> <stage>" -> compiler error, for every captured stage that fell back to eager
        self.compile_fallbacks: dict[str, str] = {}

    # -- options ------------------------------------------------------------------------------------
    @property
    def cuda_graphs(self) -> str:
        """The capture mode in force: "off" anywhere but CUDA."""
        return self.options.cuda_graphs if self.device.type == "cuda" else "off"

    @property
    def compile(self) -> bool:
        return self.options.compile and self.device.type == "cuda"

    # -- caches -------------------------------------------------------------------------------------
    def cache_for(self, num_tokens: int) -> ModelCache:
        """A reset cache with room for `num_tokens` (rounded up to the capacity bucket)."""
        capacity = -(-max(num_tokens, self.min_capacity) // CAPACITY_BUCKET) * CAPACITY_BUCKET
        if capacity not in self._caches:
            self._caches[capacity] = self.model.allocate_cache(1, capacity)
        cache = self._caches[capacity]
        cache.reset()
        return cache

    @property
    def captured_count(self) -> int:
        """Captured rounds and prefills so far (a server logs any capture after its warm-up)."""
        return len(self._captured) + len(self._prefill_graphs)

    def _sync(self) -> None:
        if self.timing and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # -- the loop -----------------------------------------------------------------------------------
    @torch.no_grad()
    def generate(
        self, prompt_ids: list[int], cfg: RoundConfig, max_new_tokens: int, seed: int, stats: RoundStats
    ) -> Iterator[list[int]]:
        """Yield the prefill's token, then the tokens of each round (>= 1 each), until closed or max_new_tokens."""
        runner = self._runner(prompt_ids, cfg, max_new_tokens, seed)
        t0 = time.perf_counter()
        first = runner.start()
        stats.add_time("prefill", time.perf_counter() - t0)
        yield [first]
        remaining = max_new_tokens - 1  # tokens still wanted; every round emits at least one
        readback = ChunkReadback(runner.lookahead, runner.width, self.device)
        t_last = time.perf_counter()

        def queue_chunk() -> None:
            nonlocal remaining
            count = min(runner.lookahead, remaining)
            ring = readback.ring()
            for i in range(count):
                ring[i].copy_(runner.step()[0])
            readback.submit(count)
            if runner.fixed_count:  # one token a round: the chunk's tokens are known before it is read
                remaining -= count

        def ahead() -> bool:
            """Whether to queue the next chunk before reading the oldest: the device works on while the caller
            takes its tokens. AR: on CUDA, whenever tokens are still wanted. A captured speculative round emits
            1..width tokens: only if it is needed even when every round in flight emits its most (so no round
            runs that the one-at-a-time loop would not), and not while timing (a replay's events are reused)."""
            if len(readback.pending) >= 2 or remaining <= 0:
                return False
            if runner.fixed_count:
                return self.device.type == "cuda"
            return runner.captured is not None and not self.timing and (
                remaining >= runner.width * (len(readback.pending) + 1))

        if remaining > 0:
            queue_chunk()
        while readback.pending:
            if ahead():
                queue_chunk()
            rows = readback.collect()
            now = time.perf_counter()
            for stage, seconds in runner.stage_seconds(now - t_last).items():
                stats.add_time(stage, seconds)
            t_last = now
            for row in rows:
                tokens = row[: row.index(-1)] if -1 in row else row
                stats.add_round(len(tokens))
                if not runner.fixed_count:
                    remaining -= len(tokens)
                yield tokens
            if remaining > 0 and not readback.pending:
                queue_chunk()

    def _runner(self, prompt_ids: list[int], cfg: RoundConfig, max_new_tokens: int, seed: int) -> _Runner:
        generator = self._generator(seed)
        if cfg.method == "ar":
            cache = self.cache_for(len(prompt_ids) + max_new_tokens + 1)
            return _Runner(self, cache, prompt_ids, cfg, generator, ar=True)
        self._bind_draft_models()
        cache = self.cache_for(len(prompt_ids) + max_new_tokens + cfg.budget + 2)  # room for one tree
        return _Runner(self, cache, prompt_ids, cfg, generator, ar=False)

    def _bind_draft_models(self) -> None:
        """The fused verify / draft paths and the adapter's view of the target, built on first speculative use."""
        if self._bound:
            return
        from weaver.speculative.drafter import DFlashDrafter
        from weaver.speculative.fast_drafter import fast_drafter

        self._fast_verify = _fast_verifier(self.model, self.options)
        if isinstance(self.drafter, DFlashDrafter):
            self._fast_draft = fast_drafter(self.drafter, self.model.lm_head, self.options)
        if self.adapter is not None:
            self.adapter.bind(self.model.model.embed_tokens.weight, self.model.lm_head.weight, options=self.options)
        self._bound = True

    def stages_for(self, cfg: RoundConfig, generator) -> Stages:
        """The eager stage functions of `cfg`'s round."""
        if cfg.method == "ar":
            return ar_stages(self.model, cfg.params, generator, self.options, self.fast_decode)
        return speculative_stages(self.model, self.drafter, self.adapter, cfg, generator, self.options,
                                  fast_verify=self._fast_verify, fast_draft=self._fast_draft)  # fmt: skip

    def compiled_stage_names(self, cfg: RoundConfig) -> tuple[str, ...]:
        """Stages torch.compile'd before capture (none without compile)."""
        if not self.compile:
            return ()
        if cfg.method == "ar":  # the torch step is many small kernels; the fused step is already few
            return () if self.fast_decode is not None else ("verify", "accept", "commit")
        fused = {"draft": self._fast_draft is not None, "verify": self._fast_verify is not None}
        return tuple(s for s in COMPILED_STAGES if not fused.get(s, False))

    # -- prefill ------------------------------------------------------------------------------------
    def prefill(self, cache: ModelCache, prompt_ids: list[int]) -> torch.Tensor:
        """Run the prompt through the target; returns the logits [1, V] of its last position.

        Attention-only models pad the prompt to a power-of-two bucket (pad K/V land past the committed
        length, where nothing reads them) so that on CUDA each bucket is one captured graph. Models
        with GDN layers prefill eagerly at the exact length: a pad token would enter the recurrent state.
        """
        if self.model.config.has_gdn:
            prompt = torch.tensor([prompt_ids], dtype=torch.long, device=self.device)
            return self.model(prompt, cache, last_only=True).logits[:, -1]
        tokens, count, bucket = self._padded_prompt(prompt_ids, cache.capacity)
        body = self._prefill_body("target")
        if self.cuda_graphs == "off":
            return body(tokens, count, cache)
        key = (cache.capacity, bucket)
        if key not in self._prefill_graphs:
            self._prefill_graphs[key] = GraphedStep(lambda tokens, count: body(tokens, count, cache), tokens, count)
            cache.reset()
        return self._prefill_graphs[key](tokens, count)

    def _prefill_body(self, name: str) -> Callable:
        """This engine's padded prefill from an empty cache, "target" (-> the last real position's logits [1, V])
        or "speculative" (-> the root; fills the round state). Where the fused kernels run (attention-only
        targets on CUDA) the prompt goes through them as a chain (`FastVerifier` without parents: ~160 launches;
        the torch forward is ~1,000 small kernels, ~3.7 ms on the H200 for SmolLM2 even captured, and
        torch.compile with the prompt length symbolic never compiled there, rounds/h200_v29_prefill)."""
        if name not in self._prefill_bodies:
            model, drafter, options = self.model, self.drafter, self.options
            forward = self.fast_prefill or model
            if name == "target":
                def body(tokens: torch.Tensor, count: torch.Tensor, cache: ModelCache) -> torch.Tensor:
                    cache.lengths.zero_()
                    out = forward(tokens, cache, select=count[:, None] - 1)
                    cache.lengths.copy_(count)  # the pads are not committed
                    return out.logits[:, 0]
            else:
                def body(tokens: torch.Tensor, count: torch.Tensor, state: RoundState, params) -> torch.Tensor:
                    return padded_speculative_prefill(model, drafter, state, tokens, count, params, options,
                                                      forward=forward)  # fmt: skip
            self._prefill_bodies[name] = body
        return self._prefill_bodies[name]

    def _padded_prompt(self, prompt_ids: list[int], capacity: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        """The prompt padded to its power-of-two bucket (one captured prefill graph each): tokens, count, bucket."""
        n = len(prompt_ids)
        bucket = min(max(PREFILL_MIN_BUCKET, 1 << (n - 1).bit_length()), capacity)
        tokens = torch.zeros(1, bucket, dtype=torch.long, device=self.device)
        tokens[0, :n] = torch.tensor(prompt_ids, dtype=torch.long)
        return tokens, torch.tensor([n], dtype=torch.long, device=self.device), bucket

    def captured_speculative_prefill(self, round_key: tuple, state: RoundState, prompt_ids: list[int],
                                     params) -> None:  # fmt: skip
        """The speculative prefill of a captured round's `state` as one graph per bucket (attention-only targets):
        eager, it is a few thousand small launches (~25 ms on the H200 for SmolLM2), as long as a short answer."""
        tokens, count, bucket = self._padded_prompt(prompt_ids, state.cache.capacity)
        key = (round_key, bucket)
        if key not in self._prefill_graphs:
            body = self._prefill_body("speculative")
            self._prefill_graphs[key] = GraphedStep(lambda tokens, count: body(tokens, count, state, params),
                                                    tokens, count)  # fmt: skip
        self._prefill_graphs[key](tokens, count)

    def _generator(self, seed: int) -> torch.Generator | None:
        if self.device.type == "cuda":
            # Captured graphs draw from the default CUDA generator; seeding it makes runs repeatable.
            torch.cuda.manual_seed(seed)
            return None
        return torch.Generator(device=self.device).manual_seed(seed)


class _Runner:
    """One generation's rounds: `start` prefills, `step` queues one round (no host sync) and returns its
    emitted tokens [1, P] (-1 padded), replaying the configuration's captured round where there is one."""

    def __init__(self, engine: Engine, cache: ModelCache, prompt_ids: list[int], cfg: RoundConfig, generator,
                 ar: bool) -> None:  # fmt: skip
        self.engine, self.cache, self.prompt_ids, self.cfg, self.generator, self.ar = (
            engine, cache, prompt_ids, cfg, generator, ar)  # fmt: skip
        self.fixed_count = ar  # an AR round emits exactly one token
        on_cuda = engine.device.type == "cuda"
        self.lookahead = AR_LOOKAHEAD if ar and on_cuda else 1
        self.width = 1 if ar else engine.drafter.config.block_size
        self.times: dict[str, float] = {}
        self.captured = None
        mode = engine.cuda_graphs
        # captured rounds: greedy rules only (a sampled rule draws on the host, or from a generator per call)
        if mode != "off" and (ar or cfg.rule == "greedy"):
            self.key = key = (cfg, cache.capacity, mode)
            if key not in engine._captured:
                engine._captured[key] = self._capture(mode)
            self.captured = engine._captured[key]
            self.state = self.captured.state
        else:
            self.stages = engine.stages_for(cfg, generator)
            if not ar:  # host clocks around the stages (waiting for the device first when timing)
                self.stages = _host_timed(self.stages, engine._sync, self.times)
            self.state = None

    def _capture(self, mode: str):
        """Compile and capture this configuration's round over a real state (then reset for this prompt)."""
        engine = self.engine
        state = self._prefill(None)
        stages = compile_stages(engine.stages_for(self.cfg, None), engine.compiled_stage_names(self.cfg),
                                pdl=engine.options.pdl)
        captured = RoundGraph(stages, state) if mode == "round" or self.ar else StageGraphs(stages, state)
        for name, error in compile_fallbacks(stages).items():
            engine.compile_fallbacks[f"{self.cfg.method}/{self.cfg.budget} {name}"] = error
        self.cache.reset()
        return captured

    def _prefill(self, state: RoundState | None) -> RoundState:
        engine = self.engine
        if not self.ar and state is not None and self.captured is not None and not engine.model.config.has_gdn:
            engine.captured_speculative_prefill(self.key, state, self.prompt_ids, self.cfg.params)
            return state
        if not self.ar:
            return speculative_prefill(engine.model, engine.drafter, self.cache, self.prompt_ids, self.cfg.params,
                                       self.generator, engine.options, state, engine.fast_prefill)  # fmt: skip
        logits = engine.prefill(self.cache, self.prompt_ids)
        root = sample_next_token(logits, self.cfg.params, self.generator, engine.options)
        if state is None:
            return RoundState(cache=self.cache, root=root)
        state.root.copy_(root)
        return state

    def start(self) -> int:
        """Prefill the prompt; returns the first token."""
        self.state = self._prefill(self.state)
        return int(self.state.root[0])

    def step(self) -> torch.Tensor:
        if self.captured is not None:
            return self.captured.replay(self.engine.timing and not self.ar)
        return decode_round(self.stages, self.state)

    def stage_seconds(self, wall: float) -> dict[str, float]:
        """The times of the rounds collected since the last call: AR the wall time of its chunk (the device is
        kept busy, so it is the step's), speculative rounds their stages' (or round's) device or host times."""
        if self.ar:
            return {"verify": wall}
        if self.captured is not None:
            return self.captured.stage_seconds()
        times = dict(self.times)
        self.times.clear()
        return times


def _host_timed(stages: Stages, sync, times: dict[str, float]) -> Stages:
    """`stages` with a host clock around each (after `sync`, which waits for the device when timing)."""

    def timed(name: str, fn):
        def run(*args):
            sync()
            t0 = time.perf_counter()
            out = fn(*args)
            sync()
            times[name] = times.get(name, 0.0) + time.perf_counter() - t0
            return out

        return run

    return stages.replace(**{name: timed(name, getattr(stages, name)) for name in Stages.NAMES})


def _fused_path(cls, model: Decoder, options: RuntimeOptions):
    """`cls(model)` (FastDecoder / FastVerifier) where the kernels run and the model allows it, else None."""
    from weaver.models.fast_decode import unsupported_reason

    if not use_kernel(options, model.lm_head.weight) or unsupported_reason(model) is not None:
        return None
    return cls(model)


def _fast_decoder(model: Decoder, options: RuntimeOptions):
    """The fused Triton one-token step, or None."""
    from weaver.models.fast_decode import FastDecoder

    return _fused_path(FastDecoder, model, options)


def _fast_verifier(model: Decoder, options: RuntimeOptions):
    """The fused Triton tree verify (attention-only models), or None."""
    from weaver.models.fast_verify import FastVerifier

    return _fused_path(FastVerifier, model, options)
