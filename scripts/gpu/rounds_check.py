"""H200: greedy speculative output through the captured round graphs equals `method="ar"` (fp32, tiny models).

    python3 scripts/gpu/rounds_check.py
Prints one line per (preset, method, budget) and exits 1 on any mismatch.
"""

from __future__ import annotations

import sys

import weaver


def main() -> int:
    bad = 0
    for preset in ("tiny-llama", "tiny-qwen3"):
        llm = weaver.LLM.from_config(preset, seed=3, device="cuda", dtype="fp32", drafter="random:3", adapter="random")
        for prompt in ([5, 6, 7, 8, 9, 10, 11], [3, 1, 4, 1, 5]):
            want = llm.generate(prompt, max_new_tokens=48, ignore_eos=True).token_ids
            for method in ("chain", "ddtree", "weaver"):
                for budget in (8, 64):
                    out = llm.generate(prompt, method=method, budget=budget, max_new_tokens=48, ignore_eos=True)
                    same = out.token_ids == want
                    bad += not same
                    print(f"{preset} {method:6s} budget {budget:2d}: equal to ar {same} (tau {out.stats.tau:.2f}, "
                          f"graphs {llm._spec.last_round_graphed})", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
