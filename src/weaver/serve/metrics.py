"""Prometheus metrics of one server, in a registry of its own (two apps in one process do not collide).

Names (all prefixed `weaver_`): requests_total{endpoint,status}, errors_total{type}, prompt_tokens_total,
generation_tokens_total, request_tau (histogram), time_to_first_token_seconds, inter_token_latency_seconds,
e2e_request_latency_seconds, queue_wait_seconds, queue_depth, requests_running, graph_captures_total, ready.
Inter-token latency is the gap between text chunks: a speculative round's tokens arrive together.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48)
_E2E = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)
_TAU = (1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0)


class Metrics:
    """The server's counters, gauges and histograms; `render` is the /metrics body."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter("weaver_requests", "Requests answered, by endpoint and HTTP status (499: the "
                                "client went away)", ["endpoint", "status"], registry=r)  # fmt: skip
        self.errors = Counter("weaver_errors", "Error responses by OpenAI error code or type; `cancelled`: "
                              "generations stopped because their client left (or at shutdown)", ["type"],
                              registry=r)  # fmt: skip
        self.prompt_tokens = Counter("weaver_prompt_tokens", "Prompt tokens of generation requests", registry=r)
        self.generation_tokens = Counter("weaver_generation_tokens", "Tokens generated", registry=r)
        self.tau = Histogram("weaver_request_tau", "Tokens per target verify pass of a request (bonus included)",
                             buckets=_TAU, registry=r)  # fmt: skip
        self.ttft = Histogram("weaver_time_to_first_token_seconds", "Arrival to first text, queueing included",
                              buckets=_LATENCY, registry=r)  # fmt: skip
        self.itl = Histogram("weaver_inter_token_latency_seconds", "Gap between consecutive text chunks",
                             buckets=_LATENCY, registry=r)  # fmt: skip
        self.e2e = Histogram("weaver_e2e_request_latency_seconds", "Arrival to the last token", buckets=_E2E,
                             registry=r)  # fmt: skip
        self.queue_wait = Histogram("weaver_queue_wait_seconds", "Arrival to the start of generation",
                                    buckets=_E2E, registry=r)  # fmt: skip
        self.queue_depth = Gauge("weaver_queue_depth", "Requests waiting for the engine", registry=r)
        self.running = Gauge("weaver_requests_running", "Requests the engine is generating (0 or 1)", registry=r)
        self.captures = Counter("weaver_graph_captures", "CUDA graphs captured after warm-up (a new sampling "
                                "configuration); 0 when every request hits a warmed graph", registry=r)  # fmt: skip
        self.ready = Gauge("weaver_ready", "1 once the warm-up is done", registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
