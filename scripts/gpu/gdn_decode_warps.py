"""Issue 19, the AR step's GDN decode kernel: does one (row, value head) program per 128 x 128 fp32 state run faster
with more warps? `gdn_decode` launched 8 (the 27B profile: 48 x 7.2 us on an H100, only 48 programs); after this
script's H100 run (benchmarks/results/scale/h100_session46_norm_fusion: 4 warps 6.69 us, 8 warps 7.69) it takes 4.

Times `gdn_decode_kernel` at the Qwen3.6-27B GDN shape (16 key heads, 48 value heads, K = V = 128) for 48 layers'
states in one CUDA graph (the states read from HBM, as in a step), per num_warps, and checks each against the
launcher's output.

    python3 scripts/gpu/gdn_decode_warps.py [--warps 2 4 8 16] [--reps 20]
"""

from __future__ import annotations

import argparse

import torch

from weaver.bench.kernels import time_graphs
from weaver.kernels.triton.gdn_decode import gdn_decode, gdn_decode_kernel

H, HV, K, V, LAYERS = 16, 48, 128, 128, 48


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--warps", type=int, nargs="+", default=[2, 4, 8, 16])
    p.add_argument("--reps", type=int, default=20)
    args = p.parse_args()
    dev, dt = torch.device("cuda"), torch.bfloat16
    gen = torch.Generator(device=dev).manual_seed(0)
    print(torch.cuda.get_device_name(), torch.__version__)
    c = 2 * H * K + HV * V
    mixed = torch.randn(1, c, device=dev, dtype=dt, generator=gen)
    b, a = (torch.randn(1, HV, device=dev, dtype=dt, generator=gen) for _ in range(2))
    z = torch.randn(1, HV * V, device=dev, dtype=dt, generator=gen)
    A_log, dt_bias = torch.rand(HV, device=dev, generator=gen), torch.rand(HV, device=dev, generator=gen)
    norm_w = torch.rand(V, device=dev, dtype=dt, generator=gen) + 0.5
    states = [torch.randn(1, HV, K, V, device=dev, generator=gen) * 0.1 for _ in range(LAYERS)]
    out = torch.empty(1, HV * V, device=dev, dtype=dt)

    def launch(state: torch.Tensor, warps: int) -> None:
        gdn_decode_kernel[(HV,)](
            mixed, b, a, z, A_log, dt_bias, norm_w, state, out, c, HV, HV, HV * V, K**-0.5, 1e-6,
            H=H, HV=HV, K=K, V=V, BK=K, BV=V, num_warps=warps,
        )  # fmt: skip

    start = states[0].clone()  # the timed launches advance `states` in place: every check starts from here
    ref_state = start.clone()
    ref = gdn_decode(mixed, b, a, z, A_log, dt_bias, norm_w, 1e-6, ref_state, H).reshape(1, -1)
    for warps in args.warps:
        check = start.clone()
        launch(check, warps)
        err = max((out.float() - ref.float()).abs().max().item(), (check - ref_state).abs().max().item())
        us = time_graphs([lambda w=warps: [launch(s, w) for s in states]], args.reps, warmup=2)[0] / LAYERS
        print(f"num_warps {warps:2d}: {us:6.2f} us a layer (max abs diff to the launcher {err:.1e})", flush=True)


if __name__ == "__main__":
    main()
