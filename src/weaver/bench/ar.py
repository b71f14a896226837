"""Autoregressive decoding speed: weaver `method="ar"` next to transformers `generate`, in one run.

Default model, batch 1, greedy, a fixed chat prompt, N new tokens with EOS ignored (every run emits
exactly N), medians of repeated runs after warm-up. tok/s counts the whole generation (prefill
included) for both. On CUDA it also checks that the CUDA-graph decode reproduces the eager CPU
tokens on tiny random models.

    weaver bench ar --device cpu --new-tokens 64 --runs 3
    weaver bench ar --device cuda --dtype bf16 --new-tokens 256 --runs 5 --out bench_ar.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time

import torch

from weaver.argtypes import positive_int
from weaver.options import add_runtime_arguments, runtime_options

PROMPT = "Write a detailed essay about the history of the printing press and its effects on Europe."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2", help="registry name or HF directory")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--dtype", default=None, help="fp32 / bf16 (default: bf16 on cuda, fp32 on cpu)")
    parser.add_argument("--new-tokens", type=positive_int, default=256, help="tokens generated per run")
    parser.add_argument("--runs", type=positive_int, default=5, help="timed runs (median reported)")
    parser.add_argument("--no-transformers", action="store_true", help="skip the transformers baseline")
    parser.add_argument("--out", default=None, help="write the JSON report here")
    add_runtime_arguments(parser)


def _matching_prefix(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def gpu_matches_cpu() -> dict:
    """Greedy tokens of tiny random models: graphed decode on the GPU (fp32) vs eager on the CPU."""
    import weaver

    results = {}
    for preset in ("tiny-llama", "tiny-qwen3_5"):
        prompt = [5, 6, 7, 8, 9, 10, 11]
        a = weaver.LLM.from_config(preset, seed=3, device="cpu", dtype="fp32")
        b = weaver.LLM.from_config(preset, seed=3, device="cuda", dtype="fp32")
        ta = a.generate(prompt, max_new_tokens=48, ignore_eos=True).token_ids
        tb = b.generate(prompt, max_new_tokens=48, ignore_eos=True).token_ids
        results[preset] = {"tokens": len(ta), "matching_prefix": _matching_prefix(ta, tb)}
    return results


def bench_weaver(llm, runs: int, new_tokens: int) -> dict:
    llm.generate(PROMPT, max_new_tokens=new_tokens, ignore_eos=True, temperature=0.0)  # warm-up: capture / compile
    rates, decode_rates = [], []
    for _ in range(runs):
        out = llm.generate(PROMPT, max_new_tokens=new_tokens, ignore_eos=True, temperature=0.0)  # greedy, as HF
        rates.append(out.stats.tokens_per_s)
        decode_rates.append((new_tokens - 1) / out.stats.stage_seconds["verify"])
    return {
        "tok_per_s_median": statistics.median(rates),
        "tok_per_s_runs": rates,
        "decode_only_tok_per_s_median": statistics.median(decode_rates),
        "prompt_tokens": out.stats.prompt_tokens,
        "token_ids": out.token_ids,
    }


def bench_transformers(model_dir: str, device: str, dtype, runs: int, new_tokens: int, ids: list[int]) -> dict:
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device).eval()
    inp = torch.tensor([ids], device=device)
    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    variants = [("dynamic_cache", {}, runs if device == "cpu" else 1)]
    if device != "cpu":  # static cache: generate compiles the forward itself (the strongest HF setting)
        variants.insert(0, ("static_cache", {"cache_implementation": "static"}, runs))
    results = {}
    for label, extra, n_runs in variants:
        with torch.no_grad():
            for _ in range(2 if label == "static_cache" else 1):
                hf.generate(inp, **kw, **extra)
            rates = []
            for _ in range(n_runs):
                _sync(device)
                t0 = time.perf_counter()
                out = hf.generate(inp, **kw, **extra)
                _sync(device)
                rates.append(new_tokens / (time.perf_counter() - t0))
        results[label] = {"tok_per_s_median": statistics.median(rates), "tok_per_s_runs": rates,
                          "token_ids": out[0, len(ids):].tolist()}
    return results


def _sync(device: str) -> None:
    if device != "cpu":
        torch.cuda.synchronize()


def run(args: argparse.Namespace) -> int:
    import transformers

    import weaver

    llm = weaver.LLM(args.model, device=args.device, dtype=args.dtype, options=runtime_options(args))
    device = str(llm.model.device.type)
    report = {
        "device": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
        "cpu_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "model": args.model,
        "dtype": str(llm.model.dtype),
        "prompt": PROMPT,
        "new_tokens": args.new_tokens,
        "runs": args.runs,
        "command": " ".join(["weaver", "bench", "ar", *sys.argv[3:]]),
    }
    if device == "cuda":
        report["gpu_vs_cpu_greedy"] = gpu_matches_cpu()
        print("gpu vs cpu greedy (tiny models):", report["gpu_vs_cpu_greedy"], flush=True)
    report["weaver_ar"] = bench_weaver(llm, args.runs, args.new_tokens)
    w = report["weaver_ar"]
    print(f"weaver ar: {w['tok_per_s_median']:.1f} tok/s (decode only {w['decode_only_tok_per_s_median']:.1f})",
          flush=True)
    if not args.no_transformers:
        ids = llm.encode_prompt(PROMPT)
        report["transformers"] = bench_transformers(
            llm.name, device, llm.model.dtype, args.runs, args.new_tokens, ids)
        for label, r in report["transformers"].items():
            match = _matching_prefix(w["token_ids"], r["token_ids"])
            r["greedy_matching_prefix_vs_weaver"] = match
            print(f"transformers generate {label}: {r['tok_per_s_median']:.1f} tok/s "
                  f"(greedy tokens equal to weaver's for the first {match})", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
    return 0
