"""Issue 17 follow-up: the device weaver builder against the torch builder on real round inputs, on any device.

Input: a file written on the CPU from rounds of a real decode (trained drafter + adapter, SmolLM2): per round the
root, the drafter's top-512 logits per depth, the target and drafter hidden states, and SmolLM2's embedding rows of
every token those rounds can reach (remapped to 0..U-1, so the file stays ~12 MB). Prints, per configuration and
round, whether the trees equal the torch builder's and which DraftTree invariants break.

    python3 scripts/gpu/weaver_trees_gpu.py --rounds sub.pt --adapter DIR [--device cuda]
"""

from __future__ import annotations

import argparse

import torch
from released_lossless import tree_problems  # scripts/gpu/, the folder Python runs this script from

import weaver
from weaver.speculative.builders.weaver import build_weaver
from weaver.speculative.weaver import WeaverAdapter

CONFIGS = {
    "torch": dict(kernels="torch", compile=False, cuda_graphs="off"),
    "triton": dict(compile=False, cuda_graphs="off"),
    "triton-nopdl": dict(compile=False, cuda_graphs="off", pdl=False),
    "triton+graph": dict(compile=False, cuda_graphs="off"),  # the build captured in a CUDA graph here
    "triton+compile+graph": dict(compile=False, cuda_graphs="off"),  # torch.compile'd, then captured
}


def packed_builder(ad: WeaverAdapter, opts, budget: int):
    """build_weaver as tensors -> one [5, 1, N] tensor (tokens, parents, depth, valid, log p bits), for capture."""

    def fn(root, logits, th, dh):
        t = build_weaver(root, logits, budget, adapter=ad, options=opts, target_hidden=th, draft_hidden=dh)
        return torch.stack([t.tokens, t.parents, t.depth, t.valid.long(), t.draft_logprobs.double().long()])

    return fn


def unpack(x: torch.Tensor):
    from weaver.speculative.tree import DraftTree

    x = x.cpu()
    return DraftTree(x[0], x[1], x[2], x[3].bool(), torch.zeros(x.shape[1:]))


def round_inputs(rec: dict, vocab: int, device: str) -> tuple:
    """(root, logits [1, D, U], target_hidden, draft_hidden) of one recorded round."""
    logits = torch.full((1, rec["D"], vocab), -1e4, dtype=torch.float32)
    logits[0].scatter_(1, rec["idx"], rec["vals"].float())
    return (rec["root"].to(device), logits.to(device), rec["target_hidden"].float().to(device),
            rec["draft_hidden"].float().to(device))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", required=True)
    ap.add_argument("--adapter", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS))
    ap.add_argument("--limit", type=int, default=None)
    args = ap.parse_args()
    data = torch.load(args.rounds)
    emb = data["E"].float().to(args.device)
    trees: dict[str, list] = {}
    for name in args.configs:
        fields = dict(CONFIGS[name])
        if args.device == "cpu" and name != "torch":
            fields["kernels"] = "triton"
        opts = weaver.RuntimeOptions(**fields)
        ad = WeaverAdapter.from_pretrained(args.adapter).float().to(args.device)
        ad.bind(emb, emb, options=opts)
        trees[name] = []
        graphs: dict[int, object] = {}
        for rec in data["rounds"][: args.limit]:
            root, logits, th, dh = round_inputs(rec, emb.shape[0], args.device)
            if "graph" in name:
                from weaver.speculative.capture import GraphedStep

                if rec["budget"] not in graphs:
                    fn = packed_builder(ad, opts, rec["budget"])
                    if "compile" in name:
                        fn = torch.compile(fn, fullgraph=False)
                    graphs[rec["budget"]] = GraphedStep(fn, root, logits, th, dh)
                trees[name].append(unpack(graphs[rec["budget"]](root, logits, th, dh)))
                continue
            trees[name].append(build_weaver(root, logits, rec["budget"], adapter=ad, options=opts, target_hidden=th,
                                            draft_hidden=dh).to("cpu"))
    for name in args.configs:
        for r, tree in enumerate(trees[name]):
            ref = trees["torch"][r]
            same = all(torch.equal(getattr(tree, f), getattr(ref, f)) for f in ("tokens", "parents", "depth", "valid"))
            print(f"{name:14s} round {r:2d} budget {data['rounds'][r]['budget']:3d} same-as-torch {same} "
                  f"nodes {int(tree.valid.sum())} maxdepth {tree.max_depth()} (torch {ref.max_depth()}) "
                  f"broken {tree_problems(tree)[:3]}", flush=True)
            if not same:
                print("   tokens ", tree.tokens[0, :24].tolist(), "\n   torch  ", ref.tokens[0, :24].tolist())
                print("   parents", tree.parents[0, :24].tolist(), "\n   torch  ", ref.parents[0, :24].tolist())


if __name__ == "__main__":
    main()
