"""Run the default GDN tree configs once per size against the float64 reference; exit 1 on any failure.

A crash (illegal address) in a separate process cannot poison the benchmark's CUDA context.
"""

from __future__ import annotations

import sys

import torch

from weaver.bench.kernels import make_set, reference, rel_err
from weaver.kernels import triton as wt
from weaver.kernels.triton.gdn_tree import default_config

CASES = [(T, kind, True) for T in (16, 32, 64, 128, 256) for kind in ("tree", "chain")]
CASES += [(64, "tree", False), (128, "chain", False)]  # no initial state
TOL = 1e-4  # max |o - ref| / max |ref| with an fp32 o: the default bf16x3 products land at ~6e-6


def main() -> int:
    ok = True
    for T, kind, h0 in CASES:
        s = make_set(T, kind, 7 * T, torch.bfloat16, "cuda")
        if not h0:
            s["h0"] = None
        name = f"probe T={T} {kind} h0={h0} BT={default_config(T, 128).BT}"
        try:
            o, _ = wt.gdn_tree(s["q"], s["k"], s["v"], s["g"], s["beta"], s["par"], initial_state=s["h0"],
                               out_dtype=torch.float32)  # fmt: skip
            torch.cuda.synchronize()
            err = rel_err(reference(s), o)
        except Exception as e:  # noqa: BLE001 - report any failure, then stop: the context may be broken
            print(f"{name}: {type(e).__name__}: {str(e)[:200]}", flush=True)
            return 1
        ok &= err < TOL
        print(f"{name}: err {err:.2e} {'ok' if err < TOL else 'FAIL'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
