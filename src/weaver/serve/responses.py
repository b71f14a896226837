"""Response bodies and SSE chunks in OpenAI's shapes, plus the `weaver` statistics extension.

Streams send `data: {chunk}\\n\\n` events: chat opens with a `role` delta, then content deltas, then a chunk with
the finish_reason (and the `weaver` statistics), then, with `stream_options.include_usage`, a chunk with empty
`choices` and the usage, and finally `data: [DONE]`.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from weaver.serve.protocol import Generation

_COMPACT = (",", ":")
FINISH = {"eos": "stop", "stop": "stop", "length": "length", "cancelled": "stop"}


def new_id(kind: str) -> str:
    return f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}  # fmt: skip


def weaver_stats(out: Any, gen: Generation, queue_s: float, ttft_s: float | None) -> dict[str, Any]:
    """The per-request speculative statistics (the response's `weaver` field).

    accepted_per_depth[d-1] counts the drafts accepted at tree depth d over all rounds (a round that accepted k
    drafts adds one at depths 1..k); rounds_by_accepted[k] counts the rounds that accepted exactly k.
    """
    s = out.stats
    by_accepted = list(s.accepted_per_depth)  # the engine's histogram: index k = rounds that accepted k drafts
    per_depth = [sum(by_accepted[d:]) for d in range(1, len(by_accepted))]
    return {
        "method": gen.method,
        "budget": 0 if gen.method == "ar" else gen.budget,
        "verify": gen.verify,
        "tau": round(s.tau, 4),
        "rounds": s.rounds,
        "accepted_tokens": sum(per_depth),
        "accepted_per_depth": per_depth,
        "rounds_by_accepted": by_accepted,
        "tokens_per_s": round(s.tokens_per_s, 3),
        "generation_s": round(s.seconds, 6),
        "queue_s": round(queue_s, 6),
        "time_to_first_token_s": None if ttft_s is None else round(ttft_s, 6),
        "finish_reason": s.finish_reason,
    }


def completion_body(kind: str, rid: str, model: str, text: str, finish: str, use: dict, stats: dict) -> dict:
    """A whole (non-streamed) response."""
    if kind == "chat":
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                  "finish_reason": finish}  # fmt: skip
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        obj = "text_completion"
    return {"id": rid, "object": obj, "created": int(time.time()), "model": model, "choices": [choice],
            "usage": use, "weaver": stats}  # fmt: skip


class ChunkWriter:
    """SSE events of one stream (same id and timestamp in every chunk, as OpenAI sends them)."""

    def __init__(self, kind: str, rid: str, model: str, include_usage: bool) -> None:
        self.kind, self.rid, self.model, self.include_usage = kind, rid, model, include_usage
        self.created = int(time.time())

    def _chunk(self, choices: list[dict], **extra: Any) -> str:
        obj = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        body = {"id": self.rid, "object": obj, "created": self.created, "model": self.model, "choices": choices}
        if self.include_usage:
            body["usage"] = None
        body.update(extra)
        return f"data: {json.dumps(body, ensure_ascii=False, separators=_COMPACT)}\n\n"

    def _choice(self, text: str | None, finish: str | None, role: bool = False) -> dict:
        if self.kind == "chat":
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
            if text is not None:
                delta["content"] = text
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}

    def opening(self) -> str | None:
        """Chat's first chunk names the role; completions have none."""
        return self._chunk([self._choice(None, None, role=True)]) if self.kind == "chat" else None

    def text(self, text: str) -> str:
        return self._chunk([self._choice(text, None)])

    def finish(self, finish: str, stats: dict) -> str:
        return self._chunk([self._choice(None if self.kind == "chat" else "", finish)], weaver=stats)

    def usage(self, use: dict) -> str:
        return self._chunk([], usage=use)

    @staticmethod
    def error(body: dict) -> str:
        return f"data: {json.dumps(body)}\n\n"

    @staticmethod
    def done() -> str:
        return "data: [DONE]\n\n"
