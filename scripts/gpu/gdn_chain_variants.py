"""H200, issue 3: one GDN chain-path variant per process (a crash cannot poison the next): errors vs float64
on the benchmark's chains, then (if it ran) fused / kernel time, CUDA-graph medians as `weaver bench kernels`.

    python3 scripts/gpu/gdn_chain_variants.py T '{"BV": 16}' [--fla]
"""

from __future__ import annotations

import json
import sys

import torch

from weaver.bench.kernels import make_set, method_chunk_chain, method_fused, reference, rel_err, time_graphs
from weaver.ops import triton as wt
from weaver.ops.triton.gdn_tree import chain_path_on, default_config


def main() -> int:
    T, change = int(sys.argv[1]), json.loads(sys.argv[2])
    cfg = default_config(T, 128)._replace(**change)
    sets = [make_set(T, "chain", 7 * T + i, torch.bfloat16, "cuda") for i in range(4)]
    name = f"T={T} chain {change or 'default'} (chain path {'on' if chain_path_on(T, cfg) else 'off'})"
    s = sets[0]
    o, _ = wt.gdn_tree(s["q"], s["k"], s["v"], s["g"], s["beta"], s["par"], initial_state=s["h0"], config=cfg,
                       out_dtype=torch.float32)  # fmt: skip
    torch.cuda.synchronize()
    err = rel_err(reference(s), o)
    fused, _ = time_graphs([method_fused(x, cfg) for x in sets], 50, 3)
    kernel, _ = time_graphs([method_fused(x, cfg, prebuilt=True) for x in sets], 50, 3)
    print(f"{name}: err (fp32 o) {err:.2e}  fused {fused:.1f} us  kernel {kernel:.1f} us", flush=True)
    if "--fla" in sys.argv:
        import fla.ops.gated_delta_rule as fla

        chunk, _ = time_graphs([method_chunk_chain(x, fla) for x in sets], 50, 3)
        print(f"T={T} chain fla chunk_gated_delta_rule: {chunk:.1f} us", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
