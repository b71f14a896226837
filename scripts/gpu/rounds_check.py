"""H200: greedy speculative output through the captured rounds equals `method="ar"` (fp32, tiny models).

    python3 scripts/gpu/rounds_check.py --no-compile   # eager stages, every preset / prompt / budget / mode
    python3 scripts/gpu/rounds_check.py --quick        # compiled stages, one config each
Both capture modes run (--quick: "round" only): one graph per round ("round") and one per stage ("stages").
Prints one line per (preset, method, budget, mode) and exits 1 on any mismatch.
"""

from __future__ import annotations

import sys

import weaver


def main(quick: bool, compile: bool) -> int:
    """quick: one preset, prompt and budget per method (for the compiled stages, which compile per config)."""
    bad = 0
    options = weaver.RuntimeOptions(compile=compile)
    for preset in ("tiny-llama",) if quick else ("tiny-llama", "tiny-qwen3"):
        llm = weaver.LLM.from_config(preset, seed=3, device="cuda", dtype="fp32", drafter="random:3", adapter="random",
                                     options=options)  # fmt: skip
        for prompt in ([5, 6, 7, 8, 9, 10, 11],) if quick else ([5, 6, 7, 8, 9, 10, 11], [3, 1, 4, 1, 5]):
            want = llm.generate(prompt, max_new_tokens=48, ignore_eos=True).token_ids
            for method in ("chain", "ddtree", "weaver"):
                for budget in (64,) if quick else (8, 64):
                    for mode in ("round",) if quick else ("round", "stages"):
                        llm.engine.options = options.replace(cuda_graphs=mode)
                        out = llm.generate(prompt, method=method, budget=budget, max_new_tokens=48, ignore_eos=True)
                        same = out.token_ids == want
                        bad += not same
                        graphed = any(k[0].method == method and k[0].budget == budget and k[-1] == mode
                                      for k in llm.engine._captured)  # fmt: skip
                        print(f"{preset} {method:6s} budget {budget:2d} {mode:6s}: equal to ar {same} "
                              f"(tau {out.stats.tau:.2f}, captured {graphed}, compiled stages "
                              f"{llm.engine.compiled_stage_names(out_cfg(llm, method, budget))})", flush=True)
        llm.engine.options = options
    return 1 if bad else 0


def out_cfg(llm, method: str, budget: int):
    return next(k[0] for k in llm.engine._captured if k[0].method == method and k[0].budget == budget)


if __name__ == "__main__":
    sys.exit(main(quick="--quick" in sys.argv, compile="--no-compile" not in sys.argv))
