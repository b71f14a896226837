"""Autoregressive decoding speed on the GPU: weaver `method="ar"` vs transformers `generate`, one run.

Default model (SmolLM2-135M-Instruct) in bf16, batch 1, greedy, 256 new tokens (EOS ignored so every
run emits exactly 256), medians over repeated runs after warm-up. Writes JSON to --out.
Also checks, on tiny random models, that CUDA-graph greedy decoding on the GPU (fp32) reproduces the
eager CPU tokens.

    python scripts/gpu/bench_ar.py --out results.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch

import weaver
from weaver.models.registry import pull

PROMPT = "Write a detailed essay about the history of the printing press and its effects on Europe."


def gpu_matches_cpu() -> dict:
    """Greedy tokens of tiny random models: CUDA graphs on GPU (fp32) vs eager CPU."""
    results = {}
    for preset in ("tiny-llama", "tiny-qwen3_5"):
        cpu = weaver.LLM.from_config(preset, random_weights=True, seed=3, device="cpu", dtype="fp32")
        gpu = weaver.LLM.from_config(preset, random_weights=True, seed=3, device="cuda", dtype="fp32")
        prompt = [5, 6, 7, 8, 9, 10, 11]
        a = cpu.generate(prompt, max_new_tokens=48, ignore_eos=True).token_ids
        b = gpu.generate(prompt, max_new_tokens=48, ignore_eos=True).token_ids
        same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a))
        results[preset] = {"tokens": len(a), "matching_prefix": same}
    return results


def bench_weaver(runs: int, new_tokens: int) -> dict:
    llm = weaver.LLM("smollm2", device="cuda", dtype="bf16")
    llm.generate(PROMPT, max_new_tokens=16, ignore_eos=True)  # capture the graph
    llm.generate(PROMPT, max_new_tokens=new_tokens, ignore_eos=True)
    rates, decode_rates, outs = [], [], []
    for _ in range(runs):
        torch.cuda.synchronize()
        out = llm.generate(PROMPT, max_new_tokens=new_tokens, ignore_eos=True)
        assert out.stats.new_tokens == new_tokens
        rates.append(out.stats.tokens_per_s)
        decode = out.stats.stage_seconds["verify"]
        decode_rates.append((new_tokens - 1) / decode)
        outs.append(out.token_ids)
    return {
        "tok_per_s_median": statistics.median(rates),
        "tok_per_s_runs": rates,
        "decode_only_tok_per_s_median": statistics.median(decode_rates),
        "prompt_tokens": out.stats.prompt_tokens,
        "token_ids": outs[0],
    }


def bench_transformers(runs: int, new_tokens: int, ids: list[int]) -> dict:
    from transformers import AutoModelForCausalLM

    path = pull("smollm2", progress=False)
    hf = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.bfloat16).cuda().eval()
    inp = torch.tensor([ids], device="cuda")
    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=2)
    results = {}
    # The dynamic cache is ~20x slower (launch-bound): one warm-up and one timed run are enough.
    for label, extra, n_runs in (("static_cache", {"cache_implementation": "static"}, runs),
                                 ("dynamic_cache", {}, 1)):
        with torch.no_grad():
            for _ in range(2 if n_runs > 1 else 1):  # warm-up (the static cache path compiles here)
                hf.generate(inp, **kw, **extra)
            rates = []
            for _ in range(n_runs):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                out = hf.generate(inp, **kw, **extra)
                torch.cuda.synchronize()
                rates.append(new_tokens / (time.perf_counter() - t0))
        results[label] = {"tok_per_s_median": statistics.median(rates), "tok_per_s_runs": rates,
                          "token_ids": out[0, len(ids):].tolist()}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench_ar.json")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=256)
    args = parser.parse_args()
    import transformers

    report = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "prompt": PROMPT,
        "new_tokens": args.new_tokens,
        "runs": args.runs,
    }
    report["gpu_vs_cpu_greedy"] = gpu_matches_cpu()
    print("gpu vs cpu greedy:", report["gpu_vs_cpu_greedy"], flush=True)
    report["weaver_ar"] = bench_weaver(args.runs, args.new_tokens)
    print(f"weaver ar: {report['weaver_ar']['tok_per_s_median']:.1f} tok/s "
          f"(decode only {report['weaver_ar']['decode_only_tok_per_s_median']:.1f})", flush=True)
    ids = weaver.LLM("smollm2", device="cpu").encode_prompt(PROMPT)
    report["transformers"] = bench_transformers(args.runs, args.new_tokens, ids)
    for label, r in report["transformers"].items():
        print(f"transformers generate {label}: {r['tok_per_s_median']:.1f} tok/s", flush=True)
    ours = report["weaver_ar"]["token_ids"]
    ref = report["transformers"]["static_cache"]["token_ids"]
    report["greedy_matching_prefix_vs_transformers_bf16"] = next(
        (i for i, (x, y) in enumerate(zip(ours, ref)) if x != y), len(ours))
    print("bf16 greedy matching prefix vs transformers:", report["greedy_matching_prefix_vs_transformers_bf16"])
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
