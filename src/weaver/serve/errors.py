"""OpenAI-style error bodies for every failure, and the request-body size limit.

Every error a client can cause is an `APIError` with an HTTP status and the body
`{"error": {"message", "type", "param", "code"}}`, the shape the official `openai` client parses. FastAPI's own
validation and HTTP errors are rewritten into that shape, and anything unexpected becomes a 500 with the same
body (never a bare traceback or a hung connection).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("weaver.serve")


class APIError(Exception):
    """An error answered with `status` and an OpenAI-style body."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None) -> None:  # fmt: skip
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def invalid(message: str, param: str | None = None, code: str | None = None) -> APIError:
    """A 400 for a request that is well-formed JSON but asks for something wrong or unsupported."""
    return APIError(400, message, param=param, code=code)


def from_validation_error(exc: ValidationError | RequestValidationError) -> APIError:
    """The first pydantic error as a 400 naming the field (`messages.0.role`), as OpenAI does."""
    errors = exc.errors()
    if not errors:
        return invalid("invalid request body")
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if not _is_type_tag(str(p))]
    param = ".".join(loc) or None
    kind = first.get("type", "")
    if kind == "json_invalid":
        return invalid(f"the body is not valid JSON: {first.get('ctx', {}).get('error', first.get('msg'))}",
                       code="invalid_json")  # fmt: skip
    if kind == "extra_forbidden":
        return invalid(f"unrecognized request argument supplied: {param}", param=param, code="unknown_parameter")
    if kind == "missing":
        return invalid(f"missing required parameter: {param}", param=param, code="missing_parameter")
    message = f"{param}: {first.get('msg')}" if param else str(first.get("msg"))
    return invalid(message, param=param, code="invalid_value")


def _is_type_tag(part: str) -> bool:
    """A union member's tag in a pydantic error location (`str`, `list[TextPart]`), not a field name."""
    return part in ("body", "str", "int", "float", "bool", "dict", "list", "none") or "[" in part


def install_error_handlers(app: FastAPI, on_error: Callable[[APIError], None]) -> None:
    """Route every exception to an OpenAI-style body; `on_error` counts it (metrics)."""

    def answer(err: APIError) -> JSONResponse:
        on_error(err)
        return err.response()

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return answer(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return answer(from_validation_error(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        message = f"{request.method} {request.url.path}: {exc.detail}"
        return answer(APIError(exc.status_code, message, type=kind, headers=dict(exc.headers or {})))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error in %s %s", request.method, request.url.path)
        return answer(APIError(500, f"internal error: {type(exc).__name__}: {exc}", type="server_error"))


class BodyLimit:
    """ASGI middleware: a body over `max_bytes` gets a 413 before any of it is parsed.

    A declared Content-Length over the limit is refused at once; a chunked body is counted as it streams, and
    `receive` raises the 413 (answered by the APIError handler) as soon as it passes the limit.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, on_error: Callable[[APIError], None] = lambda err: None) -> None:
        self.app, self.max_bytes, self.on_error = app, max_bytes, on_error

    def too_large(self) -> APIError:
        return APIError(413, f"the request body exceeds the server's limit of {self.max_bytes} bytes",
                        code="body_too_large")  # fmt: skip

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                size = -1
            if size < 0 or size > self.max_bytes:
                err = self.too_large() if size > self.max_bytes else invalid("bad Content-Length header")
                self.on_error(err)
                await err.response()(scope, receive, send)
                return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise self.too_large()
            return message

        await self.app(scope, limited, send)
