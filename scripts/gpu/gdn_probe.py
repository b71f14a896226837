"""Run the default GDN tree configs once per size against the float64 reference; exit 1 on any failure.

A crash (illegal address) in a separate process cannot poison the benchmark's CUDA context.
"""

from __future__ import annotations

import sys

import torch

from weaver.bench.kernels import make_set, reference, rel_err
from weaver.ops import triton as wt
from weaver.ops.triton.gdn_tree import default_config


def main() -> int:
    ok = True
    for T in (16, 32, 64, 128, 256):
        for kind in ("tree", "chain"):
            s = make_set(T, kind, 7 * T, torch.bfloat16, "cuda")
            try:
                o, _ = wt.gdn_tree(s["q"], s["k"], s["v"], s["g"], s["beta"], s["par"], initial_state=s["h0"],
                                   out_dtype=torch.float32)  # fmt: skip
                torch.cuda.synchronize()
                err = rel_err(reference(s), o)
            except Exception as e:  # noqa: BLE001 - report any failure
                print(f"probe T={T} {kind} {default_config(T, 128)}: {type(e).__name__}: {str(e)[:200]}")
                return 1
            good = err < 1e-4
            ok &= good
            print(f"probe T={T} {kind} {default_config(T, 128)}: err {err:.2e} {'ok' if good else 'FAIL'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
