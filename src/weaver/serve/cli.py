"""`weaver serve`: load the model, build the app, run uvicorn until SIGTERM / SIGINT, exit 0.

Examples (CPU-sized):
    weaver serve                                               # SmolLM2 on 127.0.0.1:8000, method auto
    weaver serve --model tiny-cfg.json --random-weights --drafter random --adapter random --method weaver
The model loads before the socket opens, so a bad --model is one `error:` line and exit code 2; the warm-up
runs after it opens (`/health` answers 503 until it is done, and requests wait in the queue meanwhile).
"""

from __future__ import annotations

import argparse
import logging
import signal

from weaver.argtypes import positive_int
from weaver.errors import GenerationConfigError
from weaver.options import add_runtime_arguments, runtime_options
from weaver.serve.config import Limits, ServeConfig

METHODS = ("ar", "chain", "ddtree", "weaver")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="smollm2", help="registry name or HF-format directory (default smollm2)")
    p.add_argument("--random-weights", action="store_true",
                   help="treat --model as a preset name or config.json and use random weights (tests, timing)")
    p.add_argument("--served-model-name", default=None, help="the id requests name in `model` (default: --model)")
    p.add_argument("--drafter", default="auto",
                   help="auto (the drafter weaver ships for the model, if any), a checkpoint dir, 'random[:layers]' "
                        "or none")
    p.add_argument("--adapter", default="auto",
                   help="auto (the adapter weaver ships, if any), a checkpoint dir or .pth, 'random[:width]' or none")
    p.add_argument("--draft-vocab", default=None, metavar="TOKEN_MAP",
                   help="the drafter scores only this token map's tokens (`weaver data token-map`; README)")
    p.add_argument("--method", default="auto", choices=["auto", *METHODS],
                   help="default method (auto: weaver with a drafter and an adapter, ddtree with a drafter, else ar)")
    p.add_argument("--budget", type=positive_int, default=64, help="default tree budget (non-root nodes per round)")
    p.add_argument("--methods", nargs="+", default=None, choices=METHODS,
                   help="methods a request may pick in weaver.method (default: all the loaded draft models allow)")
    p.add_argument("--budgets", nargs="+", type=positive_int, default=None,
                   help="budgets a request may pick in weaver.budget (default: --budget); each is warmed up")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port to bind (default 8000)")
    p.add_argument("--max-model-len", type=int, default=None, help="context window (default: the model's)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--dtype", default=None, help="fp32, bf16 or fp16 (default: bf16 on cuda, fp32 on cpu)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights / draft models")
    g = p.add_argument_group("limits (a request past one gets a 4xx with an OpenAI-style error body)")
    d = Limits()
    g.add_argument("--max-queue", type=positive_int, default=d.max_queue,
                   help=f"requests waiting behind the running one; more get 429 (default {d.max_queue})")
    g.add_argument("--max-body-bytes", type=positive_int, default=d.max_body_bytes,
                   help=f"request body limit, 413 above (default {d.max_body_bytes})")
    g.add_argument("--max-tokens-limit", type=positive_int, default=None, help="cap on a request's max_tokens "
                   "(default: the context)")  # fmt: skip
    g.add_argument("--default-max-tokens", type=positive_int, default=d.default_max_tokens,
                   help=f"max_tokens of a request that names none (default {d.default_max_tokens})")
    g.add_argument("--max-stop", type=int, default=d.max_stop, help=f"stop strings per request (default {d.max_stop})")
    g.add_argument("--retry-after", type=positive_int, default=d.retry_after_s, help="Retry-After seconds of a 429")
    g.add_argument("--shutdown-timeout", type=float, default=d.shutdown_timeout_s,
                   help=f"seconds in-flight requests get to finish after SIGTERM before they are cancelled "
                        f"(default {d.shutdown_timeout_s:g})")  # fmt: skip
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument("--access-log", action="store_true", help="log every request (uvicorn's access log)")
    add_runtime_arguments(p)


def load_llm(args: argparse.Namespace):
    """The LLM named by the flags (a WeaverError for a bad --model, drafter or adapter)."""
    import weaver

    kw = dict(device=args.device, dtype=args.dtype, seed=args.seed, drafter=args.drafter, adapter=args.adapter,
              max_model_len=args.max_model_len, options=runtime_options(args),
              draft_vocab=args.draft_vocab)  # fmt: skip
    if args.random_weights:
        return weaver.LLM.from_config(args.model, random_weights=True, **kw)
    return weaver.LLM(args.model, **kw)


def serve_config(args: argparse.Namespace, llm) -> ServeConfig:
    """Methods, budgets and limits from the flags, checked against what the loaded model can do."""
    if llm.tokenizer is None:
        raise GenerationConfigError(
            f"{args.model} has no tokenizer (a random model with a vocabulary under 256): give a config with "
            "vocab_size >= 256 (byte tokenizer) or a checkpoint")  # fmt: skip
    available = tuple(m for m in METHODS if m == "ar" or (llm.drafter is not None and (m != "weaver" or
                                                                                        llm.adapter is not None)))
    method = args.method
    if method == "auto":
        method = "weaver" if "weaver" in available else "ddtree" if "ddtree" in available else "ar"
    methods = tuple(args.methods or available)
    missing = [m for m in (method, *methods) if m not in available]
    if missing:
        needs = "a drafter and an adapter" if missing[0] == "weaver" else "a drafter"
        raise GenerationConfigError(f"method {missing[0]!r} needs {needs} (--drafter / --adapter); this model can "
                                    f"serve {', '.join(available)}")  # fmt: skip
    if method not in methods:
        methods = (method, *methods)
    budgets = tuple(dict.fromkeys(args.budgets or [args.budget]))
    if args.budget not in budgets:
        budgets = (args.budget, *budgets)
    limits = Limits(max_queue=args.max_queue, max_body_bytes=args.max_body_bytes, max_tokens=args.max_tokens_limit,
                    default_max_tokens=args.default_max_tokens, max_stop=args.max_stop, retry_after_s=args.retry_after,
                    shutdown_timeout_s=args.shutdown_timeout)  # fmt: skip
    return ServeConfig(model_id=args.served_model_name or args.model, context_len=llm.context_len, method=method,
                       budget=args.budget, methods=methods, budgets=budgets, limits=limits,
                       eos_token_ids=tuple(llm.eos_token_ids),
                       sampling_defaults=tuple(sorted(llm.generation_defaults.items())))  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Load, then serve until a signal; in-flight requests finish (or are cancelled after the timeout)."""
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import uvicorn

    from weaver.serve.app import create_app

    llm = load_llm(args)
    cfg = serve_config(args, llm)
    if llm.engine.cuda_graphs != "off":  # one cache capacity: a long prompt never captures a new graph
        llm.engine.min_capacity = cfg.context_len + max(cfg.budgets) + 2
    logging.getLogger("weaver.serve").info(
        "serving %s (context %d) on http://%s:%d: default %s budget %d; methods %s; budgets %s", cfg.model_id,
        cfg.context_len, args.host, args.port, cfg.method, cfg.budget, ",".join(cfg.methods),
        ",".join(map(str, cfg.budgets)))  # fmt: skip
    app = create_app(llm, cfg)
    grace = cfg.limits.shutdown_timeout_s
    # uvicorn's own timeout is a backstop: the worker answers what is left with 503s when the grace period ends
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level, lifespan="on",
                            access_log=args.access_log, timeout_graceful_shutdown=grace + 10)  # fmt: skip

    class Server(uvicorn.Server):
        async def shutdown(self, sockets=None) -> None:
            app.state.worker.drain(grace)
            await super().shutdown(sockets)

    server = Server(config)
    # uvicorn re-raises the signal it stopped for once it is done, with the handlers it found installed:
    # these make that a no-op, so a SIGTERM'd server exits 0 after its graceful shutdown.
    caught: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: caught.append(signum))
    server.run()
    return 0 if server.started else 1
