r"""GDN tree verification in Triton (DESIGN §4.3, §4.6): two launches per layer, static shapes.

Math (one value head; G = root-path prefix sum of g, M = ancestor-or-self mask, H0 read only)::

    A[i, j] = beta_i exp(G_i - G_j) k_i.k_j            j a strict ancestor of i
    (I + A) Delta = rhs = beta * (V - exp(G) * (K H0))  unit lower triangular (topological order)
    O = scale * [exp(G) * (Q H0) + (M * exp(G_i - G_j) * Q K^T) Delta]

With row tiles of BT nodes and X_ii = (I + A_ii)^-1, block forward substitution is
``Delta_i = X_ii (rhs_i - sum_{j<i} A_ij Delta_j)``. Everything but that short chain runs in parallel first:

1. `gdn_tree_prep_kernel`: independent work items per (batch row x value head), none waiting for another:
   - diagonal item i: G of tile i (masked row sums of the ancestor mask -> aux.G), aux.k, P_ii and
     X_ii as the Neumann product (I - A)(I + A^2)(I + A^4)... whose length is set at run time by the
     longest ancestor chain inside the tile (a tree of depth d needs ceil(log2(d + 1)) factors);
   - pair item (i, j), j < i: the decayed, masked A_ij and P_ij = scale exp(G_i - G_j) Q_i K_j^T;
   - state item (i, value chunk c): rhs_i = beta (v - e^G K_i H0) and QH_i = scale e^G Q_i H0.
   The diagonal items, the longest, are dispatched first (items are the grid's slow axis).
2. `gdn_tree_solve_kernel`, one program per (value block, batch row x value head), keeps the residual of
   all T rows in registers (right-looking): Delta_i = X_ii (tile i of the residual), then
   residual -= A[:, i] Delta_i and tile i of the residual becomes Delta_i. Afterwards O = QH + P Delta.
   The chain is NT = T / BT steps of two small products each, with no memory round trip.

Precision: q/k/v bf16 or fp32; gates, state, G, A, the solve and Delta in fp32. Gram dots of bf16
inputs are exact products with fp32 accumulation and the state products split H0 into bf16 hi + lo
(~fp32); the fp32 x fp32 products of the solve and output follow `precision`, those of the prep (the
Neumann product; all Grams of fp32 inputs) `inv_precision` (see `weaver.kernels.triton._utils.PRECISIONS`;
the defaults: ieee for fp32 inputs, bf16x3 for bf16 inputs).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from weaver.kernels.triton._utils import check_device, dot_lp, interpreting, mm, next_pow2, precision_code, split_bf16
from weaver.kernels.triton.structure import TreeStructure, as_structure
from weaver.ops.gdn import GDNTreeAux, check_gdn_shapes

__all__ = ["GDNTreeConfig", "RawGates", "default_config", "gdn_tree"]


class RawGates(NamedTuple):
    """A GDN layer's gate parameters. Handed to `gdn_tree`, its g and beta are the in-projection's raw a and b
    and the prep kernel computes g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b) (one launch fewer)."""

    A_log: torch.Tensor  # [HV]
    dt_bias: torch.Tensor  # [HV]


class GDNTreeConfig(NamedTuple):
    """Launch configuration of the tree kernels (fixed; no autotune, so they run interpreted)."""

    BT: int = 32  # node rows per tile (16, 32 or 64)
    BV: int = 32  # value columns per program of the solve kernel
    num_warps: int = 4  # of the solve kernel
    num_stages: int = 1  # of the solve kernel
    # fp32 x fp32 products: 'auto' = ieee for fp32 inputs, bf16x3 (~fp32) for bf16 inputs. The v7 sweep: tf32
    # is 1-2 us faster at T=128 but leaves ~1e-3 of error in o (1.9e-3 norm-wise after bf16 rounding on chains,
    # against the 1.66e-3 floor); bf16x3 stays at 3-6e-6.
    precision: str = "auto"
    prep_warps: int = 4  # of the prep kernel
    prep_stages: int = 1  # of the prep kernel
    BVP: int = 32  # value columns per state item of the prep kernel
    inv_precision: str = "auto"  # fp32 x fp32 products of the prep kernel; 'auto' = as `precision`
    # one prep launch per item kind (diagonal, pair, state) instead of one for all: the pair and state items
    # then run without the Neumann branch's registers (an idea for T=256, not yet timed on the H200)
    split_prep: bool = False
    # block forward substitution: "right" keeps the residual of all T rows in registers; "left" holds one row
    # tile and re-reads each Delta_j the program wrote (no spills at T=256, where "right" spills 464 B/thread
    # on sm_90). H200 v8: left 98.8 vs right 110.6 us at T=256 (tree), 27.7 vs 27.1 at T=128
    solve_order: str = "right"


def default_config(T: int, V: int, dtype: torch.dtype = torch.bfloat16) -> GDNTreeConfig:
    """The fixed configuration for T nodes, from the H200 sweeps (benchmarks/results/kernels/NOTES.md, v7).
    bf16 inputs: tiles of 16 / 32 rows up to 32 nodes, 64 rows beyond (half the solve's steps of 32-row
    tiles: 29 vs 44 us at T=128), whose state items then take all 128 value columns at once (fewer
    programs, fewer waves). 4 warps for the solve at every size (8 were slower even at T=256).
    fp32 inputs (ieee dots, register-hungry): 16/32-row tiles on 8 warps (fewer spills, ptxas sm_90a).
    Beyond 128 nodes the solve is left-looking (98.8 vs 110.6 us at T=256; no register spills).
    A caller that wants other tile rows passes its own GDNTreeConfig."""
    fp32 = dtype == torch.float32
    BT = 16 if T <= 16 else 32 if (T <= 32 or fp32) else 64
    return GDNTreeConfig(BT=BT, BV=min(32, next_pow2(V)), num_warps=8 if fp32 else 4, prep_warps=8 if fp32 else 4,
                         BVP=min(128, next_pow2(V)) if BT == 64 else 32,
                         solve_order="left" if T > 128 else "right")  # fmt: skip


def tile_rows(T: int, BT: int) -> int:
    """Rows the solve holds in registers: T rounded up to a power of two (and at least one tile)."""
    return max(BT, triton.next_power_of_2(int(T)))


def prep_items(T: int, BT: int, V: int, BVP: int) -> tuple[int, int, int]:
    """(diagonal, pair, state) work items of the prep kernel per batch row x value head."""
    ntp = tile_rows(T, BT) // BT
    return ntp, ntp * (ntp - 1) // 2, ntp * triton.cdiv(V, BVP)


@triton.jit
def _gram(a, b_t, LOWP: tl.constexpr, PREC: tl.constexpr, INTERPRET: tl.constexpr):
    """a @ b_t for rows of q/k in their own dtype (bf16: exact products, fp32 accumulation)."""
    if LOWP:
        return dot_lp(a, b_t, INTERPRET)
    else:
        return mm(a.to(tl.float32), b_t.to(tl.float32), PREC, INTERPRET)


@triton.jit
def _rnorm(x, L2NORM: tl.constexpr, BT: tl.constexpr):
    """1 / sqrt(sum(x^2) + 1e-6) per row (ones without L2NORM)."""
    if L2NORM:
        xf = x.to(tl.float32)
        return 1.0 / tl.sqrt(tl.sum(xf * xf, 1) + 1e-6)
    else:
        return tl.full([BT], 1.0, dtype=tl.float32)


@triton.jit
def _path_sums(p_anc, g_all, o_r, m_r, o_a, m_a, T):
    """G of rows o_r: sum of g over each row's ancestors-or-self (masked row sums of the int8 mask)."""
    b_m = tl.load(p_anc + o_r[:, None] * T + o_a[None, :], mask=m_r[:, None] & m_a[None, :], other=0)
    return tl.sum(tl.where(b_m != 0, g_all[None, :], 0.0), 1)


@triton.jit
def _keys(p_k, p_anc, b_ga, o_r, m_r, o_a, m_a, o_k, m_k, T, sqt, BT: tl.constexpr, L2NORM: tl.constexpr):
    """Rows o_r (row n at n * sqt): G, k (input dtype) and k's inverse norm."""
    b_G = _path_sums(p_anc, b_ga, o_r, m_r, o_a, m_a, T)
    b_k = tl.load(p_k + o_r[:, None] * sqt + o_k[None, :], mask=m_r[:, None] & m_k[None, :], other=0)
    return b_G, b_k, _rnorm(b_k, L2NORM, BT)


@triton.jit
def _queries(p_q, p_beta, o_r, m_r, o_k, m_k, scale, sqt, sbt, BT: tl.constexpr, L2NORM: tl.constexpr,
             RAW: tl.constexpr):  # fmt: skip
    """Rows o_r (row n at n * sqt): q, q's inverse norm times scale, and beta (node n at n * sbt; RAW: the
    projection's b, beta = sigmoid(b) rounded to b's dtype as torch computes it)."""
    b_q = tl.load(p_q + o_r[:, None] * sqt + o_k[None, :], mask=m_r[:, None] & m_k[None, :], other=0)
    b_b = tl.load(p_beta + o_r * sbt, mask=m_r, other=0)
    if RAW:
        b_beta = tl.sigmoid(b_b.to(tl.float32)).to(b_b.dtype).to(tl.float32)
    else:
        b_beta = b_b.to(tl.float32)
    return b_q, _rnorm(b_q, L2NORM, BT) * scale, b_beta


@triton.jit
def _log_decays(g, A_log, dt_bias, i_b, i_hv, o_a, m_a, sgb, sgt, RAW: tl.constexpr):
    """g of nodes o_a (node n at n * sgt); RAW: from the projection's a, g = -exp(A_log) softplus(a + dt_bias)."""
    b_g = tl.load(g + i_b * sgb + i_hv + o_a * sgt, mask=m_a, other=0).to(tl.float32)
    if RAW:
        b_x = b_g + tl.load(dt_bias + i_hv).to(tl.float32)
        softplus = tl.where(b_x > 20.0, b_x, tl.log(1.0 + tl.exp(tl.minimum(b_x, 20.0))))
        b_g = -tl.exp(tl.load(A_log + i_hv).to(tl.float32)) * softplus
    return b_g


@triton.jit
def _decay(p_anc, b_Gi, b_Gj, o_i, m_i, o_j, m_j, T):
    """exp(G_i - G_j) where j is an ancestor-or-self of i, else 0 (masked before exp: no overflow); the mask."""
    b_m = tl.load(p_anc + o_i[:, None] * T + o_j[None, :], mask=m_i[:, None] & m_j[None, :], other=0) != 0
    return tl.exp(tl.where(b_m, b_Gi[:, None] - b_Gj[None, :], float("-inf"))), b_m


@triton.jit
def _neumann_inverse(b_a, n_chain, BT: tl.constexpr, LOG2BT: tl.constexpr, PREC: tl.constexpr,
                     INTERPRET: tl.constexpr):  # fmt: skip
    """(I + A)^-1 = (I - A)(I + A^2)(I + A^4)... for strictly lower A with A^n_chain = 0: only as many
    factors as the longest ancestor chain needs (run-time bound, static unroll)."""
    o_t = tl.arange(0, BT)
    b_n = -b_a
    b_x = tl.where(o_t[:, None] == o_t[None, :], 1.0, 0.0) + b_n
    for lv in tl.static_range(1, LOG2BT):
        if (1 << lv) < n_chain:
            b_n = mm(b_n, b_n, PREC, INTERPRET)
            b_x = b_x + mm(b_x, b_n, PREC, INTERPRET)
    return b_x


@triton.jit(do_not_specialize=["T"])
def gdn_tree_prep_kernel(
    q, k, v, g, beta, A_log, dt_bias, h0, anc, depth, amat, pmat, rhs, qh, aux_k, aux_G, scale, T, W0, sqb, sqt,
    svb, svt, sgb, sgt, sbb, sbt,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
    BVP: tl.constexpr, TP: tl.constexpr, TA: tl.constexpr, LOG2BT: tl.constexpr, USE_H0: tl.constexpr,
    L2NORM: tl.constexpr, LOWP: tl.constexpr, PREC: tl.constexpr, INTERPRET: tl.constexpr, ITEMS: tl.constexpr,
    RAW: tl.constexpr,
):  # fmt: skip
    """Everything that needs no Delta. Program (batch row x value head = axis 0, item w = W0 + axis 1):
      w < NTP                 diagonal item of tile i = w (aux.G, aux.k, X_ii, P_ii);
      w < NTP + NPAIR         pair item (i, j), j < i, numbered i (i - 1) / 2 + j (A_ij, P_ij);
      otherwise               state item (tile i, value chunk c) (rhs_i, QH_i).
    ITEMS = 0 takes every kind in one launch; 1 / 2 / 3 compile the diagonal / pair / state branch alone
    (`GDNTreeConfig.split_prep`: one launch per kind, each with only its own register footprint).
    Items of tiles past T do nothing. Scalar int64 bases per (batch row, head), int32 offsets inside. q and k
    (one layout) and v may be row views of a wider tensor: batch row b, node n at b * s?b + n * s?t, each
    node's heads and features dense. g and beta: node n of batch row b at b * sgb + n * sgt (b * sbb + n * sbt);
    RAW: they are the projection's a and b, and the gates are computed here (no gate kernel before the verify)."""
    i_bh, w = tl.program_id(0), tl.program_id(1) + W0
    i_b, i_hv = (i_bh // HV).to(tl.int64), i_bh % HV
    R: tl.constexpr = HV // H
    NTP: tl.constexpr = TP // BT
    NPAIR: tl.constexpr = NTP * (NTP - 1) // 2
    NVC: tl.constexpr = (V + BVP - 1) // BVP
    i_h = i_hv // R
    p_anc = anc + i_b * T * T
    p_k = k + i_b * sqb + i_h * K  # row n at n * sqt
    p_q = q + i_b * sqb + i_h * K
    p_beta = beta + i_b * sbb + i_hv  # node n at n * sbt
    p_m = pmat + i_bh.to(tl.int64) * TP * TP  # [TP, TP] per (batch row, value head)
    p_a = amat + i_bh.to(tl.int64) * TP * TP
    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, BK)
    m_k = o_k < K
    o_a = tl.arange(0, TA)
    m_a = o_a < T
    # the item's kind (0 diagonal, 1 pair, 2 state) and the tile it works on (pair items: the row tile i)
    if ITEMS == 0:
        kind = tl.where(w < NTP, 0, tl.where(w < NTP + NPAIR, 1, 2))
    else:
        kind = ITEMS - 1
    if kind == 0:
        i = w
    elif kind == 1:
        i = w * 0 + 1
        for ii in tl.static_range(2, NTP):
            if w - NTP >= ii * (ii - 1) // 2:
                i = w * 0 + ii
    else:
        i = (w - NTP - NPAIR) // NVC
    if i * BT < T:
        o_i = i * BT + o_t
        m_i = o_i < T
        b_ga = _log_decays(g, A_log, dt_bias, i_b, i_hv, o_a, m_a, sgb, sgt, RAW)
        b_Gi, b_ki, b_rki = _keys(p_k, p_anc, b_ga, o_i, m_i, o_a, m_a, o_k, m_k, T, sqt, BT, L2NORM)
        b_qi, b_rqi, b_beta = _queries(p_q, p_beta, o_i, m_i, o_k, m_k, scale, sqt, sbt, BT, L2NORM, RAW)
        if kind == 0:
            tl.store(aux_G + i_b * T * HV + i_hv + o_i * HV, b_Gi, mask=m_i)
            if i_hv % R == 0:
                tl.store(aux_k + i_b * T * H * K + i_h * K + o_i[:, None] * (H * K) + o_k[None, :],
                         b_ki.to(tl.float32) * b_rki[:, None], mask=m_i[:, None] & m_k[None, :])  # fmt: skip
            b_dec, b_mii = _decay(p_anc, b_Gi, b_Gi, o_i, m_i, o_i, m_i, T)
            b_kit = tl.trans(b_ki)
            b_p = _gram(b_qi, b_kit, LOWP, PREC, INTERPRET) * b_rqi[:, None] * (b_rki[None, :] * b_dec)
            tl.store(p_m + o_i[:, None] * TP + o_i[None, :], b_p)
            b_s = _gram(b_ki, b_kit, LOWP, PREC, INTERPRET) * (b_rki * b_beta)[:, None] * (b_rki[None, :] * b_dec)
            b_s = tl.where(o_t[:, None] > o_t[None, :], b_s, 0.0)  # A_ii: strict ancestors only
            b_dep = tl.load(depth + i_b * T + o_i, mask=m_i, other=0)  # longest ancestor chain inside the tile
            b_top = tl.min(tl.where(b_mii, b_dep[None, :], 1 << 30), 1)  # bounds the nilpotency of A_ii
            n_chain = tl.max(tl.where(m_i, b_dep - b_top + 1, 1), 0)
            b_x = _neumann_inverse(b_s, n_chain, BT, LOG2BT, PREC, INTERPRET)
            tl.store(p_a + o_i[:, None] * TP + o_i[None, :], b_x)
        elif kind == 1:
            j = w - NTP - i * (i - 1) // 2
            o_j = j * BT + o_t
            m_j = o_j < T
            b_Gj, b_kj, b_rkj = _keys(p_k, p_anc, b_ga, o_j, m_j, o_a, m_a, o_k, m_k, T, sqt, BT, L2NORM)
            b_dec, _ = _decay(p_anc, b_Gi, b_Gj, o_i, m_i, o_j, m_j, T)
            b_col = b_rkj[None, :] * b_dec
            b_kjt = tl.trans(b_kj)
            b_aij = _gram(b_ki, b_kjt, LOWP, PREC, INTERPRET) * (b_rki * b_beta)[:, None] * b_col
            tl.store(p_a + o_i[:, None] * TP + o_j[None, :], b_aij)
            b_pij = _gram(b_qi, b_kjt, LOWP, PREC, INTERPRET) * b_rqi[:, None] * b_col
            tl.store(p_m + o_i[:, None] * TP + o_j[None, :], b_pij)
        else:
            c = (w - NTP - NPAIR) % NVC
            _state_chunk(v, h0, rhs, qh, b_ki, b_qi, b_rki, b_rqi, b_beta, b_Gi, o_i, m_i, o_k, m_k, c,
                         i_b, i_bh, i_hv, svb, svt, K, V, BVP, TP, USE_H0, LOWP, PREC, INTERPRET)  # fmt: skip


@triton.jit
def _state_chunk(v, h0, rhs, qh, b_ki, b_qi, b_rki, b_rqi, b_beta, b_Gi, o_i, m_i, o_k, m_k, c, i_b, i_bh, i_hv,
                 svb, svt, K: tl.constexpr, V: tl.constexpr, BVP: tl.constexpr, TP: tl.constexpr,
                 USE_H0: tl.constexpr, LOWP: tl.constexpr, PREC: tl.constexpr, INTERPRET: tl.constexpr):  # fmt: skip
    """Value chunk c of tile i: rhs = beta (v - e^G K_i H0) and QH = e^G Q_i H0 (scaled, normalised); v's node n
    of batch row b at b * svb + n * svt."""
    o_v = c * BVP + tl.arange(0, BVP)
    m_iv = m_i[:, None] & (o_v < V)[None, :]
    b_r = tl.load(v + i_b * svb + i_hv * V + o_i[:, None] * svt + o_v[None, :], mask=m_iv, other=0).to(tl.float32)
    o_x = i_bh.to(tl.int64) * TP * V + o_i[:, None] * V + o_v[None, :]  # [TP, V] per (batch row, value head)
    if USE_H0:
        b_h = tl.load(h0 + i_bh.to(tl.int64) * K * V + o_k[:, None] * V + o_v[None, :],
                      mask=m_k[:, None] & (o_v < V)[None, :], other=0).to(tl.float32)  # fmt: skip
        if LOWP:  # H0 = hi + lo in bf16; q/k are exact in bf16: two passes, ~fp32
            b_hhi, b_hlo = split_bf16(b_h, INTERPRET)
            b_kh = dot_lp(b_ki, b_hhi, INTERPRET) + dot_lp(b_ki, b_hlo, INTERPRET)
            b_qh = dot_lp(b_qi, b_hhi, INTERPRET) + dot_lp(b_qi, b_hlo, INTERPRET)
        else:
            b_kh = mm(b_ki.to(tl.float32), b_h, PREC, INTERPRET)
            b_qh = mm(b_qi.to(tl.float32), b_h, PREC, INTERPRET)
        b_eG = tl.exp(b_Gi)
        b_r -= (b_eG * b_rki)[:, None] * b_kh
        tl.store(qh + o_x, (b_eG * b_rqi)[:, None] * b_qh, mask=m_iv)
    tl.store(rhs + o_x, b_beta[:, None] * b_r, mask=m_iv)


@triton.jit
def _tile_of(b_r, i, NT: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr):
    """Rows i*BT .. i*BT+BT-1 of the register tensor b_r [NT*BT, BV]."""
    if NT == 1:
        return b_r
    else:
        b_r3 = tl.reshape(b_r, (NT, BT, BV))
        sel = (tl.arange(0, NT) == i)[:, None, None]
        return tl.sum(tl.where(sel, b_r3, 0.0), 0)


@triton.jit
def _set_tile(b_r, b_d, i, NT: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr):
    """b_r [NT*BT, BV] with rows i*BT .. i*BT+BT-1 replaced by b_d [BT, BV]."""
    if NT == 1:
        return b_d
    else:
        b_r3 = tl.reshape(b_r, (NT, BT, BV))
        sel = (tl.arange(0, NT) == i)[:, None, None]
        return tl.reshape(tl.where(sel, b_d[None, :, :], b_r3), (NT * BT, BV))


@triton.jit
def _solve_bases(amat, pmat, rhs, qh, o, aux_delta, T, HV: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
                 TP: tl.constexpr):  # fmt: skip
    """This solve program's (value block, batch row x value head) bases: A/X and P [TP, TP], rhs and QH
    [TP, V] (scratch, per head), Delta and o (node n at n * HV * V)."""
    i_v, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_hv = (i_bh // HV).to(tl.int64), i_bh % HV
    p_a = amat + i_bh.to(tl.int64) * TP * TP
    p_m = pmat + i_bh.to(tl.int64) * TP * TP
    p_r = rhs + i_bh.to(tl.int64) * TP * V + i_v * BV
    p_qh = qh + i_bh.to(tl.int64) * TP * V + i_v * BV
    p_d = aux_delta + i_b * T * HV * V + i_hv * V + i_v * BV
    p_o = o + i_b * T * HV * V + i_hv * V + i_v * BV
    return p_a, p_m, p_r, p_qh, p_d, p_o


@triton.jit(do_not_specialize=["T"])
def gdn_tree_solve_kernel(
    amat, pmat, rhs, qh, o, aux_delta, T,
    HV: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr, TP: tl.constexpr,
    USE_H0: tl.constexpr, PREC: tl.constexpr, INTERPRET: tl.constexpr,
):  # fmt: skip
    """Right-looking block forward substitution for one (value block, batch row x value head)."""
    i_v = tl.program_id(0)
    NT: tl.constexpr = TP // BT
    p_a, p_m, p_r, p_qh, p_d, p_o = _solve_bases(amat, pmat, rhs, qh, o, aux_delta, T, HV, V, BV, TP)
    o_r = tl.arange(0, TP)
    m_r = o_r < T
    o_t = tl.arange(0, BT)
    o_c = tl.arange(0, BV)
    m_c = i_v * BV + o_c < V
    b_r = tl.load(p_r + o_r[:, None] * V + o_c[None, :], mask=m_r[:, None] & m_c[None, :], other=0)
    for i in tl.static_range(NT):
        if i * BT < T:
            o_i = i * BT + o_t
            m_i = o_i < T
            b_x = tl.load(p_a + o_i[:, None] * TP + o_i[None, :], mask=m_i[:, None] & m_i[None, :], other=0)
            b_d = mm(b_x, _tile_of(b_r, i, NT, BT, BV), PREC, INTERPRET)  # Delta_i = X_ii residual_i
            tl.store(p_d + o_i[:, None] * (HV * V) + o_c[None, :], b_d, mask=m_i[:, None] & m_c[None, :])
            if i < NT - 1:  # rows below tile i: residual -= A[:, i] Delta_i
                m_b = m_r & (o_r >= (i + 1) * BT)
                b_ac = tl.load(p_a + o_r[:, None] * TP + o_i[None, :], mask=m_b[:, None], other=0)
                b_r = b_r - mm(b_ac, b_d, PREC, INTERPRET)
            b_r = _set_tile(b_r, b_d, i, NT, BT, BV)
    # b_r is Delta now: O = QH + P Delta, one row tile at a time (P is zero right of the tile's diagonal block)
    for i in tl.static_range(NT):
        if i * BT < T:
            o_i = i * BT + o_t
            m_i = o_i < T
            b_p = tl.load(p_m + o_i[:, None] * TP + o_r[None, :], mask=m_i[:, None] & (o_r < (i + 1) * BT)[None, :],
                          other=0)  # fmt: skip
            b_o = mm(b_p, b_r, PREC, INTERPRET)
            m_ic = m_i[:, None] & m_c[None, :]
            if USE_H0:
                b_o += tl.load(p_qh + o_i[:, None] * V + o_c[None, :], mask=m_ic, other=0)
            tl.store(p_o + o_i[:, None] * (HV * V) + o_c[None, :], b_o.to(o.dtype.element_ty), mask=m_ic)


@triton.jit(do_not_specialize=["T"])
def gdn_tree_solve_left_kernel(
    amat, pmat, rhs, qh, o, aux_delta, T,
    HV: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr, TP: tl.constexpr,
    USE_H0: tl.constexpr, PREC: tl.constexpr, INTERPRET: tl.constexpr,
):  # fmt: skip
    """Left-looking block forward substitution for one (value block, batch row x value head): tile i's
    residual rhs_i - sum_{j<i} A_ij Delta_j from the Delta_j this program stored (a barrier makes them
    visible to all its threads), Delta_i = X_ii residual_i; then O_i = QH_i + sum_{j<=i} P_ij Delta_j.
    Registers hold one row tile at a time, whatever T."""
    i_v = tl.program_id(0)
    NT: tl.constexpr = TP // BT
    p_a, p_m, p_r, p_qh, p_d, p_o = _solve_bases(amat, pmat, rhs, qh, o, aux_delta, T, HV, V, BV, TP)
    o_t = tl.arange(0, BT)
    o_c = tl.arange(0, BV)
    m_c = i_v * BV + o_c < V
    for i in tl.static_range(NT):
        if i * BT < T:
            o_i = i * BT + o_t
            m_i = o_i < T
            m_ic = m_i[:, None] & m_c[None, :]
            b_r = tl.load(p_r + o_i[:, None] * V + o_c[None, :], mask=m_ic, other=0)
            for j in tl.static_range(i):  # tiles above i lie wholly inside T
                o_j = j * BT + o_t
                b_a = tl.load(p_a + o_i[:, None] * TP + o_j[None, :], mask=m_i[:, None], other=0)
                b_dj = tl.load(p_d + o_j[:, None] * (HV * V) + o_c[None, :], mask=m_c[None, :], other=0)
                b_r -= mm(b_a, b_dj, PREC, INTERPRET)
            b_x = tl.load(p_a + o_i[:, None] * TP + o_i[None, :], mask=m_i[:, None] & m_i[None, :], other=0)
            tl.store(p_d + o_i[:, None] * (HV * V) + o_c[None, :], mm(b_x, b_r, PREC, INTERPRET), mask=m_ic)
            tl.debug_barrier()  # Delta_i written by every thread before any reads it back
    for i in tl.static_range(NT):
        if i * BT < T:
            o_i = i * BT + o_t
            m_i = o_i < T
            m_ic = m_i[:, None] & m_c[None, :]
            b_o = tl.zeros([BT, BV], dtype=tl.float32)
            for j in tl.static_range(i + 1):
                o_j = j * BT + o_t
                m_j = o_j < T
                b_p = tl.load(p_m + o_i[:, None] * TP + o_j[None, :], mask=m_i[:, None] & m_j[None, :], other=0)
                b_dj = tl.load(p_d + o_j[:, None] * (HV * V) + o_c[None, :], mask=m_j[:, None] & m_c[None, :], other=0)
                b_o += mm(b_p, b_dj, PREC, INTERPRET)
            if USE_H0:
                b_o += tl.load(p_qh + o_i[:, None] * V + o_c[None, :], mask=m_ic, other=0)
            tl.store(p_o + o_i[:, None] * (HV * V) + o_c[None, :], b_o.to(o.dtype.element_ty), mask=m_ic)


def gdn_tree_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    tree: TreeStructure,
    scale: float,
    initial_state: torch.Tensor | None,
    use_qk_l2norm: bool,
    config: GDNTreeConfig,
    out_dtype: torch.dtype,
    run_solve: bool = True,
    aux_out: GDNTreeAux | None = None,
    gates: RawGates | None = None,
) -> tuple[torch.Tensor, GDNTreeAux]:
    """Allocate outputs and scratch, launch the prep and solve kernels (inputs already validated).
    run_solve=False stops after the prep kernel (for stage timing only; o and aux.delta are then garbage);
    aux_out: where the factors go (validated by the caller), else allocated here; gates: g and beta are raw."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    BT, BV = config.BT, config.BV
    if BT not in (16, 32, 64) or BV < 16 or BV & (BV - 1) or config.BVP < 16 or config.BVP & (config.BVP - 1):
        raise ValueError(f"config needs BT in (16, 32, 64) and BV, BVP powers of two >= 16, got {config}")
    if config.solve_order not in ("right", "left"):
        raise ValueError(f"solve_order must be 'right' or 'left', got {config.solve_order!r}")
    dev = q.device
    TP = tile_rows(T, BT)
    o = torch.empty(B, T, HV, V, dtype=out_dtype, device=dev)
    aux = aux_out if aux_out is not None else GDNTreeAux(
        k=torch.empty(B, T, H, K, dtype=torch.float32, device=dev),
        delta=torch.empty(B, T, HV, V, dtype=torch.float32, device=dev),
        G=torch.empty(B, T, HV, dtype=torch.float32, device=dev),
    )
    amat = torch.empty(B, HV, TP, TP, dtype=torch.float32, device=dev)  # X_ii on the diagonal, A_ij below
    pmat = torch.empty(B, HV, TP, TP, dtype=torch.float32, device=dev)  # P_ij, j <= i
    rhs = torch.empty(B, HV, TP, V, dtype=torch.float32, device=dev)
    use_h0 = initial_state is not None
    qh = torch.empty(B, HV, TP, V, dtype=torch.float32, device=dev) if use_h0 else rhs
    lowp = q.dtype == torch.bfloat16 and k.dtype == torch.bfloat16
    prec = precision_code(config.precision, q.dtype)
    prep_prec = prec if config.inv_precision == "auto" else precision_code(config.inv_precision, q.dtype)
    interp = interpreting()
    h0 = initial_state if use_h0 else aux.G  # dummy pointer when absent
    A_log, dt_bias = gates if gates is not None else (g, g)  # dummy pointers without raw gates
    items = prep_items(T, BT, V, config.BVP)
    launches = [(0, 0, sum(items))]  # (ITEMS, first item, items)
    if config.split_prep:
        launches = [(kind + 1, sum(items[:kind]), n) for kind, n in enumerate(items) if n]
    for kind, first, count in launches:
        gdn_tree_prep_kernel[(B * HV, count)](
            q, k, v, g, beta, A_log, dt_bias, h0, tree.anc, tree.depth, amat, pmat, rhs, qh, aux.k, aux.G,
            float(scale), T, first, q.stride(0), q.stride(1), v.stride(0), v.stride(1), g.stride(0), g.stride(1),
            beta.stride(0), beta.stride(1),
            H=H, HV=HV, K=K, V=V, BT=BT, BK=next_pow2(K), BVP=config.BVP, TP=TP, TA=next_pow2(T),
            LOG2BT=BT.bit_length() - 1, USE_H0=use_h0, L2NORM=use_qk_l2norm, LOWP=lowp, PREC=prep_prec,
            INTERPRET=interp, ITEMS=kind, RAW=gates is not None, num_warps=config.prep_warps,
            num_stages=config.prep_stages,
        )  # fmt: skip
    if not run_solve:
        return o, aux
    solve = gdn_tree_solve_kernel if config.solve_order == "right" else gdn_tree_solve_left_kernel
    solve[(triton.cdiv(V, BV), B * HV)](
        amat, pmat, rhs, qh, o, aux.delta, T, HV=HV, V=V, BT=BT, BV=BV, TP=TP, USE_H0=use_h0, PREC=prec,
        INTERPRET=interp, num_warps=config.num_warps, num_stages=config.num_stages,
    )  # fmt: skip
    return o, aux


def dense_rows(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """q, k, v as the prep kernel reads them without a copy: row views [B, T, heads, dim] of a wider tensor (the
    conv output's q | k | v columns) whose heads and features are dense, q and k with one layout; else copies."""
    def dense(x):
        return (x.shape[3] == 1 or x.stride(3) == 1) and (x.shape[2] == 1 or x.stride(2) == x.shape[3])
    if not (dense(q) and dense(k) and q.stride() == k.stride()):
        q, k = q.contiguous(), k.contiguous()
    return q, k, v if dense(v) else v.contiguous()


def gdn_tree(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    parents: torch.Tensor | TreeStructure,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    use_qk_l2norm: bool = False,
    *,
    config: GDNTreeConfig | None = None,
    out_dtype: torch.dtype | None = None,
    aux_out: GDNTreeAux | None = None,
    gates: RawGates | None = None,
) -> tuple[torch.Tensor, GDNTreeAux]:
    """Tree verification in two Triton launches; same contract as `weaver.ops.gdn.gdn_tree`.

    Args:
        q, k: [B, T, H, K] bf16 or fp32; v: [B, T, HV, V]; g (log decay <= 0), beta: [B, T, HV].
        parents: LongTensor [B, T] (parents[:, 0] = -1, parents[b, i] < i, pad nodes -1) or the
            TreeStructure from `build_tree_structure` (build it once per verify, share it across layers).
        scale: multiplies q; None means K ** -0.5.
        initial_state: [B, HV, K, V] committed state, read only (fp32); None means zeros.
        use_qk_l2norm: l2-normalise q and k over K inside the kernel (eps 1e-6 inside the sqrt).
        config: launch configuration; None picks `default_config(T, V)`.
        out_dtype: dtype of o; None means v's dtype (float32 shows the error before output rounding).
        aux_out: optional contiguous float32 GDNTreeAux to write the factors into (a layer's slot in the
            stacked factors that one commit launch folds for every layer); returned as aux.
        gates: RawGates: g and beta are the in-projection's raw a and b (row views read in place), the gates
            are computed in the prep kernel as `weaver.ops.gdn.gdn_gates` does.
    Returns:
        o: [B, T, HV, V] in v's dtype (or out_dtype).
        aux: GDNTreeAux(k [B, T, H, K], delta [B, T, HV, V], G [B, T, HV]), float32, for the commit.
    """
    B, T, H, K, HV, V = check_gdn_shapes(q, k, v, g, beta, initial_state)
    if T > 512:
        raise ValueError(f"trees up to 512 nodes are supported (tested to 256), got T={T}")
    tree = as_structure(parents)
    if tree.anc.shape != (B, T, T):
        raise ValueError(f"parents/structure must describe [B, T] = {(B, T)} trees, got {tuple(tree.depth.shape)}")
    check_device(q, k, v, g, beta, initial_state, tree.anc, *(gates or ()))
    if gates is not None and any(x.shape != (HV,) for x in gates):
        raise ValueError(f"gates.A_log and gates.dt_bias must be [HV] = [{HV}], got {[tuple(x.shape) for x in gates]}")
    if aux_out is not None:
        check_device(*aux_out)
        want = ((B, T, H, K), (B, T, HV, V), (B, T, HV))
        shapes_ok = all(x.shape == s for x, s in zip(aux_out, want, strict=True))
        if not shapes_ok or any(x.dtype != torch.float32 or not x.is_contiguous() for x in aux_out):
            raise ValueError(f"aux_out must be contiguous float32 tensors of shapes {want}")
    cfg = config if config is not None else default_config(T, V, q.dtype)
    scale = K**-0.5 if scale is None else scale
    q, k, v = dense_rows(q, k, v)
    g, beta = _node_rows(g), _node_rows(beta)
    if initial_state is not None:
        initial_state = initial_state.contiguous()
    out_dtype = v.dtype if out_dtype is None else out_dtype
    return gdn_tree_fwd(q, k, v, g, beta, tree, scale, initial_state, use_qk_l2norm, cfg, out_dtype, aux_out=aux_out,
                        gates=gates)


def _node_rows(x: torch.Tensor) -> torch.Tensor:
    """A [B, T, HV] gate input as the prep kernel reads it in place (unit stride over heads), else a copy."""
    return x if x.shape[2] == 1 or x.stride(2) == 1 else x.contiguous()
