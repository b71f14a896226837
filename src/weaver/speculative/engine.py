"""The decoding loop: prefill, then rounds of (draft -> build -> verify -> accept -> commit).

Autoregressive decoding is the same loop with a one-node tree and no drafter. The engine works on
token ids only (no text): it yields the tokens each round emits, and the caller decides when to stop
(EOS, stop strings, max tokens) by closing the generator. Caches are preallocated per capacity
bucket and reused; on CUDA the decode step is captured once per (capacity, sampling) as a CUDA graph.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from weaver.errors import GenerationConfigError
from weaver.models.cache import ModelCache
from weaver.models.decoder import Decoder
from weaver.models.fast_decode import FastDecoder, unsupported_reason
from weaver.speculative.graphs import GraphedStep
from weaver.speculative.readback import ChunkReadback
from weaver.speculative.round_graphs import MODES, graphable
from weaver.speculative.sampling import SamplingParams, sample_next_token

CAPACITY_BUCKET = 256  # caches (and captured graphs) come in multiples of this many slots
PREFILL_MIN_BUCKET = 16  # smallest padded prompt length (attention-only models)
DECODE_LOOKAHEAD = 8  # decode steps queued per host sync


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

    @property
    def tau(self) -> float:
        return self.emitted / self.rounds if self.rounds else 0.0


class Engine:
    """Runs generation for one target model; owns caches and captured graphs."""

    def __init__(
        self,
        model: Decoder,
        use_cuda_graphs: bool | None = None,
        compile: bool | None = None,
        timing: bool = False,
        fast_decode: bool | None = None,
    ) -> None:
        self.model = model
        self.device = model.device
        on_cuda = self.device.type == "cuda"
        self.use_cuda_graphs = on_cuda if use_cuda_graphs is None else use_cuda_graphs
        self.compile = (on_cuda and os.environ.get("WEAVER_COMPILE", "1") != "0") if compile is None else compile
        self.timing = timing  # per-stage timers (synchronise the device; off for speed runs)
        # captured speculative rounds: one graph per round ("round", the fast path) or one per stage
        # ("stages", WEAVER_ROUND_GRAPHS=stages: per-stage device times); both checked on the H200
        self.round_graphs = os.environ.get("WEAVER_ROUND_GRAPHS", "round")
        if self.round_graphs not in MODES:
            raise GenerationConfigError(f"WEAVER_ROUND_GRAPHS must be one of {MODES}, got {self.round_graphs!r}")
        if fast_decode is None:  # fused Triton decode kernels on CUDA when the model allows them
            fast_decode = on_cuda and os.environ.get("WEAVER_FAST_DECODE", "1") != "0"
            fast_decode = fast_decode and unsupported_reason(model) is None
        self.fast_decode = FastDecoder(model) if fast_decode else None
        self._caches: dict[int, ModelCache] = {}
        self._graphs: dict[tuple, GraphedStep] = {}

    # -- caches -------------------------------------------------------------------------------
    def cache_for(self, num_tokens: int) -> ModelCache:
        """A reset cache with room for `num_tokens` (rounded up to the capacity bucket)."""
        capacity = -(-num_tokens // CAPACITY_BUCKET) * CAPACITY_BUCKET
        if capacity not in self._caches:
            self._caches[capacity] = self.model.allocate_cache(1, capacity)
        cache = self._caches[capacity]
        cache.reset()
        return cache

    def _sync(self) -> None:
        if self.timing and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # -- prefill ------------------------------------------------------------------------------------
    def prefill(self, cache: ModelCache, prompt_ids: list[int]) -> torch.Tensor:
        """Run the prompt through the target; returns the logits [1, V] of its last position.

        Attention-only models pad the prompt to a power-of-two bucket (pad K/V land past the committed
        length, where nothing reads them) so that on CUDA each bucket is one captured graph. Models
        with GDN layers prefill eagerly at the exact length: a pad token would enter the recurrent state.
        """
        n = len(prompt_ids)
        if self.model.config.has_gdn:
            prompt = torch.tensor([prompt_ids], dtype=torch.long, device=self.device)
            return self.model(prompt, cache, last_only=True).logits[:, -1]
        bucket = min(max(PREFILL_MIN_BUCKET, 1 << (n - 1).bit_length()), cache.capacity)
        tokens = torch.zeros(1, bucket, dtype=torch.long, device=self.device)
        tokens[0, :n] = torch.tensor(prompt_ids, dtype=torch.long)
        count = torch.tensor([n], dtype=torch.long, device=self.device)

        def run(tokens: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
            start = cache.lengths.clone()
            out = self.model(tokens, cache, select=count[:, None] - 1)
            cache.lengths.copy_(start + count)  # the pads are not committed
            return out.logits[:, 0]

        if not self.use_cuda_graphs:
            return run(tokens, count)
        key = ("prefill", cache.capacity, bucket)
        if key not in self._graphs:
            self._graphs[key] = GraphedStep(run, tokens, count)
            cache.reset()
        return self._graphs[key](tokens, count)

    # -- autoregressive decoding ----------------------------------------------------------------
    def _decode_step(self, cache: ModelCache, params: SamplingParams, generator):
        """One token in, one token out (greedy argmax or an exact sample); graphed on CUDA."""

        fast = self.fast_decode

        def step(token: torch.Tensor) -> torch.Tensor:  # [1, 1] -> [1, 1]
            logits = fast(token, cache) if fast is not None else self.model(token, cache).logits[:, -1]
            return sample_next_token(logits, params, generator)[:, None]

        if not self.use_cuda_graphs:
            return step
        key = ("decode", cache.capacity, params)
        if key not in self._graphs:
            if self.compile and fast is None:  # fuse the small kernels of the torch step, then capture
                step = torch.compile(step, fullgraph=True, dynamic=False)
            self._graphs[key] = GraphedStep(step, torch.zeros(1, 1, dtype=torch.long, device=self.device))
            cache.reset()  # warm-up and capture advanced the cache; contents are reset, addresses kept
        return self._graphs[key]

    @torch.no_grad()
    def generate_ar(
        self,
        prompt_ids: list[int],
        max_new_tokens: int,
        params: SamplingParams,
        seed: int,
        stats: RoundStats,
    ) -> Iterator[list[int]]:
        """Yield one list of new token ids per round (one token per round for AR)."""
        cache = self.cache_for(len(prompt_ids) + max_new_tokens + 1)
        generator = self._generator(seed)
        step = self._decode_step(cache, params, generator)
        # 1) prefill
        t0 = time.perf_counter()
        logits = self.prefill(cache, prompt_ids)
        token = sample_next_token(logits, params, generator)[:, None]
        first = int(token)
        stats.add_time("prefill", time.perf_counter() - t0)
        yield [first]
        # 2) rounds: verify a one-node tree (the last token), accept the target's choice. Steps are
        # queued DECODE_LOOKAHEAD at a time; chunk n+1 is queued before chunk n's tokens are read back,
        # so the device never waits for the caller. The caller may stop early (extra tokens are dropped).
        remaining = max_new_tokens - 1
        # CPU: no device to keep busy, so one step per chunk and no look-ahead (nothing is wasted past EOS)
        on_cuda = self.device.type == "cuda"
        lookahead = DECODE_LOOKAHEAD if on_cuda else 1
        readback = ChunkReadback(lookahead, self.device)
        t_last = time.perf_counter()

        def queue_chunk() -> None:
            nonlocal token, remaining
            chunk = min(lookahead, remaining)
            ring = readback.ring()
            for i in range(chunk):
                token = step(token)
                ring[i : i + 1].copy_(token[0])
            readback.submit(chunk)
            remaining -= chunk

        if remaining > 0:
            queue_chunk()
        while readback.pending:
            if remaining > 0 and on_cuda:  # chunk n+1 runs on the device while the caller takes chunk n
                queue_chunk()
            values = readback.collect()
            now = time.perf_counter()
            stats.add_time("verify", now - t_last)  # wall time per chunk (overlaps the caller's work)
            t_last = now
            for value in values:
                stats.rounds += 1
                stats.emitted += 1
                yield [value]
            if remaining > 0 and not readback.pending:
                queue_chunk()

    @torch.no_grad()
    def generate_speculative(
        self,
        decoder,  # weaver.speculative.round.SpeculativeDecoder bound to this engine's model
        prompt_ids: list[int],
        max_new_tokens: int,
        cfg,  # weaver.speculative.round.SpecConfig
        seed: int,
        stats: RoundStats,
    ) -> Iterator[list[int]]:
        """Speculative rounds; the cache leaves room for one full tree past the committed tokens."""
        cache = self.cache_for(len(prompt_ids) + max_new_tokens + cfg.budget + 2)
        use_graphs = self.use_cuda_graphs and graphable(cfg, self.device)
        yield from decoder.generate(
            cache, prompt_ids, max_new_tokens, cfg, self._generator(seed), stats, use_graphs, self.timing,
            self.round_graphs,
        )

    def _generator(self, seed: int) -> torch.Generator | None:
        if self.device.type == "cuda":
            # Captured graphs draw from the default CUDA generator; seeding it makes runs repeatable.
            torch.cuda.manual_seed(seed)
            return None
        return torch.Generator(device=self.device).manual_seed(seed)
