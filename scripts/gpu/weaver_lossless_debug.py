"""Issue 17 follow-up: where a weaver round on the GPU leaves ar's greedy output (trained drafter and adapter).

Decodes gsm_symbolic prompts with ar and with weaver (budgets 16, 64) under several runtime configurations and
prints whether each output equals ar's. In the eager configurations every round is also checked stage by stage:
the fast verify's argmax at every valid node against the reference forward (torch kernels) on the same cache,
and the accepted path against the one the reference argmax gives; the first bad round is printed in full.

    python3 scripts/gpu/weaver_lossless_debug.py --drafter DIR --adapter DIR [--eval-dir .carry/eval]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import weaver
from weaver.speculative.accept import accept_greedy

CONFIGS = {
    "triton": {"compile": False, "cuda_graphs": "off"},
    "torch": {"kernels": "torch", "compile": False, "cuda_graphs": "off"},
    "triton+graphs": {"compile": False},
    "triton+graphs+compile": {},
}
TORCH = weaver.RuntimeOptions(kernels="torch", compile=False, cuda_graphs="off")


def checked_stages(engine, report: list):
    """engine.stages_for with a verify that also runs the reference forward and records the comparison."""
    original = engine.stages_for

    def stages_for(cfg, generator):
        stages = original(cfg, generator)
        if cfg.method == "ar":
            return stages
        layers = tuple(engine.drafter.config.target_layer_ids)

        def verify(state, tree):
            out = stages.verify(state, tree)
            options, engine.model.options = engine.model.options, TORCH
            ref = engine.model(tree.tokens, state.cache, parents=tree.parents, depth=tree.depth,
                               capture_layers=layers, ancestors=tree.ancestor_mask())
            engine.model.options = options
            fast_choice, ref_choice = out.logits.argmax(-1), ref.logits.argmax(-1)
            bad = (fast_choice != ref_choice) & tree.valid
            got = accept_greedy(tree, out.logits, path_len=engine.drafter.config.block_size)
            want = accept_greedy(tree, ref.logits, path_len=engine.drafter.config.block_size, options=TORCH)
            report.append(dict(
                round=len(report), length=int(state.cache.lengths[0]), bad_nodes=bad[0].nonzero().flatten().tolist(),
                accepted=int(got.num_accepted[0]), accepted_ref=int(want.num_accepted[0]),
                next=int(got.next_token[0]), next_ref=int(want.next_token[0]),
                tokens=tree.tokens[0].tolist(), parents=tree.parents[0].tolist(), depth=tree.depth[0].tolist(),
                valid=tree.valid[0].tolist(), path=got.path[0].tolist(), fast_choice=fast_choice[0].tolist(),
                ref_choice=ref_choice[0].tolist(),
                max_logit_diff=float((out.logits - ref.logits).abs().amax()),
            ))
            return out

        return stages.replace(verify=verify)

    engine.stages_for = stages_for


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--drafter", required=True)
    ap.add_argument("--adapter", required=True)
    ap.add_argument("--eval-dir", default=".carry/eval")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS))
    ap.add_argument("--methods", nargs="+", default=["weaver", "ddtree"])
    ap.add_argument("--save", default=None, help="torch.save the eager configurations' round reports here")
    args = ap.parse_args()
    texts = [json.loads(line)["text"] for line in
             Path(args.eval_dir, "gsm_symbolic.jsonl").read_text().splitlines()[: args.prompts]]
    reference, saved = None, {}
    for name in args.configs:
        llm = weaver.LLM("smollm2", drafter=args.drafter, adapter=args.adapter, dtype="fp32",
                         options=weaver.RuntimeOptions(**CONFIGS[name]))
        if reference is None:
            reference = [llm.generate(t, method="ar", max_new_tokens=args.new_tokens, temperature=0.0).token_ids
                         for t in texts]
        report: list = []
        if "graphs" not in name:
            checked_stages(llm.engine, report)
        for method in args.methods:
            for budget in (16, 64):
                for i, t in enumerate(texts):
                    report.clear()
                    out = llm.generate(t, method=method, budget=budget, max_new_tokens=args.new_tokens,
                                       temperature=0.0)
                    got, want = out.token_ids, reference[i]
                    first = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), None)
                    line = (f"{name:22s} {method:7s} budget {budget:3d} prompt {i}: equal {got == want} "
                            f"tau {out.stats.tau:.2f} first diff {first}")
                    if report:
                        bad = [r for r in report if r["bad_nodes"] or r["accepted"] != r["accepted_ref"]
                               or r["next"] != r["next_ref"]]
                        diffs = max(r["max_logit_diff"] for r in report)
                        line += f" | rounds {len(report)} bad rounds {len(bad)} max |fast-ref logit| {diffs:.2e}"
                        saved[(name, method, budget, i)] = list(report)
                        if bad:
                            b = bad[0]
                            line += (f"\n    first bad round {b['round']} (cache length {b['length']}): bad nodes "
                                     f"{b['bad_nodes'][:10]} accepted {b['accepted']} vs ref {b['accepted_ref']}, "
                                     f"next {b['next']} vs {b['next_ref']}\n    tokens {b['tokens'][:20]}\n"
                                     f"    parents {b['parents'][:20]}\n    depth {b['depth'][:20]}")
                    print(line, flush=True)
        del llm
        torch.cuda.empty_cache()
    if args.save:
        torch.save(saved, args.save)


if __name__ == "__main__":
    main()
