"""H200, issue 19: the stacked GDN commit (`gdn_tree_commit_stacked`, every layer in one launch) at the Qwen3.6-27B
GDN shape (48 layers, 48 value heads of 128 x 128 fp32 states), alone: its state tiles against each other, or
against a baseline version of its kernel.

Tiles (session 38): the fold is separable, so a program may hold [K, BV] (the shipped default, 128 x 32: BV-column
strips of 128 rows, 128 B apart-strided) or [BK, V] (whole rows, one contiguous 16 KB block) or anything between;
`--tiles BKxBV:warps ...` times each on the same inputs, and each one's states against the first tile's.

    python3 scripts/gpu/gdn_commit_ab.py --tiles 128x32:4 32x128:4 16x128:4 32x128:8 64x64:4 128x16:2

A baseline is a copy of the kernel module from an earlier commit, carried beside the tree (not committed twice):

    git show <rev>:src/weaver/kernels/triton/gdn_commit.py > .carry/gdn_commit_before.py   # here
    python3 scripts/gpu/gdn_commit_ab.py --baseline .carry/gdn_commit_before.py            # device (carry .carry)

Per path length and tile: us per launch (median over replays of a CUDA graph of 10 launches), the bandwidth that
is (state read + written) / time, and the largest difference from the reference side's states after one fold.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics

import torch

from weaver.kernels.triton import gdn_commit


def load_module(path: str):
    spec = importlib.util.spec_from_file_location("gdn_commit_baseline", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def inputs(L: int, T: int, length: int, P: int, H: int, HV: int, K: int, V: int, seed: int = 0):
    """Stacked factors of a T-node verify, one chain path of `length` valid entries padded to P, states."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    k = torch.nn.functional.normalize(torch.randn(L, 1, T, H, K, device="cuda", generator=gen), dim=-1)
    delta = 0.1 * torch.randn(L, 1, T, HV, V, device="cuda", generator=gen)
    G = -0.05 * torch.rand(L, 1, T, HV, device="cuda", generator=gen).cumsum(2)
    path = torch.full((1, P), -1, dtype=torch.long, device="cuda")
    path[0, :length] = torch.arange(length, device="cuda")
    state = torch.randn(L, 1, HV, K, V, device="cuda", generator=gen)
    return k, delta, G, path, state


def time_us(fn, launches: int = 10, reps: int = 30) -> float:
    """Median us per launch of fn, from replays of one CUDA graph of `launches` calls."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fn()  # compile and warm outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(launches):
            fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / launches)
    return statistics.median(times)


def parse_tile(text: str) -> tuple[int, int, int]:
    """'BKxBV:warps' -> (BK, BV, warps)."""
    tile, _, warps = text.partition(":")
    bk, _, bv = tile.partition("x")
    return int(bk), int(bv), int(warps or 4)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="a copy of gdn_commit.py from an earlier commit (else: tiles only)")
    parser.add_argument("--tiles", nargs="+", default=["64x64:4"], help="BKxBV:warps; the first is the reference")
    parser.add_argument("--layers", type=int, default=48)
    parser.add_argument("--lengths", nargs="+", type=int, default=[1, 4, 16], help="valid path entries")
    parser.add_argument("--path-width", type=int, default=16, help="P: the path tensor's width (a round's depth + 1)")
    parser.add_argument("--nodes", type=int, default=17, help="T: verify nodes the factors hold")
    args = parser.parse_args()
    tiles = [parse_tile(t) for t in args.tiles]
    base = load_module(args.baseline) if args.baseline else None
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    L, H, HV, K, V = args.layers, 16, 48, 128, 128
    state_bytes = L * HV * K * V * 4
    bw = 2 * state_bytes / 1e3
    print(f"L {L}, HV {HV}, K {K}, V {V}: {state_bytes / 1e6:.0f} MB of state, read and written; T {args.nodes}, "
          f"P {args.path_width}")  # fmt: skip
    print(f"{'length':>6} {'side':>9} {'BKxBV:w':>10} {'us':>8} {'GB/s':>6} {'/ first':>8} {'max |diff|':>10}")
    for length in args.lengths:
        k, delta, G, path, state = inputs(L, args.nodes, length, args.path_width, H, HV, K, V)
        # the baseline kernel holds all K rows with 4 warps; only its BV is a launch choice
        sides = [("shipped", gdn_commit, t) for t in tiles]
        sides += [("baseline", base, (K, tiles[0][1], 4))] if base else []
        want, first = None, None
        for name, module, (bk, bv, warps) in sides:
            out = state.clone()

            def fold(out=out, module=module, bk=bk, bv=bv, warps=warps, factors=(k, delta, G, path)):
                kw = dict(BK=bk, BV=bv, num_warps=warps) if module is gdn_commit else dict(BV=bv)
                module.gdn_tree_commit_stacked(*factors, out, **kw)

            fold()
            want = out.clone() if want is None else want
            diff = (out - want).abs().max().item()
            us = time_us(fold)
            first = first or us
            print(f"{length:>6} {name:>9} {f'{bk}x{bv}:{warps}':>10} {us:8.2f} {bw / us:6.0f} {us / first:8.3f} "
                  f"{diff:10.2e}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
