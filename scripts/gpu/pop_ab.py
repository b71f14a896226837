"""GPU, issue 19: the weaver build's two per-step launches that grow with the adapter's width, at the paper's
adapter (d_rank 2048, 16 heads, Qwen3.6-27B's vocabulary) and at SmolLM2's (d_rank 512, 8 heads), each launch
config against the shipped one (session 40's 27B profile: `_pop_kernel` 15 us and `node_attention_kernel` 17 us a
step at 2048, 3 and 4 us at 512; those profile times overlap their neighbours' under PDL, so here each launch is
timed alone).

1. pop + node inputs (`weaver.kernels.triton.weaver_frontier`): one program per batch row; warps x columns a pass.
   Each variant's outputs (step, nodes, x, q, visibility rows, K/V columns) must equal the shipped config's bit
   for bit (the same loads and fp32 rotation, only the tiling differs).
2. node attention (`weaver.kernels.triton.node_attention`): w = 4 rows a head over the round's S = P + N + w
   columns; BLOCK_S x warps; outputs compared with the shipped config's (max abs diff printed).

Times: a CUDA graph of 16 calls (a round's steps; the pop restores its frontier scores before each call, the
same copy on every side), median of replays, us per call.

    python3 scripts/gpu/pop_ab.py | tee $OUT/pop_ab.txt
"""

from __future__ import annotations

import itertools

import torch

import weaver.kernels.triton.weaver_frontier as wf
from weaver.bench.kernels import time_graphs
from weaver.kernels.triton.node_attention import node_attention

CALLS = 16
SHAPES = {  # name: (vocab, d_rank, heads)
    "paper 27B (d 2048)": (248_320, 2048, 16),
    "smollm2 (d 512)": (49_152, 512, 8),
}
BUDGET, WIDTH, CHILDREN, DEPTH, PREFIX = 64, 4, 16, 15, 16


def us(fn) -> float:
    """Median device us per call of fn in a graph of CALLS calls."""
    return time_graphs([fn] * CALLS, reps=40, warmup=3)[0]


def pop_inputs(vocab: int, d: int, heads: int, gen: torch.Generator, dev: str) -> dict:
    """A mid-build state: a full frontier of finite scores, the tree's first nodes, the vocabulary tables."""
    n = BUDGET + 1
    f = n * CHILDREN
    s_tot = PREFIX + 1 + n + WIDTH
    hd = d // heads
    fields = ((0, 8), (0, vocab), (1, DEPTH), (0, vocab))  # parent node, token, depth, candidate row
    item = torch.stack([torch.randint(lo, hi, (1, f + 1), generator=gen) for lo, hi in fields], dim=-1)
    visible = torch.rand(1, n + WIDTH, s_tot, generator=gen) < 0.3
    cos, sin = torch.randn(DEPTH + 1, hd, generator=gen), torch.randn(DEPTH + 1, hd, generator=gen)
    state = {
        "f_score": -torch.rand(1, f + 1, generator=gen, dtype=torch.float64) * 10,
        "f_item": item, "f_logp": -torch.rand(1, f + 1, generator=gen),
        "count": torch.tensor([8]), "nodes": torch.zeros(1, n + WIDTH, 4, dtype=torch.long),
        "logps": torch.zeros(1, n + WIDTH), "valid": torch.zeros(1, n + WIDTH, dtype=torch.bool),
        "visible": visible,
        "k_buf": torch.zeros(1, 1, heads, s_tot, hd, dtype=torch.bfloat16),
        "v_buf": torch.zeros(1, 1, heads, s_tot, hd, dtype=torch.bfloat16),
        "rope_cos": cos.to(torch.bfloat16), "rope_sin": sin.to(torch.bfloat16),
    }  # fmt: skip
    state = {k: v.to(dev) for k, v in state.items()}
    table = torch.Generator(dev).manual_seed(0)  # the vocabulary tables (up to 4 GB) drawn on the device
    state["cand_x"] = torch.randn(1, vocab, d, generator=table, device=dev, dtype=torch.bfloat16)
    state["cand_qkv"] = torch.randn(1, vocab, 3 * d, generator=table, device=dev, dtype=torch.bfloat16)
    return state


def run_pop(st: dict, score0: torch.Tensor, count0: torch.Tensor):
    """One pop from the saved frontier (scores and count restored first, as every side does)."""
    st["f_score"].copy_(score0)
    st["count"].copy_(count0)
    n = BUDGET + 1
    return wf.frontier_pop_inputs(
        st["f_score"], st["f_item"], st["f_logp"], st["count"], st["nodes"], st["logps"], st["valid"], n, DEPTH,
        WIDTH, st["visible"], st["cand_x"], st["cand_qkv"], st["k_buf"], st["v_buf"], 0,
        PREFIX + 1, st["rope_cos"], st["rope_sin"],
    )  # fmt: skip


def pop_ab(name: str, vocab: int, d: int, heads: int, dev: str) -> None:
    gen = torch.Generator().manual_seed(0)
    st = pop_inputs(vocab, d, heads, gen, dev)
    score0, count0 = st["f_score"].clone(), st["count"].clone()
    shipped = (wf.POP_WARPS, wf.COLUMNS_PER_PASS)
    variants = [shipped] + [v for v in itertools.product((4, 8, 16), (512, 1024, 2048)) if v != shipped
                            and v[1] <= max(512, d)]  # fmt: skip
    print(f"\n## pop + node inputs, {name}: B 1, budget {BUDGET}, w {WIDTH}, c {CHILDREN}, vocabulary rows, RoPE")
    print("| warps | columns a pass | us / call | equal to shipped |")
    print("|---:|---:|---:|---|")
    ref = None
    for warps, cols in variants:
        wf.POP_WARPS, wf.COLUMNS_PER_PASS = warps, cols
        out = [t.clone() for t in run_pop(st, score0, count0)] + [st[k].clone() for k in ("k_buf", "v_buf", "nodes")]
        if ref is None:
            ref = out
        same = all(torch.equal(a, b) for a, b in zip(ref, out, strict=True))
        t = us(lambda: run_pop(st, score0, count0))
        print(f"| {warps} | {cols} | {t:.2f} | {same} |", flush=True)
    wf.POP_WARPS, wf.COLUMNS_PER_PASS = shipped


def attention_ab(name: str, d: int, heads: int, dev: str) -> None:
    gen = torch.Generator().manual_seed(1)
    hd, s_tot = d // heads, PREFIX + 1 + BUDGET + 1 + WIDTH
    q = torch.randn(1, heads, WIDTH, hd, generator=gen, dtype=torch.bfloat16).to(dev)
    k = torch.randn(1, heads, s_tot, hd, generator=gen, dtype=torch.bfloat16).to(dev)
    v = torch.randn(1, heads, s_tot, hd, generator=gen, dtype=torch.bfloat16).to(dev)
    mask = (torch.rand(1, WIDTH, s_tot, generator=gen) < 0.3).to(dev)
    mask[..., 0] = True
    print(f"\n## node attention, {name}: w {WIDTH}, heads {heads}, head dim {hd}, S {s_tot}")
    print("| BLOCK_S | warps | us / call | max abs diff to shipped |")
    print("|---:|---:|---:|---:|")
    ref = node_attention(q, k, v, mask)
    print(f"| shipped | shipped | {us(lambda: node_attention(q, k, v, mask)):.2f} | 0 |", flush=True)
    for block_s, warps in itertools.product((16, 32, 64, 128), (1, 2, 4, 8)):
        out = node_attention(q, k, v, mask, block_s=block_s, num_warps=warps)
        diff = (out.float() - ref.float()).abs().max().item()
        t = us(lambda bs=block_s, nw=warps: node_attention(q, k, v, mask, block_s=bs, num_warps=nw))
        print(f"| {block_s} | {warps} | {t:.2f} | {diff:.2e} |", flush=True)


def main() -> None:
    dev = "cuda"
    print(torch.cuda.get_device_name(), torch.__version__)
    for name, (vocab, d, heads) in SHAPES.items():
        pop_ab(name, vocab, d, heads, dev)
        attention_ab(name, d, heads, dev)


if __name__ == "__main__":
    main()
