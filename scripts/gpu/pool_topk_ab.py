"""Device, issue 19: the Weaver build's pool selection (top-512 of each depth's drafter logits, unsorted) on fp32
logits, as the build gets them (both drafter heads emit fp32), against the same logits in bf16. torch.topk's radix
select takes one pass per 8-bit digit: 4 for fp32, 2 for bf16. Both name the same pool but for tied logits at its
edge. Session 44: bf16 would save ~33 us of a 27B build; it needs the drafter's head to hand out bf16 logits.

    python3 scripts/gpu/pool_topk_ab.py | tee $OUT/pool_topk_ab.txt
"""

from __future__ import annotations

import torch

from weaver.bench.kernels import time_graphs

CALLS = 16


def main() -> int:
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    print(f"{'rows x V':>16} {'K':>4} {'fp32 cast + topk':>17} {'bf16 topk':>10} {'same pool':>10}  (us per call)")
    gen = torch.Generator().manual_seed(0)
    for rows, vocab in ((15, 248_320), (15, 49_152)):
        x = (3 * torch.randn(rows, vocab, generator=gen)).to("cuda", torch.bfloat16)
        k = 512

        def cast(x=x, k=k):
            return torch.topk(x.float(), k, dim=-1, sorted=False)

        def own(x=x, k=k):
            return torch.topk(x, k, dim=-1, sorted=False)

        a, b = cast(), own()
        # the same set of values per row (tied logits may swap ids at the pool's edge)
        same = torch.equal(a.values.sort(dim=-1).values, b.values.float().sort(dim=-1).values)
        t_cast, t_own = (time_graphs([fn] * CALLS, reps=40, warmup=3)[0] for fn in (cast, own))
        print(f"{rows:>6} x {vocab:>7} {k:>4} {t_cast:17.1f} {t_own:10.1f} {str(same):>10}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
