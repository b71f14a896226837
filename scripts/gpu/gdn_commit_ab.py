"""H200, issue 19: the stacked GDN commit (`gdn_tree_commit_stacked`, every layer in one launch) against a baseline
version of its kernel, at the Qwen3.6-27B GDN shape (48 layers, 48 value heads of 128 x 128 fp32 states), alone.

The baseline is a copy of the kernel module from an earlier commit, carried beside the tree (not committed twice):

    git show <rev>:src/weaver/kernels/triton/gdn_commit.py > .carry/gdn_commit_before.py   # here
    python3 scripts/gpu/gdn_commit_ab.py --baseline .carry/gdn_commit_before.py            # device (carry .carry)

Per (path length, value block BV) and side: us per launch (median over replays of a CUDA graph of 10 launches),
the bandwidth that is (state read + written) / time, and the largest difference between the two sides' states
after one fold from the same inputs.
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="a copy of gdn_commit.py from an earlier commit")
    parser.add_argument("--layers", type=int, default=48)
    parser.add_argument("--lengths", nargs="+", type=int, default=[1, 4, 16], help="valid path entries")
    parser.add_argument("--path-width", type=int, default=16, help="P: the path tensor's width (a round's depth + 1)")
    parser.add_argument("--nodes", type=int, default=17, help="T: verify nodes the factors hold")
    parser.add_argument("--bv", nargs="+", type=int, default=[32, 64])
    args = parser.parse_args()
    base = load_module(args.baseline)
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    L, H, HV, K, V = args.layers, 16, 48, 128, 128
    state_bytes = L * HV * K * V * 4
    print(f"L {L}, HV {HV}, K {K}, V {V}: {state_bytes / 1e6:.0f} MB of state, read and written; T {args.nodes}, "
          f"P {args.path_width}")  # fmt: skip
    print(f"{'length':>6} {'BV':>4} {'baseline us':>12} {'GB/s':>6} {'new us':>8} {'GB/s':>6} {'new/base':>8} "
          f"{'max |diff|':>10}")  # fmt: skip
    for length in args.lengths:
        for bv in args.bv:
            k, delta, G, path, state = inputs(L, args.nodes, length, args.path_width, H, HV, K, V)
            a, b = state.clone(), state.clone()
            base.gdn_tree_commit_stacked(k, delta, G, path, a, BV=bv)
            gdn_commit.gdn_tree_commit_stacked(k, delta, G, path, b, BV=bv)
            diff = (a - b).abs().max().item()
            t_base = time_us(lambda: base.gdn_tree_commit_stacked(k, delta, G, path, a, BV=bv))  # noqa: B023
            t_new = time_us(lambda: gdn_commit.gdn_tree_commit_stacked(k, delta, G, path, b, BV=bv))  # noqa: B023
            bw = 2 * state_bytes / 1e3
            print(f"{length:>6} {bv:>4} {t_base:12.2f} {bw / t_base:6.0f} {t_new:8.2f} {bw / t_new:6.0f} "
                  f"{t_new / t_base:8.3f} {diff:10.2e}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
