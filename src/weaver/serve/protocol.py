"""Request bodies of the OpenAI API subset weaver serves, and the checks that turn one into generation arguments.

Models are strict (a string is not a number, a number not a bool) and forbid unknown fields: a sampling
parameter weaver does not implement gets a 400 naming it instead of being dropped silently. Parameters that
cannot change the output (`user`, `metadata`, ...) are accepted and ignored. The speculative extension is the
`weaver` object, in the request (`{"method", "budget", "verify"}`) and in the response (the statistics).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from weaver.errors import GenerationConfigError
from weaver.serve.config import ServeConfig
from weaver.serve.errors import APIError, invalid
from weaver.speculative.accept import resolve_rule
from weaver.speculative.sampling import SamplingParams

SEED_MOD = 1 << 63  # seeds reach torch.Generator.manual_seed reduced into its range
GREEDY_BELOW = 1e-5  # temperatures under this are served greedily (as vLLM does)


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class WeaverOptions(_Strict):
    """The request's speculative extension: which method, tree budget and verification rule."""

    method: str | None = None
    budget: int | None = Field(default=None, ge=1, le=1 << 16)
    verify: Literal["auto", "greedy", "target_only", "traversal", "chain_speculative"] | None = None


class StreamOptions(_Strict):
    include_usage: bool = False
    continuous_usage_stats: bool = False  # accepted for vLLM clients; usage comes once, at the end


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    """One turn; fields an SDK echoes back with an assistant turn (refusal, annotations, ...) are ignored."""

    model_config = ConfigDict(strict=True, extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class _Sampling(_Strict):
    """Fields shared by /v1/completions and /v1/chat/completions."""

    model: str
    max_tokens: int | None = Field(default=None, ge=1, le=1 << 40)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)  # -1 or 0: off
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=-(1 << 63), lt=1 << 64)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int | None = Field(default=None, ge=1, le=1 << 20)
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    weaver: WeaverOptions | None = None
    # accepted and ignored: they change nothing in the output
    user: str | None = None
    metadata: dict[str, Any] | None = None
    store: bool | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=1 << 40)
    logprobs: bool | None = None
    top_logprobs: int | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    functions: list[Any] | None = None
    function_call: Any = None


class CompletionRequest(_Sampling):
    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = None
    echo: bool | None = None
    suffix: str | None = None
    best_of: int | None = None


@dataclass
class Generation:
    """A checked request: everything `LLM.generate` needs, plus how to answer."""

    prompt: str | list[int] | list[dict[str, str]]  # completions: text or ids; chat: the messages
    template_kwargs: dict[str, Any]
    method: str
    budget: int
    verify: str
    temperature: float
    top_p: float
    top_k: int
    max_tokens: int | None  # None: the default, clipped to what the context leaves
    seed: int
    stop: list[str]
    stream: bool
    include_usage: bool


def _unsupported(param: str, what: str) -> APIError:
    return invalid(f"{param}: {what} is not supported by this server", param=param, code="unsupported_parameter")


def _common(req: _Sampling, cfg: ServeConfig) -> dict[str, Any]:
    """Checks shared by both endpoints; returns the generation arguments."""
    if req.model != cfg.model_id:
        raise APIError(404, f"the model {req.model!r} does not exist; this server serves {cfg.model_id!r}",
                       type="not_found_error", param="model", code="model_not_found")  # fmt: skip
    if req.n not in (None, 1):
        raise _unsupported("n", f"n={req.n} (one choice per request)")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(req, name) not in (None, 0.0):
            raise _unsupported(name, "a non-zero penalty")
    if req.logit_bias:
        raise _unsupported("logit_bias", "logit_bias")
    stops = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    limits = cfg.limits
    if len(stops) > limits.max_stop:
        raise invalid(f"stop: at most {limits.max_stop} stop strings, got {len(stops)}", param="stop")
    if any(len(s) > limits.max_stop_chars for s in stops):
        raise invalid(f"stop: each stop string has at most {limits.max_stop_chars} characters", param="stop")
    ext = req.weaver or WeaverOptions()
    method = ext.method or cfg.method
    if method not in cfg.methods:
        raise invalid(f"weaver.method: {method!r} is not served; choose one of {', '.join(cfg.methods)}",
                      param="weaver.method")  # fmt: skip
    budget = cfg.budget if ext.budget is None else ext.budget
    if method != "ar" and budget not in cfg.budgets:
        served = ", ".join(map(str, cfg.budgets))
        raise invalid(f"weaver.budget: {budget} is not served (no warmed-up graph); choose one of {served} or "
                      "restart the server with --budgets", param="weaver.budget")  # fmt: skip
    temperature = cfg.sampling_default("temperature", 1.0) if req.temperature is None else req.temperature
    if temperature < GREEDY_BELOW:  # logits / 1e-300 overflow to inf: such a temperature is greedy in all but name
        temperature = 0.0
    top_k = int(cfg.sampling_default("top_k", 0)) if req.top_k is None else max(req.top_k, 0)  # -1: none (vLLM)
    top_p = cfg.sampling_default("top_p", 1.0) if req.top_p is None else req.top_p
    if temperature == 0.0:  # greedy: top_p / top_k change nothing; one configuration, one captured round
        top_p, top_k = 1.0, 0
    verify = ext.verify or "auto"
    try:  # the engine's own checks, before the request is queued (a stream has not started yet)
        resolve_rule(verify, SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k), method)
    except GenerationConfigError as exc:
        raise invalid(str(exc), param="weaver.verify") from None
    seed = secrets.randbelow(SEED_MOD) if req.seed is None else req.seed % SEED_MOD
    include_usage = bool(req.stream and req.stream_options and req.stream_options.include_usage)
    return dict(method=method, budget=budget, verify=verify, temperature=temperature, top_p=top_p,
                top_k=top_k, seed=seed, stop=stops, stream=req.stream, include_usage=include_usage)  # fmt: skip


def check_chat(req: ChatCompletionRequest, cfg: ServeConfig) -> Generation:
    """A chat request's arguments, or a 4xx naming the first problem."""
    args = _common(req, cfg)
    if req.logprobs or req.top_logprobs:
        raise _unsupported("logprobs", "logprobs")
    for name in ("tools", "functions"):
        if getattr(req, name):
            raise _unsupported(name, "tool calling")
    for name in ("tool_choice", "function_call"):
        if getattr(req, name) not in (None, "none"):
            raise _unsupported(name, "tool calling")
    if req.response_format is not None and req.response_format.get("type") != "text":
        raise _unsupported("response_format", f"response_format {req.response_format.get('type')!r}")
    if req.max_tokens is not None and req.max_completion_tokens is not None \
            and req.max_tokens != req.max_completion_tokens:  # fmt: skip
        raise invalid("max_tokens and max_completion_tokens disagree; give one", param="max_completion_tokens")
    messages = []
    for i, msg in enumerate(req.messages):
        if msg.role in ("tool", "function"):
            raise invalid(f"messages.{i}.role: {msg.role!r} messages are not supported (no tool calling)",
                          param=f"messages.{i}.role")  # fmt: skip
        role = "system" if msg.role == "developer" else msg.role
        messages.append({"role": role, "content": msg.text()})
    if not any(m["content"].strip() for m in messages):
        raise invalid("messages: every message is empty", param="messages")
    return Generation(prompt=messages, template_kwargs=dict(req.chat_template_kwargs or {}),
                      max_tokens=req.max_completion_tokens or req.max_tokens, **args)  # fmt: skip


def check_completion(req: CompletionRequest, cfg: ServeConfig) -> Generation:
    """A completion request's arguments, or a 4xx naming the first problem."""
    args = _common(req, cfg)
    if req.logprobs is not None:
        raise _unsupported("logprobs", "logprobs")
    if req.echo:
        raise _unsupported("echo", "echo")
    if req.suffix:
        raise _unsupported("suffix", "suffix")
    if req.best_of not in (None, 1):
        raise _unsupported("best_of", f"best_of={req.best_of}")
    prompt: Any = req.prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        if len(prompt) != 1:
            raise _unsupported("prompt", f"a batch of {len(prompt)} prompts (send one per request)")
        prompt = prompt[0]
    if (isinstance(prompt, str) and not prompt.strip()) or (isinstance(prompt, list) and not prompt):
        raise invalid("prompt: the prompt is empty", param="prompt")
    return Generation(prompt=prompt, template_kwargs={}, max_tokens=req.max_tokens, **args)
