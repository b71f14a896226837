"""H200, issue 19: does the torch.compile'd hybrid verify give the eager verify's logits and GDN factors at the
Qwen3.6-27B widths? (Session 30: at the full 64-layer shape the compiled verify stopped with "an illegal memory
access" while inductor autotuned a pointwise kernel; the tiny hybrid compiled and ran.) The 27B widths with few
layers, so that it compiles in seconds; run it under CUDA_LAUNCH_BLOCKING=1 so a fault names its kernel.

    CUDA_LAUNCH_BLOCKING=1 python3 scripts/gpu/hybrid_verify_check.py --layers 4 --nodes 17
"""

from __future__ import annotations

import argparse
import traceback

import torch

import weaver
from weaver.bench.kernels import chain_tree, proposal_tree
from weaver.models.cache import GDNCache
from weaver.models.presets import preset_config
from weaver.speculative.capture import compile_stages
from weaver.speculative.round import RoundConfig, RoundState
from weaver.speculative.sampling import SamplingParams
from weaver.speculative.tree import DraftTree


@torch.no_grad()
def verify_once(llm, verify, parents: list[int], context: int):
    """One verify after `context` committed tokens: (logits, every GDN layer's tree factors)."""
    vocab, device = llm.config.vocab_size, llm.model.device
    tokens = torch.randint(0, vocab, (len(parents),), generator=torch.Generator().manual_seed(0)).tolist()
    tree = DraftTree.from_parent_lists([parents], [tokens], device=device).with_ancestors()
    cache = llm.engine.cache_for(context + len(parents) + 1)
    llm.model(torch.arange(context, device=device)[None] % vocab, cache, last_only=True)
    out = verify(RoundState(cache=cache, root=tree.tokens[:, 0]), tree)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return out.logits.float(), [[x.float() for x in layer.aux] for layer in cache.layers if isinstance(layer, GDNCache)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3.6-27b-shape")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--nodes", type=int, default=17)
    parser.add_argument("--kind", default="chain", choices=["chain", "tree"])
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--device", default="cuda", help="cpu: a plumbing smoke run")
    args = parser.parse_args()
    cfg = preset_config(args.model, num_hidden_layers=args.layers)
    llm = weaver.LLM.from_config(cfg, random_weights=True, seed=0, device=args.device, dtype="bf16", drafter="random:1",
                                 adapter=None)
    llm.engine._bind_draft_models()
    rcfg = RoundConfig(method="chain", budget=args.nodes - 1, rule="greedy", params=SamplingParams())
    eager = llm.engine.stages_for(rcfg, None)
    parents = chain_tree(args.nodes) if args.kind == "chain" else proposal_tree(args.nodes, seed=1)
    ref_logits, ref_aux = verify_once(llm, eager.verify, parents, args.context)
    print(f"{args.model} x{args.layers} layers, {args.kind} {args.nodes} nodes: eager ok", flush=True)
    compiled = compile_stages(eager, ("verify",))
    try:
        logits, aux = verify_once(llm, compiled.verify, parents, args.context)
    except Exception:  # noqa: BLE001 - the point is to print where it faulted
        print("compiled verify FAILED:\n" + "".join(traceback.format_exc().splitlines(keepends=True)[-30:]))
        return 1
    print(f"compiled: {getattr(compiled.verify, 'compiled', False)}; logits max |diff| "
          f"{(logits - ref_logits).abs().max().item():.4g} (max |ref| {ref_logits.abs().max().item():.4g})")
    for i, (a, b) in enumerate(zip(aux, ref_aux, strict=True)):
        diffs = [f"{(x - y).abs().max().item():.3g}" for x, y in zip(a, b, strict=True)]
        print(f"  GDN layer {i}: factor max |diff| {' '.join(diffs)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
