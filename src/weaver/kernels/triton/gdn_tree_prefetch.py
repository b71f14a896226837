"""L2 prefetch of what one GDN tree prep item reads cold, issued before its first load (`GDNTreeConfig.prefetch`).

In a verify every prep item runs right after the layer's in-projection GEMM and the tree conv: q, k, v and the
raw gates were just written (L2), but the ancestor mask (built once a verify) and the committed state H0 (written by
the last commit) come from DRAM, and an item's loads depend on one another through the registers that hold them,
so they go one after another (H100, session 56: the 65-node prep costs 19-24 us a layer after a GEMM against 17-19
back to back). Asking L2 for those lines at once turns their round trips into one. A hint: nothing is ordered and
no value changes (the launcher passes `PREFETCH=False` when interpreting). Only the cold lines: prefetching q / k
rows too left ptxas 104 B of stack a thread at T = 65 against 56 without any prefetch (sm_90a, triton 3.9).
"""

from __future__ import annotations

import triton
import triton.language as tl

from weaver.kernels.triton._utils import prefetch_l2, prefetch_rows


@triton.jit
def prefetch_prep_item(p_anc, p_depth, p_h0, o_i, kind, w, T, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr,
                       BVP: tl.constexpr, TA: tl.constexpr, NTP: tl.constexpr, NPAIR: tl.constexpr,
                       USE_H0: tl.constexpr):  # fmt: skip
    """The cold lines of item w (kind 0 diagonal, 1 pair, 2 state) whose tile's node ids are o_i: its ancestor rows,
    and a diagonal item's depths or a state item's H0 columns (p_h0: the head's H0)."""
    AL: tl.constexpr = TA // 64 if TA >= 128 else 2  # an int8 row of T <= TA bytes (+1 line: it may start mid-line)
    VL: tl.constexpr = BVP // 16 if BVP >= 32 else 2  # BVP fp32 values (+1 line)
    o_n = tl.minimum(o_i, T - 1)
    prefetch_rows((p_anc + o_n * T)[:, None], T, AL)
    if kind == 0:
        prefetch_l2(p_depth + o_n)
    elif kind == 2:
        if USE_H0:
            c = (w - NTP - NPAIR) % ((V + BVP - 1) // BVP)
            n_v = tl.minimum(V - c * BVP, BVP)  # a chunk past V (V not a multiple of BVP) stops at the row's end
            prefetch_rows((p_h0 + tl.minimum(tl.arange(0, BK), K - 1) * V + c * BVP)[:, None], n_v, VL)
