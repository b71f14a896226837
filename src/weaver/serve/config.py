"""What a server serves and the limits it enforces (all set from `weaver serve` flags)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Limits:
    """Bounds on one request and on the queue; a request past any of them gets a 4xx, never a 500."""

    max_queue: int = 32  # requests waiting behind the running one; one more gets 429 + Retry-After
    max_body_bytes: int = 1 << 20  # larger request bodies get 413
    max_tokens: int | None = None  # per-request cap on max_tokens (None: the context window)
    default_max_tokens: int = 256  # when a request names none (clipped to what the context has left)
    max_stop: int = 8  # stop strings per request
    max_stop_chars: int = 256  # characters per stop string
    retry_after_s: int = 1  # the Retry-After of a 429
    shutdown_timeout_s: float = 30.0  # SIGTERM: in-flight requests get this long to finish, then are cancelled


@dataclass(frozen=True)
class ServeConfig:
    """The served model's id and which speculative configurations requests may pick (all warmed at start)."""

    model_id: str  # the `model` requests must name (and /v1/models lists)
    context_len: int  # prompt + completion tokens a request may use
    method: str  # default method
    budget: int  # default budget
    methods: tuple[str, ...]  # methods a request may pick
    budgets: tuple[int, ...]  # budgets a request may pick (speculative methods)
    limits: Limits = field(default_factory=Limits)
    eos_token_ids: tuple[int, ...] = ()
    # what a request that leaves temperature / top_p / top_k unset gets: the checkpoint's generation_config.json
    # values (as vLLM serves them), else OpenAI's defaults (temperature 1, top_p 1, no top-k)
    sampling_defaults: tuple[tuple[str, float], ...] = ()

    def sampling_default(self, name: str, openai_default: float) -> float:
        """The value of sampling parameter `name` for a request that does not set it."""
        return dict(self.sampling_defaults).get(name, openai_default)

    def configurations(self) -> list[tuple[str, int]]:
        """Every (method, budget) a request may select: ar has one, the others one per budget."""
        return [(m, 0 if m == "ar" else b) for m in self.methods for b in (self.budgets if m != "ar" else (0,))]
