"""H200: greedy speculative output through the captured round graphs equals `method="ar"` (fp32, tiny models).

    WEAVER_COMPILE=0 python3 scripts/gpu/rounds_check.py    # eager stages, every preset / prompt / budget / mode
    python3 scripts/gpu/rounds_check.py --quick              # compiled draft + build stages, one config each
Both capture modes run (--quick: "round" only): one graph per round ("round") and one per stage ("stages").
Prints one line per (preset, method, budget, mode) and exits 1 on any mismatch.
"""

from __future__ import annotations

import sys

import weaver


def main(quick: bool) -> int:
    """quick: one preset, prompt and budget per method (for the compiled stages, which compile per config)."""
    bad = 0
    for preset in ("tiny-llama",) if quick else ("tiny-llama", "tiny-qwen3"):
        llm = weaver.LLM.from_config(preset, seed=3, device="cuda", dtype="fp32", drafter="random:3", adapter="random")
        for prompt in ([5, 6, 7, 8, 9, 10, 11],) if quick else ([5, 6, 7, 8, 9, 10, 11], [3, 1, 4, 1, 5]):
            want = llm.generate(prompt, max_new_tokens=48, ignore_eos=True).token_ids
            for method in ("chain", "ddtree", "weaver"):
                for budget in (64,) if quick else (8, 64):
                    for mode in ("round",) if quick else ("round", "stages"):
                        llm.engine.round_graphs = mode
                        out = llm.generate(prompt, method=method, budget=budget, max_new_tokens=48, ignore_eos=True)
                        same = out.token_ids == want
                        bad += not same
                        graphs = [g for key, g in llm._spec._graphs.items() if key[0] == method and key[-1] == mode]
                        print(f"{preset} {method:6s} budget {budget:2d} {mode:6s}: equal to ar {same} "
                              f"(tau {out.stats.tau:.2f}, graphs {llm._spec.last_round_graphed}, compiled stages "
                              f"{[g.compiled for g in graphs if g][-1:]})", flush=True)
        llm.engine.round_graphs = "round"
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(quick="--quick" in sys.argv))
