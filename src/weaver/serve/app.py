"""The FastAPI application: routes, the request path from body to queue to response, and its lifespan.

A generation request is read as raw bytes (so malformed JSON and the size limit are ours to answer), validated
(`protocol`), turned into prompt ids (`prompts`), queued (`worker`), and answered whole or as SSE
(`responses`). A client that goes away sets the job's cancel flag: for a plain request a task watches the
connection, for a stream the response generator is closed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from weaver.serve.config import ServeConfig
from weaver.serve.errors import APIError, BodyLimit, from_validation_error, install_error_handlers
from weaver.serve.metrics import Metrics
from weaver.serve.prompts import completion_budget, prompt_ids
from weaver.serve.protocol import ChatCompletionRequest, CompletionRequest, Generation, check_chat, check_completion
from weaver.serve.responses import FINISH, ChunkWriter, completion_body, new_id, usage, weaver_stats
from weaver.serve.worker import EngineWorker, Job

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics")


class _CountStatus:
    """ASGI middleware: weaver_requests_total{endpoint,status} for every response (unknown paths: "other")."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        endpoint = path if path in ENDPOINTS else "other"

        async def counted(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.metrics.requests.labels(endpoint, str(message["status"])).inc()
            await send(message)

        await self.app(scope, receive, counted)


def create_app(llm: Any, cfg: ServeConfig, metrics: Metrics | None = None) -> FastAPI:
    """The server for one loaded `weaver.LLM`; the engine warms up when the app starts."""
    metrics = metrics or Metrics()
    worker = EngineWorker(llm, cfg, metrics)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        worker.start()
        yield
        await worker.stop()

    app = FastAPI(title="weaver", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.worker, app.state.metrics = worker, metrics

    def count_error(err: APIError) -> None:
        metrics.errors.labels(err.code or err.type).inc()

    install_error_handlers(app, count_error)
    app.add_middleware(BodyLimit, max_bytes=cfg.limits.max_body_bytes, on_error=count_error)
    app.add_middleware(_CountStatus, metrics=metrics)

    @app.get("/health")
    async def health() -> JSONResponse:
        if worker.warmup_error is not None:
            return JSONResponse({"status": "error", "error": str(worker.warmup_error)}, status_code=503)
        if not worker.ready:
            return JSONResponse({"status": "warming up"}, status_code=503, headers={"Retry-After": "1"})
        return JSONResponse({"status": "ok", "queue_depth": worker.queue.qsize()})

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def models() -> dict:
        card = {"id": cfg.model_id, "object": "model", "created": int(time.time()), "owned_by": "weaver",
                "max_model_len": cfg.context_len, "weaver": {"methods": list(cfg.methods),
                                                             "budgets": list(cfg.budgets)}}  # fmt: skip
        return {"object": "list", "data": [card]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        req = await _parse(request, ChatCompletionRequest)
        return await _generate(request, "chat", check_chat(req, cfg))

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        req = await _parse(request, CompletionRequest)
        return await _generate(request, "text", check_completion(req, cfg))

    async def _generate(request: Request, kind: str, gen: Generation) -> Response:
        ids = prompt_ids(llm, gen.prompt, gen.template_kwargs)
        max_tokens = completion_budget(ids, gen.max_tokens, cfg, "messages" if kind == "chat" else "prompt")
        rid = new_id(kind)
        job = Job(gen=gen, ids=ids, max_tokens=max_tokens, loop=asyncio.get_running_loop(), rid=rid)
        worker.submit(job)
        if gen.stream:
            writer = ChunkWriter(kind, rid, cfg.model_id, gen.include_usage)
            return StreamingResponse(_stream(job, writer), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})  # fmt: skip
        watcher = asyncio.create_task(_watch_disconnect(request, job))
        try:
            text: list[str] = []
            while True:
                event, value = await job.events.get()
                if event == "text":
                    text.append(value)
                elif event == "done":
                    stats, use = _finished(job, value)
                    finish = FINISH[value.stats.finish_reason]
                    return JSONResponse(completion_body(kind, rid, cfg.model_id, "".join(text), finish, use, stats))
                elif event == "error":
                    raise value
                else:  # cancelled before it started: the client is gone, nobody reads this
                    return _client_gone()
        finally:  # answered, or this handler was cancelled (shutdown timeout): the generation must not run on
            watcher.cancel()
            job.cancel.set()

    async def _stream(job: Job, writer: ChunkWriter) -> AsyncIterator[str]:
        try:
            opening = writer.opening()
            if opening is not None:
                yield opening
            while True:
                event, value = await job.events.get()
                if event == "text":
                    yield writer.text(value)
                elif event == "done":
                    stats, use = _finished(job, value)
                    yield writer.finish(FINISH[value.stats.finish_reason], stats)
                    if writer.include_usage:
                        yield writer.usage(use)
                    yield writer.done()
                    return
                elif event == "error":
                    count_error(value)
                    yield writer.error(value.body())
                    yield writer.done()
                    return
                else:
                    return
        finally:  # the stream ended, or its client left (the generator is closed): stop at the next round
            job.cancel.set()

    def _finished(job: Job, out: Any) -> tuple[dict, dict]:
        """A finished generation's `weaver` statistics and usage (its metrics are recorded by the worker)."""
        ttft = None if job.first_text is None else job.first_text - job.arrived
        queue_s = (job.started or job.arrived) - job.arrived
        return weaver_stats(out, job.gen, queue_s, ttft), usage(len(job.ids), out.stats.new_tokens)

    return app


async def _parse(request: Request, model: type[BaseModel]) -> Any:
    """The body validated as `model`: malformed JSON, a wrong type or a missing field are 400s."""
    body = await request.body()
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise from_validation_error(exc) from None


async def _watch_disconnect(request: Request, job: Job) -> None:
    """Set the job's cancel flag when the client closes the connection (the body is already read)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            job.cancel.set()
            return


def _client_gone() -> Response:
    return JSONResponse(APIError(499, "the client closed the request", code="client_disconnected").body(),
                        status_code=499)  # fmt: skip
