"""`weaver` command line.

Examples (CPU-sized):
    weaver models pull smollm2
    weaver models list
    weaver generate "Why is the sky blue?" --max-new-tokens 64
    weaver generate "Once upon a time" --no-chat --temperature 0.8 --seed 1
    weaver generate "What is 17 * 23?" --model /path/to/Qwen3.6-27B --no-thinking
    weaver generate "Why is the sky blue?" --method weaver --budget 64 --drafter random --adapter random
    weaver convert adapter qwen36_27b_weaver.pth weaver-adapter/
    weaver data build --out data/prompts --max-prompts 2000
    weaver serve --port 8000
User mistakes print one line `error: ...` and exit with code 2.
"""

from __future__ import annotations

import argparse
import sys

from weaver.errors import WeaverError
from weaver.options import add_runtime_arguments, runtime_options
from weaver.train.data_cli import add_data_commands

EXIT_USER_ERROR = 2


def _add_generate(sub) -> None:
    p = sub.add_parser("generate", help="generate text for a prompt, streaming it to the terminal")
    p.add_argument("prompt", help="the user message (chat template applied unless --no-chat)")
    p.add_argument("--model", default="smollm2", help="registry name or HF-format directory (default smollm2)")
    p.add_argument("--random-weights", action="store_true",
                   help="treat --model as a preset name or config.json and use random weights (timing runs)")
    p.add_argument("--method", default="ar", choices=["ar", "chain", "ddtree", "weaver"],
                   help="decoding method (chain/ddtree/weaver need --drafter; weaver also --adapter)")
    p.add_argument("--budget", type=int, default=64, help="tree budget: non-root nodes per round")
    p.add_argument("--drafter", default="auto",
                   help="auto (the trained drafter weaver ships for the model), a checkpoint dir, 'random[:layers]' "
                        "or none")
    p.add_argument("--adapter", default="auto",
                   help="auto (the trained adapter weaver ships), a checkpoint dir or .pth, 'random[:width]' or none")
    p.add_argument("--draft-vocab", default=None, metavar="TOKEN_MAP",
                   help="a token map (`weaver data token-map`): the drafter scores only those tokens (a cheaper "
                        "draft head at large vocabularies; output unchanged), or first:N for timing runs")
    p.add_argument("--verify", default="auto", choices=["auto", "greedy", "target_only", "traversal",
                                                        "chain_speculative"],
                   help="verification rule (auto: greedy at temperature 0, else target_only)")
    p.add_argument("--max-new-tokens", type=int, default=128, help="stop after this many new tokens")
    p.add_argument("--temperature", type=float, default=None,
                   help="0 = greedy (default: the model's generation_config.json, else greedy)")
    p.add_argument("--top-p", type=float, default=None,
                   help="nucleus sampling mass in (0, 1] (default: generation_config.json, else 1)")
    p.add_argument("--top-k", type=int, default=None,
                   help="keep the k most likely tokens, 0 = off (default: generation_config.json, else 0)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampler")
    p.add_argument("--stop", action="append", default=None, help="stop string (repeatable)")
    p.add_argument("--no-chat", action="store_true", help="do not apply the chat template")
    p.add_argument("--chat-template-kwargs", default=None, metavar="JSON",
                   help='the chat template\'s switches as a JSON object, e.g. \'{"enable_thinking": false}\'')
    p.add_argument("--no-thinking", action="store_true",
                   help="shorthand for --chat-template-kwargs '{\"enable_thinking\": false}' (Qwen3.5/3.6 templates)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--dtype", default=None, help="fp32, bf16 or fp16 (default: bf16 on cuda, fp32 on cpu)")
    add_runtime_arguments(p)
    p.set_defaults(func=_cmd_generate)


def _cmd_generate(args: argparse.Namespace) -> int:
    import weaver

    template_kwargs = chat_template_kwargs(args.chat_template_kwargs, args.no_thinking)  # bad JSON: before loading
    kw = dict(device=args.device, dtype=args.dtype, seed=args.seed, drafter=args.drafter, adapter=args.adapter,
              options=runtime_options(args), draft_vocab=args.draft_vocab)
    if args.random_weights:
        llm = weaver.LLM.from_config(args.model, random_weights=True, **kw)
    else:
        llm = weaver.LLM(args.model, **kw)

    def show(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    out = llm.generate(
        args.prompt,
        method=args.method,
        budget=args.budget,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
        chat=not args.no_chat,
        stop=args.stop,
        verify=args.verify,
        on_text=show,
        chat_template_kwargs=template_kwargs,
    )
    s = out.stats
    sys.stdout.write("\n")
    print(
        f"[weaver] {s.new_tokens} tokens in {s.seconds:.2f} s, {s.tokens_per_s:.1f} tok/s | method {s.method}"
        f" | tau {s.tau:.2f} | rounds {s.rounds} | finish {s.finish_reason}",
        file=sys.stderr,
    )
    return 0


def chat_template_kwargs(text: str | None, no_thinking: bool = False) -> dict | None:
    """--chat-template-kwargs JSON (and --no-thinking) -> the dict `LLM.generate` takes, or None."""
    import json

    from weaver.errors import GenerationConfigError

    kwargs = None
    if text is not None:
        try:
            kwargs = json.loads(text)
        except json.JSONDecodeError as exc:
            raise GenerationConfigError(f"--chat-template-kwargs is not valid JSON: {exc}") from None
        if not isinstance(kwargs, dict):
            raise GenerationConfigError(f"--chat-template-kwargs must be a JSON object, got {text!r}")
    if no_thinking:
        kwargs = {**(kwargs or {}), "enable_thinking": False}
    return kwargs


def _add_models(sub) -> None:
    p = sub.add_parser("models", help="list or download models")
    msub = p.add_subparsers(dest="models_cmd", required=True)
    pull = msub.add_parser("pull", help="download and convert a registry model into the cache")
    pull.add_argument("name", help="registry name, e.g. smollm2")
    pull.add_argument("--force", action="store_true", help="convert again even if present")
    pull.set_defaults(func=_cmd_models_pull)
    lst = msub.add_parser("list", help="show registry models and what is downloaded")
    lst.set_defaults(func=_cmd_models_list)


def _cmd_models_pull(args: argparse.Namespace) -> int:
    from weaver.models.registry import pull

    path = pull(args.name, force=args.force)
    print(path)
    return 0


def _cmd_models_list(args: argparse.Namespace) -> int:
    from weaver.models.registry import list_models

    rows = list_models()
    for row in rows:
        state = "ready" if row.get("downloaded") else "not downloaded"
        print(f"{row['name']:<24} {state:<15} {row.get('description', '')}  [{row.get('path', '')}]")
    return 0


def _add_bench(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks")
    bsub = p.add_subparsers(dest="bench_cmd", required=True)
    from weaver.bench import ar

    a = bsub.add_parser("ar", help="autoregressive tok/s of weaver vs transformers generate")
    ar.add_arguments(a)
    a.set_defaults(func=ar.run)
    from weaver.bench import rounds

    r = bsub.add_parser("rounds", help="tau, tok/s and stage times per method and budget")
    rounds.add_arguments(r)
    r.set_defaults(func=rounds.run)
    from weaver.bench import scale

    sc = bsub.add_parser("scale", help="round cost at a real shape (default Qwen3.6-27B, random weights) vs the "
                         "bandwidth floor; verify sweep, prefill, projected speedup")
    scale.add_arguments(sc)
    sc.set_defaults(func=scale.run)
    from weaver.bench import load

    ld = bsub.add_parser("load", help="peak memory of loading a random checkpoint in the released Qwen3.6 layout")
    load.add_arguments(ld)
    ld.set_defaults(func=load.run)
    from weaver.bench import acceptance

    acc = bsub.add_parser("acceptance", help="tau per workload, method and budget; greedy equality with ar")
    acceptance.add_arguments(acc)
    acc.set_defaults(func=acceptance.run)
    from weaver.bench import serve_load

    sl = bsub.add_parser("serve", help="bounded load test of `weaver serve` on loopback: latency percentiles")
    serve_load.add_arguments(sl)
    sl.set_defaults(func=serve_load.run)
    try:
        from weaver.bench import kernels
    except ImportError:  # kernel benchmarks need triton
        kernels = None
    if kernels is not None:
        k = bsub.add_parser("kernels", help="GDN tree-verify kernel vs baselines (needs CUDA)")
        kernels.add_arguments(k)
        k.set_defaults(func=kernels.run)


def _add_serve(sub) -> None:
    from weaver.serve import cli as serve_cli

    p = sub.add_parser("serve", help="OpenAI-compatible HTTP server (chat, completions, streaming, /metrics)")
    serve_cli.add_arguments(p)
    p.set_defaults(func=serve_cli.run)


def _add_demo(sub) -> None:
    from weaver import demo

    p = sub.add_parser("demo", help="one prompt by every method: the fastest one's answer and a tau / tok/s table")
    demo.add_arguments(p)
    p.set_defaults(func=demo.run)


def _add_convert(sub) -> None:
    p = sub.add_parser("convert", help="convert checkpoints from other formats into weaver's")
    csub = p.add_subparsers(dest="convert_cmd", required=True)
    a = csub.add_parser("adapter", help="the authors' released Weaver .pth -> weaver's adapter directory")
    a.add_argument("source", help="the .pth file ({'config': ..., 'state_dict': ...}; either layout)")
    a.add_argument("out_dir", help="directory to write config.json + model.safetensors into (created if needed)")
    a.set_defaults(func=_cmd_convert_adapter)


def _cmd_convert_adapter(args: argparse.Namespace) -> int:
    from weaver.speculative.weaver import WeaverAdapter

    adapter = WeaverAdapter.from_released(args.source)
    adapter.save_pretrained(args.out_dir)
    cfg = adapter.config
    print(f"{args.out_dir}: Weaver adapter ({cfg.positions} positions, {cfg.mlp} MLP, d_rank {cfg.d_rank}, "
          f"target hidden {cfg.target_hidden})")  # fmt: skip
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="weaver", description="Lossless speculative decoding with trees from marginals."
    )
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True)
    _add_generate(sub)
    _add_models(sub)
    _add_bench(sub)
    _add_convert(sub)
    _add_demo(sub)
    _add_serve(sub)
    data_sub = add_data_commands(sub)
    from weaver.train.cli import add_regenerate_parser, add_train_commands

    add_regenerate_parser(data_sub)
    add_train_commands(sub)
    return parser


def _version() -> str:
    from weaver import __version__

    return f"weaver {__version__}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except WeaverError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
