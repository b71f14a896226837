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
from weaver.kernels.triton.gdn_tree_solve import gdn_tree_solve_kernel, gdn_tree_solve_left_kernel
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
    # the root as a lead row outside the tiles (right-looking solve only): a tree of 2^k + 1 nodes (a budget of
    # 2^k plus its root) then fills tiles of 2^k rows instead of padding to twice as many (H200, session 32:
    # 24.6 us at T = 65 against 16.1 at T = 64 without it); the root's column is vector work
    lead: bool = False


def default_config(T: int, V: int, dtype: torch.dtype = torch.bfloat16) -> GDNTreeConfig:
    """The fixed configuration for T nodes, from the H200 sweeps (benchmarks/results/kernels/NOTES.md, v7).
    bf16 inputs: tiles of 16 / 32 rows up to 32 nodes, 64 rows beyond (half the solve's steps of 32-row
    tiles: 29 vs 44 us at T=128), whose state items then take all 128 value columns at once where there are
    two tiles or more (fewer programs, fewer waves; a single tile: see the end). 4 warps for the solve at every
    size (8 were slower even at T=256).
    fp32 inputs (ieee dots, register-hungry): 16/32-row tiles on 8 warps (fewer spills, ptxas sm_90a).
    Beyond 128 nodes the solve is left-looking (98.8 vs 110.6 us at T=256; no register spills).
    bf16 trees of 2^k + 1 nodes up to 129 keep the root as a lead row and tile their 2^k other nodes (not yet
    timed on the H200; ptxas, sm_90a, T = 65: prep stack 120 against 184 B, solve 109 against 177 registers; fp32
    inputs spill more with it, so they keep the tiled root). A caller that wants other tiles passes its own config.
    State items of a single 64-row tile take 64 value columns, not 128 (H100, session 55, T = 65 in the 27B verify's
    call: 22.5-24.9 against 27.2-28.0 us a layer; the 128-column item spills; inside the 27B weaver-64 round,
    session 56: prep 19.7 against 29.7 us; at T = 129, two tiles, 128 stays faster: 45.6 against 57.5-58.8)."""
    fp32 = dtype == torch.float32
    lead = not fp32 and 3 <= T <= 129 and (T - 1) & (T - 2) == 0
    rows = T - lead  # the nodes in tiles
    BT = 16 if rows <= 16 else 32 if (rows <= 32 or fp32) else 64
    BVP = 32 if BT < 64 else min(64 if rows <= 64 else 128, next_pow2(V))
    return GDNTreeConfig(BT=BT, BV=min(32, next_pow2(V)), num_warps=8 if fp32 else 4, prep_warps=8 if fp32 else 4,
                         BVP=BVP, solve_order="left" if rows > 128 else "right", lead=lead)  # fmt: skip


def tile_rows(T: int, BT: int) -> int:
    """Rows the solve holds in registers: T rounded up to a power of two (and at least one tile)."""
    return max(BT, triton.next_power_of_2(int(T)))


def prep_items(T: int, BT: int, V: int, BVP: int, lead: int = 0) -> tuple[int, int, int]:
    """(diagonal, pair, state) work items of the prep kernel per batch row x value head (`lead`: the root outside
    the tiles)."""
    ntp = tile_rows(T - lead, BT) // BT
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
def _path_sums(p_anc, p_g, p_alog, p_dtb, sgt, o_r, m_r, T, TA: tl.constexpr, RAW: tl.constexpr):
    """G of rows o_r: sum of g over each row's ancestors-or-self (masked row sums of the int8 mask), over columns
    in chunks of at most 64 (at T = 65, TA = 128: one [BT, 128] mask and g row would spill)."""
    TC: tl.constexpr = TA if TA < 64 else 64
    b_G = tl.zeros(o_r.shape, dtype=tl.float32)
    for a0 in tl.static_range(0, TA, TC):
        o_a = a0 + tl.arange(0, TC)
        m_a = o_a < T
        b_g = _gate(tl.load(p_g + o_a * sgt, mask=m_a, other=0), p_alog, p_dtb, RAW)
        b_m = tl.load(p_anc + o_r[:, None] * T + o_a[None, :], mask=m_r[:, None] & m_a[None, :], other=0)
        b_G += tl.sum(tl.where(b_m != 0, b_g[None, :], 0.0), 1)
    return b_G


@triton.jit
def _keys(p_k, p_anc, p_g, p_alog, p_dtb, sgt, o_r, m_r, o_k, m_k, T, sqt, BT: tl.constexpr, TA: tl.constexpr,
          L2NORM: tl.constexpr, RAW: tl.constexpr):  # fmt: skip
    """Rows o_r (row n at n * sqt): G, k (input dtype) and k's inverse norm."""
    b_G = _path_sums(p_anc, p_g, p_alog, p_dtb, sgt, o_r, m_r, T, TA, RAW)
    b_k = tl.load(p_k + o_r[:, None] * sqt + o_k[None, :], mask=m_r[:, None] & m_k[None, :], other=0)
    return b_G, b_k, _rnorm(b_k, L2NORM, BT)


@triton.jit
def _queries(p_q, p_beta, o_r, m_r, o_k, m_k, scale, sqt, sbt, BT: tl.constexpr, L2NORM: tl.constexpr,
             RAW: tl.constexpr):  # fmt: skip
    """Rows o_r (row n at n * sqt): q, q's inverse norm times scale, and beta (node n at n * sbt; RAW: the
    projection's b, beta = sigmoid(b) rounded to b's dtype as torch computes it)."""
    b_q = tl.load(p_q + o_r[:, None] * sqt + o_k[None, :], mask=m_r[:, None] & m_k[None, :], other=0)
    b_beta = _beta(tl.load(p_beta + o_r * sbt, mask=m_r, other=0), RAW)
    return b_q, _rnorm(b_q, L2NORM, BT) * scale, b_beta


@triton.jit
def _beta(b_b, RAW: tl.constexpr):
    """beta in fp32 from loaded values: RAW, the projection's b: sigmoid(b) rounded to b's dtype (as torch)."""
    if RAW:
        return tl.sigmoid(b_b.to(tl.float32)).to(b_b.dtype).to(tl.float32)
    else:
        return b_b.to(tl.float32)


@triton.jit
def _gate(b_g, p_alog, p_dtb, RAW: tl.constexpr):
    """g from loaded values: RAW, the projection's a: g = -exp(A_log) softplus(a + dt_bias); else g itself."""
    b_g = b_g.to(tl.float32)
    if RAW:
        b_x = b_g + tl.load(p_dtb).to(tl.float32)
        softplus = tl.where(b_x > 20.0, b_x, tl.log(1.0 + tl.exp(tl.minimum(b_x, 20.0))))
        b_g = -tl.exp(tl.load(p_alog).to(tl.float32)) * softplus
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


@triton.jit
def _root_row(p_k, p_q, p_g, p_alog, p_dtb, o_k, m_k, scale, L2NORM: tl.constexpr, RAW: tl.constexpr):
    """The root (node 0) as vectors: k, q (input dtype), k's inverse norm, q's times scale, and G_0 = g_0 (the root
    is its only ancestor-or-self)."""
    b_k0 = tl.load(p_k + o_k, mask=m_k, other=0)
    b_q0 = tl.load(p_q + o_k, mask=m_k, other=0)
    b_G0 = _gate(tl.load(p_g), p_alog, p_dtb, RAW)
    if L2NORM:
        b_rk0 = 1.0 / tl.sqrt(tl.sum(b_k0.to(tl.float32) * b_k0.to(tl.float32), 0) + 1e-6)
        b_rq0 = 1.0 / tl.sqrt(tl.sum(b_q0.to(tl.float32) * b_q0.to(tl.float32), 0) + 1e-6)
    else:
        b_rk0 = 1.0
        b_rq0 = 1.0
    return b_k0, b_q0, b_rk0, b_rq0 * scale, b_G0


@triton.jit
def _lead_column(p_k, p_q, p_anc, p_l, p_g, p_alog, p_dtb, b_Gi, b_ki, b_rki, b_qi, b_rqi, b_beta, o_i, m_i, r_i,
                 o_k, m_k, scale, T, TP: tl.constexpr, L2NORM: tl.constexpr, RAW: tl.constexpr, LOWP: tl.constexpr,
                 PREC: tl.constexpr, INTERPRET: tl.constexpr):  # fmt: skip
    """Column 0 of A and P for tile i's rows: A_i0 = beta_i e^(G_i - G_0) k_i.k_0, P_i0 = scale e^(G_i - G_0)
    q_i.k_0 where the root is an ancestor (every node but isolated pads). k_0 goes in as the first column of a
    [K, 16] operand, so the products are the Grams' own (a small dot: no [BT, K] fp32 temporaries to spill)."""
    b_k0, _, b_rk0, _, b_G0 = _root_row(p_k, p_q, p_g, p_alog, p_dtb, o_k, m_k, scale, L2NORM, RAW)
    o_c = tl.arange(0, 16)
    b_k0m = tl.where((o_c == 0)[None, :], b_k0[:, None], 0).to(b_k0.dtype)  # [K, 16]
    b_ak = tl.sum(tl.where((o_c == 0)[None, :], _gram(b_ki, b_k0m, LOWP, PREC, INTERPRET), 0.0), 1)
    b_pk = tl.sum(tl.where((o_c == 0)[None, :], _gram(b_qi, b_k0m, LOWP, PREC, INTERPRET), 0.0), 1)
    b_m0 = tl.load(p_anc + o_i * T, mask=m_i, other=0) != 0
    b_dec = tl.exp(tl.where(b_m0, b_Gi - b_G0, float("-inf"))) * b_rk0
    tl.store(p_l + r_i, b_ak * b_rki * b_beta * b_dec)  # the lead buffer: A_i0 at tile row r, P_i0 at TP + r
    tl.store(p_l + TP + r_i, b_pk * b_rqi * b_dec)


@triton.jit
def _lead_root(p_k, p_q, p_l, p_g, p_alog, p_dtb, aux_k, aux_G, o_k, m_k, i_b, i_h, i_hv, scale, T, H: tl.constexpr,
               HV: tl.constexpr, K: tl.constexpr, R: tl.constexpr, TP: tl.constexpr, L2NORM: tl.constexpr,
               RAW: tl.constexpr):  # fmt: skip
    """The root's own factors: aux.G_0, aux.k_0 and P_00 = scale q_0.k_0 (X_00 = 1: the solve takes Delta_0 =
    rhs_0)."""
    b_k0, b_q0, b_rk0, b_rq0, b_G0 = _root_row(p_k, p_q, p_g, p_alog, p_dtb, o_k, m_k, scale, L2NORM, RAW)
    tl.store(aux_G + i_b * T * HV + i_hv, b_G0)
    if i_hv % R == 0:
        tl.store(aux_k + i_b * T * H * K + i_h * K + o_k, b_k0.to(tl.float32) * b_rk0, mask=m_k)
    tl.store(p_l + 2 * TP, tl.sum(b_q0.to(tl.float32) * b_k0.to(tl.float32), 0) * b_rq0 * b_rk0)


@triton.jit
def _lead_state(p_k, p_q, p_beta, p_g, p_alog, p_dtb, v, h0, rhs, qh, o_k, m_k, c, i_b, i_bh, i_hv, svb, scale,
                K: tl.constexpr, V: tl.constexpr, BVP: tl.constexpr, TS: tl.constexpr, USE_H0: tl.constexpr,
                L2NORM: tl.constexpr, RAW: tl.constexpr, PREC: tl.constexpr, INTERPRET: tl.constexpr):  # fmt: skip
    """Value chunk c of the root's rhs_0 = beta_0 (v_0 - e^G_0 k_0 H0) and QH_0 = e^G_0 q_0 H0 (scaled,
    normalised): one [16, K] x [K, BVP] product with k_0 and q_0 as its first two rows (H0 unsplit in fp32 at the
    solve's precision; bf16 q/k are exact in fp32)."""
    b_k0, b_q0, b_rk0, b_rq0, b_G0 = _root_row(p_k, p_q, p_g, p_alog, p_dtb, o_k, m_k, scale, L2NORM, RAW)
    b_beta0 = _beta(tl.load(p_beta), RAW)
    o_v = c * BVP + tl.arange(0, BVP)
    m_v = o_v < V
    b_r = tl.load(v + i_b * svb + i_hv * V + o_v, mask=m_v, other=0).to(tl.float32)
    o_x = i_bh.to(tl.int64) * TS * V + o_v  # node 0's row of [TS, V]
    if USE_H0:
        b_h = tl.load(h0 + i_bh.to(tl.int64) * K * V + o_k[:, None] * V + o_v[None, :],
                      mask=m_k[:, None] & m_v[None, :], other=0).to(tl.float32)  # fmt: skip
        o_s = tl.arange(0, 16)[:, None]
        b_kq = tl.where(o_s == 0, b_k0.to(tl.float32)[None, :], tl.where(o_s == 1, b_q0.to(tl.float32)[None, :], 0.0))
        b_prod = mm(b_kq, b_h, PREC, INTERPRET)  # row 0: k_0 H0, row 1: q_0 H0
        b_eG = tl.exp(b_G0)
        b_r -= b_eG * b_rk0 * tl.sum(tl.where(o_s == 0, b_prod, 0.0), 0)
        tl.store(qh + o_x, b_eG * b_rq0 * tl.sum(tl.where(o_s == 1, b_prod, 0.0), 0), mask=m_v)
    tl.store(rhs + o_x, b_beta0 * b_r, mask=m_v)


@triton.jit(do_not_specialize=["T"])
def gdn_tree_prep_kernel(
    q, k, v, g, beta, A_log, dt_bias, h0, anc, depth, amat, pmat, lead, rhs, qh, aux_k, aux_G, scale, T, W0, sqb, sqt,
    svb, svt, sgb, sgt, sbb, sbt,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
    BVP: tl.constexpr, TP: tl.constexpr, TA: tl.constexpr, LOG2BT: tl.constexpr, USE_H0: tl.constexpr,
    L2NORM: tl.constexpr, LOWP: tl.constexpr, PREC: tl.constexpr, INTERPRET: tl.constexpr, ITEMS: tl.constexpr,
    RAW: tl.constexpr, LEAD: tl.constexpr,
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
    RAW: they are the projection's a and b, and the gates are computed here (no gate kernel before the verify).
    LEAD: the root (node 0) is a lead row outside the tiles, which start at node 1: the diagonal items also write
    the root's column of A and P (and tile 0's item the root's own G, k and P_00), tile 0's state items the root's
    rhs and QH. A and P hold the tiles' rows and columns ([TP, TP]: node n at n - LEAD, aligned as without
    LEAD); the root's column of A and P and its P_00 go to the lead buffer [2 TP + 1]; rhs and QH are indexed
    by node id ([TS, V], TS = TP + LEAD)."""
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
    TS: tl.constexpr = TP + LEAD
    p_m = pmat + i_bh.to(tl.int64) * TP * TP  # [TP, TP] per (batch row, value head): tile rows and columns
    p_a = amat + i_bh.to(tl.int64) * TP * TP
    p_l = lead + i_bh.to(tl.int64) * (2 * TP + 1)
    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, BK)
    m_k = o_k < K
    p_g = g + i_b * sgb + i_hv  # node n at n * sgt
    p_alog, p_dtb = A_log + i_hv, dt_bias + i_hv  # read only with RAW
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
    if LEAD + i * BT < T:
        r_i = i * BT + o_t  # tile rows of A and P
        o_i = LEAD + r_i  # node ids
        m_i = o_i < T
        b_Gi, b_ki, b_rki = _keys(p_k, p_anc, p_g, p_alog, p_dtb, sgt, o_i, m_i, o_k, m_k, T, sqt, BT, TA, L2NORM, RAW)
        b_qi, b_rqi, b_beta = _queries(p_q, p_beta, o_i, m_i, o_k, m_k, scale, sqt, sbt, BT, L2NORM, RAW)
        if kind == 0:
            tl.store(aux_G + i_b * T * HV + i_hv + o_i * HV, b_Gi, mask=m_i)
            if i_hv % R == 0:
                tl.store(aux_k + i_b * T * H * K + i_h * K + o_i[:, None] * (H * K) + o_k[None, :],
                         b_ki.to(tl.float32) * b_rki[:, None], mask=m_i[:, None] & m_k[None, :])  # fmt: skip
            b_dec, b_mii = _decay(p_anc, b_Gi, b_Gi, o_i, m_i, o_i, m_i, T)
            b_kit = tl.trans(b_ki)
            b_p = _gram(b_qi, b_kit, LOWP, PREC, INTERPRET) * b_rqi[:, None] * (b_rki[None, :] * b_dec)
            tl.store(p_m + r_i[:, None] * TP + r_i[None, :], b_p)
            b_s = _gram(b_ki, b_kit, LOWP, PREC, INTERPRET) * (b_rki * b_beta)[:, None] * (b_rki[None, :] * b_dec)
            b_s = tl.where(o_t[:, None] > o_t[None, :], b_s, 0.0)  # A_ii: strict ancestors only
            if LEAD:  # before the Neumann product: k_i and q_i die here, not across it
                _lead_column(p_k, p_q, p_anc, p_l, p_g, p_alog, p_dtb, b_Gi, b_ki, b_rki, b_qi, b_rqi, b_beta,
                             o_i, m_i, r_i, o_k, m_k, scale, T, TP, L2NORM, RAW, LOWP, PREC, INTERPRET)  # fmt: skip
                if i == 0:
                    _lead_root(p_k, p_q, p_l, p_g, p_alog, p_dtb, aux_k, aux_G, o_k, m_k, i_b, i_h, i_hv, scale, T,
                               H, HV, K, R, TP, L2NORM, RAW)  # fmt: skip
            b_dep = tl.load(depth + i_b * T + o_i, mask=m_i, other=0)  # longest ancestor chain inside the tile
            b_top = tl.min(tl.where(b_mii, b_dep[None, :], 1 << 30), 1)  # bounds the nilpotency of A_ii
            n_chain = tl.max(tl.where(m_i, b_dep - b_top + 1, 1), 0)
            b_x = _neumann_inverse(b_s, n_chain, BT, LOG2BT, PREC, INTERPRET)
            tl.store(p_a + r_i[:, None] * TP + r_i[None, :], b_x)
        elif kind == 1:
            j = w - NTP - i * (i - 1) // 2
            r_j = j * BT + o_t
            o_j = LEAD + r_j
            m_j = o_j < T
            b_Gj, b_kj, b_rkj = _keys(p_k, p_anc, p_g, p_alog, p_dtb, sgt, o_j, m_j, o_k, m_k, T, sqt, BT, TA, L2NORM,
                                      RAW)  # fmt: skip
            b_dec, _ = _decay(p_anc, b_Gi, b_Gj, o_i, m_i, o_j, m_j, T)
            b_col = b_rkj[None, :] * b_dec
            b_kjt = tl.trans(b_kj)
            b_aij = _gram(b_ki, b_kjt, LOWP, PREC, INTERPRET) * (b_rki * b_beta)[:, None] * b_col
            tl.store(p_a + r_i[:, None] * TP + r_j[None, :], b_aij)
            b_pij = _gram(b_qi, b_kjt, LOWP, PREC, INTERPRET) * b_rqi[:, None] * b_col
            tl.store(p_m + r_i[:, None] * TP + r_j[None, :], b_pij)
        else:
            c = (w - NTP - NPAIR) % NVC
            _state_chunk(v, h0, rhs, qh, b_ki, b_qi, b_rki, b_rqi, b_beta, b_Gi, o_i, m_i, o_k, m_k, c,
                         i_b, i_bh, i_hv, svb, svt, K, V, BVP, TS, USE_H0, LOWP, PREC, INTERPRET)  # fmt: skip
            if LEAD:
                if i == 0:
                    _lead_state(p_k, p_q, p_beta, p_g, p_alog, p_dtb, v, h0, rhs, qh, o_k, m_k, c, i_b, i_bh, i_hv,
                                svb, scale, K, V, BVP, TS, USE_H0, L2NORM, RAW, PREC, INTERPRET)  # fmt: skip


@triton.jit
def _state_chunk(v, h0, rhs, qh, b_ki, b_qi, b_rki, b_rqi, b_beta, b_Gi, o_i, m_i, o_k, m_k, c, i_b, i_bh, i_hv,
                 svb, svt, K: tl.constexpr, V: tl.constexpr, BVP: tl.constexpr, TS: tl.constexpr,
                 USE_H0: tl.constexpr, LOWP: tl.constexpr, PREC: tl.constexpr, INTERPRET: tl.constexpr):  # fmt: skip
    """Value chunk c of tile i: rhs = beta (v - e^G K_i H0) and QH = e^G Q_i H0 (scaled, normalised); v's node n
    of batch row b at b * svb + n * svt."""
    o_v = c * BVP + tl.arange(0, BVP)
    m_iv = m_i[:, None] & (o_v < V)[None, :]
    b_r = tl.load(v + i_b * svb + i_hv * V + o_i[:, None] * svt + o_v[None, :], mask=m_iv, other=0).to(tl.float32)
    o_x = i_bh.to(tl.int64) * TS * V + o_i[:, None] * V + o_v[None, :]  # [TS, V] per (batch row, value head)
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
    if config.lead and config.solve_order != "right":
        raise ValueError("config.lead needs the right-looking solve (solve_order='right')")
    lead = int(config.lead and T > 1)
    dev = q.device
    TP = tile_rows(T - lead, BT)  # rows of the tiles (A, P); rhs and QH are indexed by node id, TS = TP + lead
    TS = TP + lead
    o = torch.empty(B, T, HV, V, dtype=out_dtype, device=dev)
    aux = aux_out if aux_out is not None else GDNTreeAux(
        k=torch.empty(B, T, H, K, dtype=torch.float32, device=dev),
        delta=torch.empty(B, T, HV, V, dtype=torch.float32, device=dev),
        G=torch.empty(B, T, HV, dtype=torch.float32, device=dev),
    )
    amat = torch.empty(B, HV, TP, TP, dtype=torch.float32, device=dev)  # X_ii on the diagonal, A_ij below
    pmat = torch.empty(B, HV, TP, TP, dtype=torch.float32, device=dev)  # P_ij, j <= i
    # the root's column of A and of P and its P_00 (lead only)
    lead_buf = torch.empty(B, HV, 2 * TP + 1, dtype=torch.float32, device=dev) if lead else amat
    rhs = torch.empty(B, HV, TS, V, dtype=torch.float32, device=dev)
    use_h0 = initial_state is not None
    qh = torch.empty(B, HV, TS, V, dtype=torch.float32, device=dev) if use_h0 else rhs
    lowp = q.dtype == torch.bfloat16 and k.dtype == torch.bfloat16
    prec = precision_code(config.precision, q.dtype)
    prep_prec = prec if config.inv_precision == "auto" else precision_code(config.inv_precision, q.dtype)
    interp = interpreting()
    h0 = initial_state if use_h0 else aux.G  # dummy pointer when absent
    A_log, dt_bias = gates if gates is not None else (g, g)  # dummy pointers without raw gates
    items = prep_items(T, BT, V, config.BVP, lead)
    launches = [(0, 0, sum(items))]  # (ITEMS, first item, items)
    if config.split_prep:
        launches = [(kind + 1, sum(items[:kind]), n) for kind, n in enumerate(items) if n]
    for kind, first, count in launches:
        gdn_tree_prep_kernel[(B * HV, count)](
            q, k, v, g, beta, A_log, dt_bias, h0, tree.anc, tree.depth, amat, pmat, lead_buf, rhs, qh, aux.k, aux.G,
            float(scale), T, first, q.stride(0), q.stride(1), v.stride(0), v.stride(1), g.stride(0), g.stride(1),
            beta.stride(0), beta.stride(1),
            H=H, HV=HV, K=K, V=V, BT=BT, BK=next_pow2(K), BVP=config.BVP, TP=TP, TA=next_pow2(T),
            LOG2BT=BT.bit_length() - 1, USE_H0=use_h0, L2NORM=use_qk_l2norm, LOWP=lowp, PREC=prep_prec,
            INTERPRET=interp, ITEMS=kind, RAW=gates is not None, LEAD=lead,
            num_warps=config.prep_warps, num_stages=config.prep_stages,
        )  # fmt: skip
    if not run_solve:
        return o, aux
    solve = gdn_tree_solve_kernel if config.solve_order == "right" else gdn_tree_solve_left_kernel
    extra = dict(LEAD=lead) if config.solve_order == "right" else {}
    solve[(triton.cdiv(V, BV), B * HV)](
        amat, pmat, lead_buf, rhs, qh, o, aux.delta, T, HV=HV, V=V, BT=BT, BV=BV, TP=TP, USE_H0=use_h0, PREC=prec,
        INTERPRET=interp, num_warps=config.num_warps, num_stages=config.num_stages, **extra,
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
    run_solve: bool = True,
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
        run_solve: False stops after the prep kernel (stage timing only: o and aux.delta are then garbage).
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
    return gdn_tree_fwd(q, k, v, g, beta, tree, scale, initial_state, use_qk_l2norm, cfg, out_dtype, run_solve,
                        aux_out=aux_out, gates=gates)  # fmt: skip


def _node_rows(x: torch.Tensor) -> torch.Tensor:
    """A [B, T, HV] gate input as the prep kernel reads it in place (unit stride over heads), else a copy."""
    return x if x.shape[2] == 1 or x.stride(2) == 1 else x.contiguous()
