"""H200, issue 17 follow-up: which GPU path breaks weaver's losslessness with a trained released-variant adapter.

On the H200 (fp32, commit a37f8e9) every weaver output of `benchmarks/results/acceptance/h200_second` differed from
ar while chain and ddtree matched; on the CPU (kernels=torch) the same weights are lossless. This decodes a few
prompts with ar and with weaver under each runtime configuration and prints, per configuration, whether the tokens
equal ar's and where they first differ, so one call says whether the Triton kernels, the CUDA graphs or compile
are at fault.

    python3 scripts/gpu/released_lossless.py --drafter DIR --adapter DIR [--eval-dir .carry/eval]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import weaver
from weaver.speculative.builders.weaver import build_weaver
from weaver.speculative.weaver import WeaverAdapter

CONFIGS = {  # name -> RuntimeOptions fields
    "triton+graphs+compile": {},
    "triton+graphs": {"compile": False},
    "triton": {"compile": False, "cuda_graphs": "off"},
    "torch+graphs": {"kernels": "torch", "compile": False},
    "torch": {"kernels": "torch", "compile": False, "cuda_graphs": "off"},
}


def tree_problems(tree) -> list[str]:
    """Broken DraftTree invariants (DESIGN §1) of row 0: topological parents, depth = depth[parent] + 1, distinct
    sibling tokens."""
    parents, depth, tokens, valid = (x[0].tolist() for x in (tree.parents, tree.depth, tree.tokens, tree.valid))
    bad, seen = [], set()
    for i in range(1, len(parents)):
        if not valid[i]:
            continue
        p = parents[i]
        if not 0 <= p < i:
            bad.append(f"node {i}: parent {p}")
        elif depth[i] != depth[p] + 1:
            bad.append(f"node {i}: depth {depth[i]}, parent depth {depth[p]}")
        if (p, tokens[i]) in seen:
            bad.append(f"node {i}: token {tokens[i]} twice under {p}")
        seen.add((p, tokens[i]))
    return bad


def compare_trees(adapter_dir: str, device: str, budgets=(16, 64), rounds: int = 8) -> None:
    """The device builder (Triton where the options allow) against the torch builder on random round inputs at the
    adapter's shapes (SmolLM2's width and vocabulary, random embedding and LM head): same trees, valid trees."""
    gen = torch.Generator().manual_seed(0)
    v, h, d = 49152, 576, 15
    embed, head = torch.randn(v, h, generator=gen).to(device) * 0.05, torch.randn(v, h, generator=gen).to(device) * 0.05
    builds = {}
    for name, opts in (("device", weaver.RuntimeOptions(compile=False, cuda_graphs="off")),
                       ("torch", weaver.RuntimeOptions(kernels="torch", compile=False, cuda_graphs="off"))):
        ad = WeaverAdapter.from_pretrained(adapter_dir).float().to(device)
        ad.bind(embed, head, options=opts)
        builds[name] = (ad, opts)
    for r in range(rounds):
        g = torch.Generator().manual_seed(r)
        kw = {"target_hidden": (torch.randn(1, h, generator=g) * 3).to(device),
              "draft_hidden": (torch.randn(1, d, h, generator=g) * 3).to(device)}
        root = torch.randint(0, v, (1,), generator=g).to(device)
        marg = (torch.randn(1, d, v, generator=g) * 3).to(device)
        for budget in budgets:
            trees = {n: build_weaver(root, marg, budget, adapter=a, options=o, **kw) for n, (a, o) in builds.items()}
            same = all(torch.equal(getattr(trees["device"], f), getattr(trees["torch"], f))
                       for f in ("tokens", "parents", "depth"))
            print(f"trees round {r} budget {budget}: device == torch {same}; broken invariants: device "
                  f"{tree_problems(trees['device'])[:3]} torch {tree_problems(trees['torch'])[:3]}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--drafter", required=True)
    ap.add_argument("--adapter", required=True)
    ap.add_argument("--eval-dir", default=".carry/eval")
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS))
    ap.add_argument("--random-target", action="store_true",
                    help="SmolLM2 shapes with random weights (no GGUF needed) and token-id prompts")
    ap.add_argument("--trees", action="store_true", help="only compare device and torch builders' trees")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    if args.trees:
        compare_trees(args.adapter, args.device)
        return
    if args.random_target:
        texts = [list(range(100 + 37 * i, 140 + 37 * i)) for i in range(args.prompts)]
    else:
        texts = [json.loads(line)["text"] for line in
                 Path(args.eval_dir, "gsm_symbolic.jsonl").read_text().splitlines()[: args.prompts]]
    reference = None
    for name in args.configs:
        opts = weaver.RuntimeOptions(**CONFIGS[name])
        if args.random_target:
            llm = weaver.LLM.from_config("smollm2-shape", drafter=args.drafter, adapter=args.adapter, device="cuda",
                                         dtype=args.dtype, options=opts)
        else:
            llm = weaver.LLM(args.model, drafter=args.drafter, adapter=args.adapter, dtype=args.dtype, options=opts)
        if reference is None:
            reference = [llm.generate(t, method="ar", max_new_tokens=args.new_tokens, temperature=0.0,
                                      chat=not args.random_target).token_ids
                         for t in texts]
        for budget in (16, 64):
            for i, t in enumerate(texts):
                out = llm.generate(t, method="weaver", budget=budget, max_new_tokens=args.new_tokens, temperature=0.0,
                                   chat=not args.random_target)
                got, want = out.token_ids, reference[i]
                first = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), None)
                print(f"{name:24s} budget {budget:3d} prompt {i}: equal {got == want} tau {out.stats.tau:.2f}"
                      f" first diff {first}", flush=True)


if __name__ == "__main__":
    main()
