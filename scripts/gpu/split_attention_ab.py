"""Issue 19, the hybrid's attention layers: SDPA over the whole static cache (what `Attention.forward` runs today)
against the Triton tree attention that reads only the committed prefix (one program per row block and kv head)
and the prefix-split one (`split_tree_attention`), at the Qwen3.6-27B attention shape (24 query heads, 4 kv heads,
head dim 256, bf16), for a decode step (1 node), a chain-16 verify (17) and a budget-64 tree (65 nodes).

The cache capacity is what a server sets (`Engine.min_capacity` = its context): SDPA's mask covers every slot,
so its cost follows the capacity, the kernels' the prefix. Each case: us per layer call (16 layers' caches in
turn, as a forward meets them) and the max |diff| against SDPA.

    python3 scripts/gpu/split_attention_ab.py [--capacities 256 32768] [--prefixes 40 1000 8000]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from weaver.bench.kernels import time_graphs
from weaver.kernels.triton.split_attention import split_tree_attention
from weaver.kernels.triton.tree_attention import tree_attention
from weaver.ops.tree import ancestor_mask

H, HKV, D, LAYERS = 24, 4, 256, 16


def sdpa(q, ck, cv, lengths, anc, capacity):
    """Attention.forward's path: the [B, 1, T, S] mask of the whole cache, then SDPA."""
    b, t, _ = anc.shape
    slots = lengths[:, None] + torch.arange(t, device=q.device)
    committed = torch.arange(capacity, device=q.device)[None, None, :] < lengths[:, None, None]
    new = torch.zeros(b, t, capacity, dtype=torch.bool, device=q.device)
    new.scatter_(2, slots[:, None, :].expand(b, t, t), anc)
    out = F.scaled_dot_product_attention(q.view(b, t, H, D).transpose(1, 2), ck, cv,
                                         attn_mask=(committed | new)[:, None], enable_gqa=True)  # fmt: skip
    return out.transpose(1, 2).reshape(b * t, H * D)


def parents_of(t: int) -> torch.Tensor:
    """A chain for 1 and 17 nodes; a bushy tree (node i under (i - 1) // 4) for 65."""
    if t <= 17:
        return torch.arange(-1, t - 1)[None]
    return torch.tensor([-1] + [(i - 1) // 4 for i in range(1, t)])[None]


def time_case(q, lengths, anc, capacity: int, caches: list, reps: int) -> tuple[dict, list]:
    """us a layer of each implementation over the layers' caches in turn; max |diff| of the kernels vs SDPA."""
    fns = {
        "sdpa": lambda ck, cv: sdpa(q, ck, cv, lengths, anc, capacity),
        "tree": lambda ck, cv: tree_attention(q, ck, cv, lengths, anc, H, HKV),
        "split": lambda ck, cv: split_tree_attention(q, ck, cv, lengths, anc, H, HKV),
    }
    ref = fns["sdpa"](*caches[0]).float()
    diffs = [(fns[k](*caches[0]).float() - ref).abs().max().item() for k in ("tree", "split")]
    times = {}
    for name, fn in fns.items():
        def run(fn=fn):
            for ck, cv in caches:
                fn(ck, cv)
        times[name] = time_graphs([run], reps, warmup=2)[0] / LAYERS
    return times, diffs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--capacities", nargs="+", type=int, default=[256, 32768])
    p.add_argument("--prefixes", nargs="+", type=int, default=[40, 1000, 8000])
    p.add_argument("--nodes", nargs="+", type=int, default=[1, 17, 65])
    p.add_argument("--reps", type=int, default=30)
    args = p.parse_args()
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)
    print(torch.cuda.get_device_name(), torch.__version__)
    print(f"{'capacity':>8} {'prefix':>6} {'nodes':>5} | us a layer: {'SDPA':>7} {'tree_attn':>9} {'split':>7} | "
          f"max |diff| vs SDPA: tree_attn, split")
    for capacity in args.capacities:
        caches = [(torch.randn(1, HKV, capacity, D, device=dev, dtype=torch.bfloat16, generator=gen),
                   torch.randn(1, HKV, capacity, D, device=dev, dtype=torch.bfloat16, generator=gen))
                  for _ in range(LAYERS)]  # fmt: skip
        for prefix in args.prefixes:
            for t in args.nodes:
                if prefix + t > capacity:
                    continue
                anc = ancestor_mask(parents_of(t)).to(dev)
                lengths = torch.full((1,), prefix, device=dev, dtype=torch.long)
                q = torch.randn(t, H * D, device=dev, dtype=torch.bfloat16, generator=gen)
                times, diffs = time_case(q, lengths, anc, capacity, caches, args.reps)
                print(f"{capacity:8d} {prefix:6d} {t:5d} | {'':11} {times['sdpa']:7.1f} {times['tree']:9.1f} "
                      f"{times['split']:7.1f} | {diffs[0]:.2e}, {diffs[1]:.2e}", flush=True)
        del caches
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
