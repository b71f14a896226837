"""Issue 19: why the GDN tree call costs more inside the 27B verify than in `weaver bench kernels`.

Answered in session 56 by --between-gemm-mb: in a verify each call follows a GEMM that flushed L2, and the
65-node prep with 128-column state items cost ~35 us a layer there against ~21 back to back (docs/performance.md).

H100, session 36: the round's `gdn_tree_prep_kernel` took 29.5 us a layer at 65 nodes
(scale/h100_session36_profile), the bench's prep + solve 19.7 us (kernels/h100_session34_lead). Here the whole
tree call (prep + solve, structure prebuilt) and the prep alone, at the 27B GDN shape (H=16, HV=48, K=V=128, bf16),
48 layers' inputs back to back in one CUDA graph as in a verify, changing one thing at a time:

  model     as `weaver.kernels.gdn.gdn_tree` calls it: q/k/v row views of one conv output [T, 10240], raw a/b
            column views of the fused in-projection [T, 16480], q/k l2-normalised inside, gates from a/b inside,
            the factors into a stacked scratch, each layer reading its own slice of a stacked state
  dense     model, with q/k/v and a/b as contiguous copies
  warm      model, every layer reading the same state (the bench's states: 4 sets, L2-resident)
  no_aux    model, the factors into fresh buffers (as the bench)
  bench     the bench's call: precomputed gates, normalised q/k, no in-kernel l2norm, fresh factor buffers

Trees: `proposal` (the bench's best-first tree, depth <= 15) and `flat` (c = 16 children per node, breadth first:
what near-uniform adapter scores give, as the random-weight profile has).

    python3 scripts/gpu/prep_ab.py --T 17 65 [--reps 60]         # device: times, and each variant's o against model's
    python3 scripts/gpu/prep_ab.py --T 65 --variants model --configs default BT=32,BVP=64 split_prep=1
                                                                  # the model's call under other launch configs
    python3 scripts/gpu/prep_ab.py --T 65 --variants model --between-gemm-mb 200
                                                                  # also in context: each layer's call after an
                                                                  # M = T GEMM streaming 200 MB of its own weights
                                                                  # (L2 flushed, the SMs just busy, as in a verify);
                                                                  # ctx_* = (gemm + call) - gemm alone, a layer
    TRITON_INTERPRET=1 python scripts/gpu/prep_ab.py --device cpu --T 17 --layers 1   # here: the variants agree
"""

from __future__ import annotations

import argparse
import json

import torch

from weaver.bench.kernels import SHAPE, proposal_tree, time_graphs
from weaver.kernels.triton import build_tree_structure
from weaver.kernels.triton.gdn_tree import GDNTreeConfig, RawGates, default_config, gdn_tree
from weaver.ops.gdn import GDNTreeAux, gdn_gates

LAYERS = 48
CONV_DIM = 2 * SHAPE["H"] * SHAPE["K"] + SHAPE["HV"] * SHAPE["V"]  # 10240: q | k | v
FUSED_DIM = CONV_DIM + SHAPE["HV"] * SHAPE["V"] + 2 * SHAPE["HV"]  # 16480: qkv | z | b | a


def flat_tree(T: int, c: int = 16) -> list[int]:
    """Parents of a breadth-first tree with c children per node (node i's parent is (i - 1) // c)."""
    return [-1] + [(i - 1) // c for i in range(1, T)]


def layer_inputs(T: int, seed: int, device: str) -> dict:
    """One layer's verify inputs laid out as the model's: views into a conv output and a fused projection."""
    H, HV, K, V = SHAPE["H"], SHAPE["HV"], SHAPE["K"], SHAPE["V"]
    gen = torch.Generator(device=device).manual_seed(seed)
    conv_out = torch.randn(1, T, CONV_DIM, device=device, generator=gen).to(torch.bfloat16)
    fused = torch.randn(1, T, FUSED_DIM, device=device, generator=gen).to(torch.bfloat16)
    q, k, v = conv_out.split([H * K, H * K, HV * V], dim=-1)
    b_raw, a_raw = fused[..., CONV_DIM + HV * V : CONV_DIM + HV * V + HV], fused[..., CONV_DIM + HV * V + HV :]
    A_log = torch.randn(HV, device=device, generator=gen) * 0.5
    dt_bias = torch.randn(HV, device=device, generator=gen) * 0.5
    g, beta = gdn_gates(a_raw, b_raw, A_log, dt_bias)
    return dict(
        q=q.reshape(1, T, H, K), k=k.reshape(1, T, H, K), v=v.reshape(1, T, HV, V), a=a_raw, b=b_raw,
        gates=RawGates(A_log, dt_bias), g=g.contiguous(), beta=beta.contiguous(),
        qn=torch.nn.functional.normalize(q.reshape(1, T, H, K).float(), dim=-1).to(torch.bfloat16),
        kn=torch.nn.functional.normalize(k.reshape(1, T, H, K).float(), dim=-1).to(torch.bfloat16),
    )  # fmt: skip


def variant_calls(variant: str, layers: list[dict], tree, states: torch.Tensor, aux: GDNTreeAux, prep_only: bool,
                  config: GDNTreeConfig | None = None):  # fmt: skip
    """The 48 closures of one variant (each one layer's tree call)."""
    calls = []
    for i, x in enumerate(layers):
        state = states[0] if variant == "warm" else states[i]
        slot = None if variant in ("no_aux", "bench") else GDNTreeAux(aux.k[i], aux.delta[i], aux.G[i])
        if variant == "bench":
            args = (x["qn"], x["kn"], x["v"].contiguous(), x["g"], x["beta"])
            l2, gates = False, None
        elif variant == "dense":
            args = (x["q"].contiguous(), x["k"].contiguous(), x["v"].contiguous(), x["a"].contiguous(),
                    x["b"].contiguous())  # fmt: skip
            l2, gates = True, x["gates"]
        else:
            args = (x["q"], x["k"], x["v"], x["a"], x["b"])
            l2, gates = True, x["gates"]
        calls.append(make_call(args, tree, state, l2, gates, slot, prep_only, config))
    return calls


def make_call(args, tree, state, l2: bool, gates, slot, prep_only: bool, config=None):
    """One tree call through the public launcher (returns o), or stopped after its prep kernel."""
    return lambda: gdn_tree(*args, tree, initial_state=state, use_qk_l2norm=l2, aux_out=slot, gates=gates,
                            run_solve=not prep_only, config=config)[0]  # fmt: skip


def gemm_calls(T: int, mb: float, layers: int, device: str) -> list:
    """One M = T bf16 GEMM a layer, each over its own weight of `mb` MB (5120 wide: the 27B hidden size)."""
    n = int(mb * 2**20 / (5120 * 2))
    x = torch.randn(T, 5120, device=device, dtype=torch.bfloat16)
    weights = [torch.randn(n, 5120, device=device, dtype=torch.bfloat16) * 0.01 for _ in range(layers)]
    return [lambda w=w: x @ w.t() for w in weights]


def interleave(first: list, second: list) -> list:
    """first[0], second[0], first[1], second[1], ...: each layer's call right after its GEMM."""
    return [run for pair in zip(first, second, strict=True) for run in pair]


def config_change(text: str, base: GDNTreeConfig) -> GDNTreeConfig:
    """`default` or `field=value,field=value` applied to the default config (values typed as the field's default)."""
    if text == "default":
        return base
    change = {}
    for item in text.split(","):
        key, value = item.split("=")
        kind = type(getattr(base, key))
        change[key] = bool(int(value)) if kind is bool else kind(value)
    return base._replace(**change)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--T", type=int, nargs="+", default=[17, 65])
    parser.add_argument("--reps", type=int, default=60)
    parser.add_argument("--layers", type=int, default=LAYERS)
    parser.add_argument("--variants", nargs="+", default=["model", "dense", "warm", "no_aux", "bench"])
    parser.add_argument("--configs", nargs="+", default=["default"],
                        help="launch configs to time each variant under: default, or field=value,... changes to it")
    parser.add_argument("--between-gemm-mb", type=float, default=0.0,
                        help="also time each call after an M = T GEMM over this many MB of fresh weights (0: off)")
    parser.add_argument("--device", default="cuda", help="cpu: only check that the variants agree (TRITON_INTERPRET=1)")
    args = parser.parse_args()
    H, HV, K, V = SHAPE["H"], SHAPE["HV"], SHAPE["K"], SHAPE["V"]
    dev, L = args.device, args.layers
    gpu = torch.cuda.get_device_name() if dev == "cuda" else "cpu (interpreted, no timing)"
    print(json.dumps(dict(gpu=gpu, torch=torch.__version__, T=args.T, layers=L)))
    states = torch.randn(L, 1, HV, K, V, device=dev) * 0.1  # the stacked cache's states
    for T in args.T:
        layers = [layer_inputs(T, 100 * T + i, dev) for i in range(L)]
        f32 = dict(device=dev, dtype=torch.float32)
        aux = GDNTreeAux(torch.empty(L, 1, T, H, K, **f32), torch.empty(L, 1, T, HV, V, **f32),
                         torch.empty(L, 1, T, HV, **f32))  # fmt: skip
        gemms = gemm_calls(T, args.between_gemm_mb, L, dev) if args.between_gemm_mb and dev == "cuda" else None
        gemm_us = time_graphs(gemms, args.reps, 3)[0] if gemms else None
        if gemms:
            print(json.dumps(dict(T=T, gemm_mb=args.between_gemm_mb, gemm_us=round(gemm_us, 2))), flush=True)
        trees = dict(proposal=proposal_tree(T, 7), flat=flat_tree(T))
        for name, parents in trees.items():
            tree = build_tree_structure(torch.tensor([parents], device=dev))
            model_o = None
            for variant, text in [(v, c) for c in args.configs for v in args.variants]:
                cfg = config_change(text, default_config(T, V))
                row = dict(T=T, tree=name, variant=variant, change=text, config=cfg._asdict())
                o = variant_calls(variant, layers[:1], tree, states, aux, False, cfg)[0]().float()
                model_o = o if model_o is None else model_o  # the first variant is the reference
                row["max_abs_diff_vs_first"] = (o - model_o).abs().max().item()
                for prep_only in (False, True) if dev == "cuda" else ():
                    calls = variant_calls(variant, layers, tree, states, aux, prep_only, cfg)
                    us, _ = time_graphs(calls, args.reps, 3)
                    row["prep_us" if prep_only else "call_us"] = round(us, 2)
                    if gemms:  # time_graphs divides by its runs: a (gemm, call) pair is two of them
                        pair_us, _ = time_graphs(interleave(gemms, calls), args.reps, 3)
                        row["ctx_prep_us" if prep_only else "ctx_call_us"] = round(2 * pair_us - gemm_us, 2)
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
