"""The bounded queue in front of the engine and the one thread that runs it.

The engine is single-threaded and serves one request at a time (batch 1), so requests wait in an asyncio queue
of bounded size (full: 429) and one task feeds them, in arrival order, to a one-thread executor. A job's
`cancel` flag (a client that went away, a shutdown) is checked by `LLM.generate` after every round, so a
cancelled generation frees the engine within one round; a job cancelled while still queued never starts.
Text reaches the event loop through `call_soon_threadsafe` as the rounds produce it (SSE streaming).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from weaver.errors import WeaverError
from weaver.serve.config import ServeConfig
from weaver.serve.errors import APIError, invalid
from weaver.serve.metrics import Metrics
from weaver.serve.protocol import Generation

log = logging.getLogger("weaver.serve")

WARMUP_TOKENS = 4  # tokens per warm-up generation: enough to run (and capture) the configuration's round


@dataclass
class Job:
    """One request on its way through the queue; `events` carries ("text", str) then one terminal event:
    ("done", GenerationOutput), ("error", APIError) or ("cancelled", None)."""

    gen: Generation
    ids: list[int]
    max_tokens: int
    loop: asyncio.AbstractEventLoop
    rid: str = ""  # the response's id, so the server log's lines match what the client got
    arrived: float = field(default_factory=time.perf_counter)
    cancel: threading.Event = field(default_factory=threading.Event)
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    started: float | None = None
    first_text: float | None = None
    last_text: float | None = None
    shut_down: bool = False  # cancelled by the server's shutdown, not by its client: answered with a 503

    def put(self, kind: str, value: Any = None) -> None:
        """Hand an event to the event loop (safe from the engine thread)."""
        self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))


class EngineWorker:
    """Owns the queue, the engine thread and the warm-up; `ready` turns True once every served configuration
    has run once (graphs captured), before which requests wait in the queue."""

    def __init__(self, llm: Any, cfg: ServeConfig, metrics: Metrics) -> None:
        self.llm, self.cfg, self.metrics = llm, cfg, metrics
        self.queue: asyncio.Queue[Job] = asyncio.Queue(maxsize=cfg.limits.max_queue)
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="weaver-engine")
        self.ready = False
        self.current: Job | None = None
        self.warmup_error: BaseException | None = None
        self._stopping = threading.Event()
        self._task: asyncio.Task | None = None

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._serve())

    def drain(self, grace_s: float) -> None:
        """Shutdown begins: refuse new jobs (503) and, after `grace_s`, cancel what still runs or waits (each is
        answered with a 503; the running one stops at its next round)."""
        self._stopping.set()
        asyncio.get_running_loop().call_later(grace_s, self._shut_down_jobs)

    def _shut_down_jobs(self) -> None:
        jobs = [self.current] if self.current is not None else []
        while not self.queue.empty():
            jobs.append(self.queue.get_nowait())
        for job in jobs:
            job.shut_down = True
            job.cancel.set()
            if job is not self.current:  # the running one is counted (and answered) when its round ends
                self.metrics.errors.labels("cancelled").inc()
                job.put("error", _shutting_down())
        self.metrics.queue_depth.set(0)
        if jobs:
            log.warning("shutdown: cancelled %d request(s) still running or queued after the grace period", len(jobs))

    async def stop(self) -> None:
        """Cancel what is queued and the running generation (it stops at its next round), then end the thread."""
        self._stopping.set()
        while not self.queue.empty():
            job = self.queue.get_nowait()
            job.cancel.set()
            self.metrics.errors.labels("cancelled").inc()
            job.put("cancelled")
        if self.current is not None:
            self.current.cancel.set()
        if self._task is not None:
            self._task.cancel()
        await asyncio.get_running_loop().run_in_executor(None, self.executor.shutdown, True)
        self.metrics.queue_depth.set(0)

    def submit(self, job: Job) -> None:
        """Queue a job, or a 429 (with Retry-After) when the queue is full."""
        if self._stopping.is_set():
            raise _shutting_down()
        if self.warmup_error is not None:
            raise _not_ready(self.warmup_error)
        try:
            self.queue.put_nowait(job)
        except asyncio.QueueFull:
            raise APIError(429, f"the queue is full ({self.cfg.limits.max_queue} requests waiting); retry later",
                           type="rate_limit_error", code="queue_full",
                           headers={"Retry-After": str(self.cfg.limits.retry_after_s)}) from None  # fmt: skip
        self.metrics.queue_depth.set(self.queue.qsize())

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self.executor, self._warmup)
        except Exception as exc:  # keep answering /health (503) with the reason instead of dying silently
            self.warmup_error = exc
            log.exception("warm-up failed")
            while not self.queue.empty():
                self.queue.get_nowait().put("error", _not_ready(exc))
            self.metrics.queue_depth.set(0)
            return
        self.ready = True
        self.metrics.ready.set(1)
        while True:
            job = await self.queue.get()
            self.metrics.queue_depth.set(self.queue.qsize())
            if job.cancel.is_set():
                self.metrics.errors.labels("cancelled").inc()
                job.put("cancelled")
                continue
            self.current = job
            self.metrics.running.set(1)
            try:
                await loop.run_in_executor(self.executor, self._generate, job)
            finally:
                self.current = None
                self.metrics.running.set(0)

    # -- the engine thread --------------------------------------------------------------------------
    def _warmup(self) -> None:
        """One short generation per served (method, budget), greedy and sampled where graphs are captured, and
        on CUDA graphs one prefill per prompt-length bucket and configuration: no request pays for a capture."""
        llm, cfg = self.llm, self.cfg
        graphs = llm.engine.cuda_graphs != "off"
        ids = llm.tokenizer.encode("Warm-up: hello!")[:8] if llm.tokenizer is not None else [1] * 8
        temperatures = (0.0, 1.0) if graphs else (0.0,)
        for method, budget in cfg.configurations():
            for temperature in temperatures:
                if self._stopping.is_set():
                    return
                t0 = time.perf_counter()
                llm.generate(ids, method=method, budget=max(budget, 1), temperature=temperature, chat=False,
                             max_new_tokens=WARMUP_TOKENS, ignore_eos=True, seed=0)  # fmt: skip
                log.info("warm-up: %s budget %d T=%g in %.2f s", method, budget, temperature, time.perf_counter() - t0)
        # prefills are captured per power-of-two prompt bucket: AR's and each greedy speculative round's, on
        # attention-only targets (a hybrid's prefill runs eager at the prompt's length: nothing to capture)
        bucketed = graphs and not llm.model.config.has_gdn
        for method, budget in cfg.configurations() if bucketed else []:
            n = 16
            while not self._stopping.is_set():
                length = min(n, cfg.context_len - 1)
                llm.generate([ids[0]] * length, method=method, budget=max(budget, 1), temperature=0.0, chat=False,
                             max_new_tokens=1, seed=0)  # fmt: skip
                if length < n:
                    break
                n *= 2
        self.captures_after_warmup = llm.engine.captured_count
        log.info("warm-up done: %d captured graphs", self.captures_after_warmup)

    def _generate(self, job: Job) -> None:
        """Run one job to its end (or its cancel flag) and post its terminal event."""
        g = job.gen
        job.started = time.perf_counter()
        self.metrics.queue_wait.observe(job.started - job.arrived)
        log.info("request %s started after %.3f s in the queue (%d prompt tokens, at most %d new, method %s)",
                 job.rid, job.started - job.arrived, len(job.ids), job.max_tokens, g.method)  # fmt: skip
        before = self.llm.engine.captured_count
        try:
            out = self.llm.generate(
                job.ids, method=g.method, budget=g.budget, temperature=g.temperature, top_p=g.top_p, top_k=g.top_k,
                max_new_tokens=job.max_tokens, seed=g.seed, chat=False, stop=g.stop, verify=g.verify,
                on_text=lambda text: self._on_text(job, text), should_stop=job.cancel.is_set,
            )  # fmt: skip
        except WeaverError as exc:  # a request the checks let through but the engine refuses: still the client's
            job.put("error", invalid(str(exc)))
            return
        except Exception as exc:
            log.exception("generation failed")
            job.put("error", APIError(500, f"generation failed: {type(exc).__name__}: {exc}", type="server_error"))
            return
        finally:
            new = self.llm.engine.captured_count - before
            if new:
                self.metrics.captures.inc(new)
                log.warning("captured %d new graph(s) for method %s, T=%g, top_p=%g, top_k=%d (not warmed up)",
                            new, g.method, g.temperature, g.top_p, g.top_k)  # fmt: skip
        self._record(job, out)
        log.info("request %s finished (%s): %d new tokens in %.3f s", job.rid, out.stats.finish_reason,
                 out.stats.new_tokens, time.perf_counter() - job.started)  # fmt: skip
        if out.stats.finish_reason == "cancelled":
            self.metrics.errors.labels("cancelled").inc()
            if job.shut_down:
                job.put("error", _shutting_down())
                return
        job.put("done", out)

    def _record(self, job: Job, out: Any) -> None:
        """Token counts, tau and latency of every generation, cancelled ones included (nobody may be listening)."""
        m = self.metrics
        m.prompt_tokens.inc(len(job.ids))
        m.generation_tokens.inc(out.stats.new_tokens)
        if out.stats.rounds:
            m.tau.observe(out.stats.tau)
        m.e2e.observe(time.perf_counter() - job.arrived)

    def _on_text(self, job: Job, text: str) -> None:
        now = time.perf_counter()
        if job.first_text is None:
            job.first_text = now
            self.metrics.ttft.observe(now - job.arrived)
        else:
            self.metrics.itl.observe(now - job.last_text)
        job.last_text = now
        job.put("text", text)


def _shutting_down() -> APIError:
    return APIError(503, "the server is shutting down; retry elsewhere", type="service_unavailable",
                    code="shutting_down")  # fmt: skip


def _not_ready(exc: BaseException) -> APIError:
    return APIError(503, f"the engine failed to warm up: {type(exc).__name__}: {exc}", type="service_unavailable",
                    code="engine_unavailable")  # fmt: skip
