r"""GDN tree verification in Triton (DESIGN §4.3, §4.6): two launches per layer, static shapes.

Math (one value head; G = root-path prefix sum of g, M = ancestor-or-self mask, H0 read only)::

    A[i, j] = beta_i exp(G_i - G_j) k_i.k_j            j a strict ancestor of i
    (I + A) Delta = beta * (V - exp(G) * (K H0))        unit lower triangular (topological order)
    O = scale * [exp(G) * (Q H0) + (M * exp(G_i - G_j) * Q K^T) Delta]

With row tiles of BT nodes, X_ii = (I + A_ii)^-1 and B_ij = X_ii A_ij (j < i), block forward substitution
reads ``Delta_i = X_ii rhs_i - sum_{j<i} B_ij Delta_j``. Everything but that short chain is done in
parallel beforehand:

1. `gdn_tree_prep_kernel`, one program per (row tile i, batch row x value head): the root-path sums G
   (masked row sums of the ancestor mask -> aux.G), A_ii and X_ii as the Neumann product
   (I - A)(I + A^2)(I + A^4)... whose length is set at run time by the longest ancestor chain inside the
   tile (a tree of depth d needs ceil(log2(d + 1)) factors, a chain tile of 32 five); for every earlier
   tile j the decayed, masked B_ij = X_ii A_ij and P_ij = scale exp(G_i - G_j) Q_i K_j^T; and, one value
   chunk at a time, the state products K_i H0 / Q_i H0, Xr_i = X_ii rhs_i and QH_i = scale e^G Q_i H0.
2. `gdn_tree_solve_kernel`, one program per (value block, batch row x value head), keeps the residual of
   all T rows in registers (right-looking substitution): for tile i, Delta_i = its rows of the residual,
   then residual -= B[:, i] Delta_i. After the last tile the residual *is* Delta; O = QH + P Delta.
   The chain is NT = T / BT steps of one [T, BT] x [BT, BV] product each, with no memory round trip.

Precision: q/k/v bf16 or fp32; gates, state, G, A, the solve and Delta in fp32. Gram dots of bf16
inputs are exact products with fp32 accumulation; fp32 x fp32 products follow `precision` (see
`weaver.ops.triton._utils.PRECISIONS`; 'auto' = ieee for fp32 inputs, bf16x3 for bf16 inputs).
"""

from __future__ import annotations

import os
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from weaver.ops.gdn import GDNTreeAux, check_gdn_shapes
from weaver.ops.triton._utils import check_device, dot_lp, interpreting, mm, next_pow2, precision_code
from weaver.ops.triton.structure import TreeStructure, as_structure

__all__ = ["GDNTreeConfig", "default_config", "gdn_tree"]


class GDNTreeConfig(NamedTuple):
    """Launch configuration of the tree kernels (fixed; no autotune, so they run interpreted)."""

    BT: int = 32  # node rows per tile (16, 32 or 64)
    BV: int = 32  # value columns per program of the solve kernel
    num_warps: int = 4  # of the solve kernel
    num_stages: int = 1  # of the solve kernel
    precision: str = "auto"
    prep_warps: int = 4  # of the prep kernel
    prep_stages: int = 1  # of the prep kernel
    BVP: int = 32  # value columns per state work item of the prep kernel
    state_items: bool = True  # prep: state products as their own work items (else in each tile's program)
    prefetch: bool = False  # solve: load the next block of B (chain) and P (output) during the current step


def default_config(T: int, V: int, dtype: torch.dtype = torch.bfloat16, initial_state: bool = True) -> GDNTreeConfig:
    """The fixed configuration for T nodes, from the H200 sweeps (benchmarks/results/kernels/NOTES.md). bf16
    inputs: up to 32 nodes, one or two tiles of 16/32 rows with the state products as their own work items on
    2-warp programs; from 64 nodes, 64-row tiles (half the solve's chain) whose programs do their own state
    products; 8 warps for the solve once 4 warps' registers no longer hold its [T, BV] residual (T > 128).
    fp32 inputs (ieee dots, register-hungry): 16/32-row tiles, state products in each tile's program.
    Without an initial state, 32 rows too: 64-row tiles hit an illegal address there on the H200 (triton 3.6,
    cause not found yet). WEAVER_GDN_TREE_BT overrides the tile rows (16, 32 or 64)."""
    small = T <= 32 and dtype != torch.float32
    BT = 16 if T <= 16 else 32 if (small or dtype == torch.float32 or not initial_state) else 64
    BT = int(os.environ.get("WEAVER_GDN_TREE_BT", 0)) or BT
    return GDNTreeConfig(BT=BT, BV=min(32, next_pow2(V)), num_warps=8 if T > 128 else 4, prep_warps=2 if small else 4,
                         state_items=small)  # fmt: skip


def tile_rows(T: int, BT: int) -> int:
    """Rows the solve holds in registers: T rounded up to a power of two (and at least one tile)."""
    return max(BT, triton.next_power_of_2(int(T)))


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
def _diag_tile(p_q, p_k, p_beta, p_anc, depth, b_ga, o_i, m_i, o_a, m_a, o_k, m_k, i_b, scale, T,
               H: tl.constexpr, K: tl.constexpr, HV: tl.constexpr, BT: tl.constexpr, LOG2BT: tl.constexpr,
               L2NORM: tl.constexpr, LOWP: tl.constexpr, PREC: tl.constexpr, INTERPRET: tl.constexpr):  # fmt: skip
    """Tile i's rows: G, q/k and their norms, beta, the decay of the diagonal block and X_ii = (I + A_ii)^-1
    (the Neumann product, as many factors as the longest ancestor chain inside the tile needs)."""
    o_t = tl.arange(0, BT)
    b_Gi = _path_sums(p_anc, b_ga, o_i, m_i, o_a, m_a, T)
    o_ik = o_i[:, None] * (H * K) + o_k[None, :]
    m_ik = m_i[:, None] & m_k[None, :]
    b_ki = tl.load(p_k + o_ik, mask=m_ik, other=0)
    b_qi = tl.load(p_q + o_ik, mask=m_ik, other=0)
    b_rki = _rnorm(b_ki, L2NORM, BT)
    b_rqi = _rnorm(b_qi, L2NORM, BT) * scale
    b_beta = tl.load(p_beta + o_i * HV, mask=m_i, other=0).to(tl.float32)
    b_mii = tl.load(p_anc + o_i[:, None] * T + o_i[None, :], mask=m_i[:, None] & m_i[None, :], other=0) != 0
    b_dec = tl.exp(tl.where(b_mii, b_Gi[:, None] - b_Gi[None, :], float("-inf")))
    b_s = _gram(b_ki, tl.trans(b_ki), LOWP, PREC, INTERPRET) * (b_rki * b_beta)[:, None] * b_rki[None, :]
    b_n = -tl.where(o_t[:, None] > o_t[None, :], b_s * b_dec, 0.0)
    b_dep = tl.load(depth + i_b * T + o_i, mask=m_i, other=0)  # longest ancestor chain inside the tile
    b_top = tl.min(tl.where(b_mii, b_dep[None, :], 1 << 30), 1)  # bounds the nilpotency of A_ii
    n_chain = tl.max(tl.where(m_i, b_dep - b_top + 1, 1), 0)
    b_x = tl.where(o_t[:, None] == o_t[None, :], 1.0, 0.0) + b_n  # (I + A)^-1 = (I - A)(I + A^2)(I + A^4)...
    for lv in tl.static_range(1, LOG2BT):
        if (1 << lv) < n_chain:
            b_n = mm(b_n, b_n, PREC, INTERPRET)
            b_x = b_x + mm(b_x, b_n, PREC, INTERPRET)
    return b_Gi, b_ki, b_qi, b_rki, b_rqi, b_beta, b_dec, b_x


@triton.jit(do_not_specialize=["T"])
def gdn_tree_prep_kernel(
    q, k, v, g, beta, h0, anc, depth, bmat, pmat, xr, qh, aux_k, aux_G, scale, T,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
    BVP: tl.constexpr, TP: tl.constexpr, TA: tl.constexpr, LOG2BT: tl.constexpr, USE_H0: tl.constexpr,
    L2NORM: tl.constexpr, LOWP: tl.constexpr, PREC: tl.constexpr, STATE_ITEMS: tl.constexpr, INTERPRET: tl.constexpr,
):  # fmt: skip
    """Everything that needs no Delta; work item w (axis 0) of one batch row x value head (axis 1):
      w < NT             tile i = w: aux.G, aux.k, P_ii, and for every earlier tile j B_ij = X_ii A_ij, P_ij;
                         without STATE_ITEMS also the state products of tile i, all value chunks in turn;
      w = NT + i*NVC + c  (STATE_ITEMS) tile i, value chunk c: Xr = X_ii beta (v - e^G K_i H0), QH = e^G Q_i H0.
    State items recompute X_ii (cheap dots) so that no item waits for another: more, shorter programs (the
    H200 sweep: better for one or two tiles, worse from four). Scalar int64 base pointers per (batch row,
    head), int32 offsets inside (fewer registers)."""
    w, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_hv = (i_bh // HV).to(tl.int64), i_bh % HV
    R: tl.constexpr = HV // H
    NVC: tl.constexpr = (V + BVP - 1) // BVP
    NT = (T + BT - 1) // BT
    i_h = i_hv // R
    p_anc = anc + i_b * T * T
    p_k = k + i_b * T * H * K + i_h * K  # row n at n * H * K
    p_q = q + i_b * T * H * K + i_h * K
    p_g = g + i_b * T * HV + i_hv  # node n at n * HV
    p_beta = beta + i_b * T * HV + i_hv
    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, BK)
    m_k = o_k < K
    o_a = tl.arange(0, TA)
    m_a = o_a < T
    if w < NT:
        i = w
    else:
        i = (w - NT) // NVC
    o_i = i * BT + o_t
    m_i = o_i < T
    b_ga = tl.load(p_g + o_a * HV, mask=m_a, other=0).to(tl.float32)
    b_Gi, b_ki, b_qi, b_rki, b_rqi, b_beta, b_dec, b_x = _diag_tile(
        p_q, p_k, p_beta, p_anc, depth, b_ga, o_i, m_i, o_a, m_a, o_k, m_k, i_b, scale, T,
        H, K, HV, BT, LOG2BT, L2NORM, LOWP, PREC, INTERPRET,
    )  # fmt: skip
    if w < NT:
        tl.store(aux_G + i_b * T * HV + i_hv + o_i * HV, b_Gi, mask=m_i)
        o_ik = o_i[:, None] * (H * K) + o_k[None, :]
        if i_hv % R == 0:
            tl.store(aux_k + i_b * T * H * K + i_h * K + o_ik, b_ki.to(tl.float32) * b_rki[:, None],
                     mask=m_i[:, None] & m_k[None, :])  # fmt: skip
        p_m = pmat + i_bh.to(tl.int64) * TP * TP  # [TP, TP] per (batch row, value head)
        p_b = bmat + i_bh.to(tl.int64) * TP * TP
        b_p = _gram(b_qi, tl.trans(b_ki), LOWP, PREC, INTERPRET) * b_rqi[:, None] * b_rki[None, :] * b_dec
        tl.store(p_m + o_i[:, None] * TP + o_i[None, :], b_p)
        b_ka = b_rki * b_beta  # row factors of A
        # earlier tiles j: B_ij = X_ii A_ij and P_ij (G_j recomputed here: tile j is another program's)
        for j in range(0, i):
            o_j = j * BT + o_t
            b_Gj = _path_sums(p_anc, b_ga, o_j, o_j < T, o_a, m_a, T)
            b_mij = tl.load(p_anc + o_i[:, None] * T + o_j[None, :], mask=m_i[:, None], other=0)
            b_kj = tl.load(p_k + o_j[:, None] * (H * K) + o_k[None, :], mask=m_k[None, :], other=0)
            b_rkj = _rnorm(b_kj, L2NORM, BT)
            b_decj = tl.exp(tl.where(b_mij != 0, b_Gi[:, None] - b_Gj[None, :], float("-inf")))
            b_kjt = tl.trans(b_kj)
            b_a = _gram(b_ki, b_kjt, LOWP, PREC, INTERPRET) * b_ka[:, None] * (b_rkj[None, :] * b_decj)
            tl.store(p_b + o_i[:, None] * TP + o_j[None, :], mm(b_x, b_a, PREC, INTERPRET))
            b_pj = _gram(b_qi, b_kjt, LOWP, PREC, INTERPRET) * b_rqi[:, None] * (b_rkj[None, :] * b_decj)
            tl.store(p_m + o_i[:, None] * TP + o_j[None, :], b_pj)
        if not STATE_ITEMS:  # this program also does the state products of its tile, chunk by chunk
            for c in range(0, NVC):
                _state_chunk(v, h0, xr, qh, b_ki, b_qi, b_rki, b_rqi, b_beta, b_Gi, b_x, o_i, m_i, o_k, m_k, c,
                             i_b, i_bh, i_hv, T, K, V, HV, BVP, TP, USE_H0, LOWP, PREC, INTERPRET)  # fmt: skip
    else:
        _state_chunk(v, h0, xr, qh, b_ki, b_qi, b_rki, b_rqi, b_beta, b_Gi, b_x, o_i, m_i, o_k, m_k, (w - NT) % NVC,
                     i_b, i_bh, i_hv, T, K, V, HV, BVP, TP, USE_H0, LOWP, PREC, INTERPRET)  # fmt: skip


@triton.jit
def _state_chunk(v, h0, xr, qh, b_ki, b_qi, b_rki, b_rqi, b_beta, b_Gi, b_x, o_i, m_i, o_k, m_k, c, i_b, i_bh, i_hv,
                 T, K: tl.constexpr, V: tl.constexpr, HV: tl.constexpr, BVP: tl.constexpr, TP: tl.constexpr,
                 USE_H0: tl.constexpr, LOWP: tl.constexpr, PREC: tl.constexpr, INTERPRET: tl.constexpr):  # fmt: skip
    """Value chunk c of tile i: Xr = X_ii beta (v - e^G K_i H0) and QH = e^G Q_i H0 (scaled, normalised)."""
    o_v = c * BVP + tl.arange(0, BVP)
    m_iv = m_i[:, None] & (o_v < V)[None, :]
    b_rhs = tl.load(v + i_b * T * HV * V + i_hv * V + o_i[:, None] * (HV * V) + o_v[None, :], mask=m_iv,
                    other=0).to(tl.float32)  # fmt: skip
    o_x = i_bh.to(tl.int64) * TP * V + o_i[:, None] * V + o_v[None, :]  # [TP, V] per (batch row, value head)
    if USE_H0:
        b_h = tl.load(h0 + i_bh.to(tl.int64) * K * V + o_k[:, None] * V + o_v[None, :],
                      mask=m_k[:, None] & (o_v < V)[None, :], other=0).to(tl.float32)  # fmt: skip
        if LOWP and PREC == 3:  # H0 = hi + lo in bf16; q/k are exact in bf16: two passes, ~fp32
            b_hhi = b_h.to(tl.bfloat16)
            b_hlo = (b_h - b_hhi.to(tl.float32)).to(tl.bfloat16)
            b_kh = dot_lp(b_ki, b_hhi, INTERPRET) + dot_lp(b_ki, b_hlo, INTERPRET)
            b_qh = dot_lp(b_qi, b_hhi, INTERPRET) + dot_lp(b_qi, b_hlo, INTERPRET)
        else:
            b_kh = mm(b_ki.to(tl.float32), b_h, PREC, INTERPRET)
            b_qh = mm(b_qi.to(tl.float32), b_h, PREC, INTERPRET)
        b_eG = tl.exp(b_Gi)
        b_rhs -= (b_eG * b_rki)[:, None] * b_kh
        tl.store(qh + o_x, (b_eG * b_rqi)[:, None] * b_qh, mask=m_iv)
    tl.store(xr + o_x, mm(b_x, b_beta[:, None] * b_rhs, PREC, INTERPRET), mask=m_iv)


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
def _bcol(p_b, o_r, m_r, o_t, i, BT: tl.constexpr, TP: tl.constexpr):
    """Column block i of B ([TP, BT]), rows below tile i only (B is strictly block-lower; the rest is unset)."""
    m_b = m_r & (o_r >= (i + 1) * BT)
    return tl.load(p_b + o_r[:, None] * TP + (i * BT + o_t)[None, :], mask=m_b[:, None], other=0)


@triton.jit
def _prow(p_m, o_r, o_t, i, T, BT: tl.constexpr, TP: tl.constexpr):
    """Row block i of P ([BT, TP]), columns up to the end of its diagonal block (the rest is unset)."""
    o_i = i * BT + o_t
    m = (o_i < T)[:, None] & (o_r < (i + 1) * BT)[None, :]
    return tl.load(p_m + o_i[:, None] * TP + o_r[None, :], mask=m, other=0)


@triton.jit(do_not_specialize=["T"])
def gdn_tree_solve_kernel(
    bmat, pmat, xr, qh, o, aux_delta, T,
    HV: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr, TP: tl.constexpr,
    USE_H0: tl.constexpr, PREC: tl.constexpr, PREFETCH: tl.constexpr, INTERPRET: tl.constexpr,
):  # fmt: skip
    """Right-looking block forward substitution for one (value block, batch row x value head)."""
    i_v, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_hv = (i_bh // HV).to(tl.int64), i_bh % HV
    NT: tl.constexpr = TP // BT
    p_b = bmat + i_bh.to(tl.int64) * TP * TP
    p_m = pmat + i_bh.to(tl.int64) * TP * TP
    p_x = xr + i_bh.to(tl.int64) * TP * V + i_v * BV
    p_qh = qh + i_bh.to(tl.int64) * TP * V + i_v * BV
    p_d = aux_delta + i_b * T * HV * V + i_hv * V + i_v * BV  # node n at n * HV * V
    p_o = o + i_b * T * HV * V + i_hv * V + i_v * BV
    o_r = tl.arange(0, TP)
    m_r = o_r < T
    o_t = tl.arange(0, BT)
    o_c = tl.arange(0, BV)
    m_c = i_v * BV + o_c < V
    b_r = tl.load(p_x + o_r[:, None] * V + o_c[None, :], mask=m_r[:, None] & m_c[None, :], other=0)
    if PREFETCH:  # the first blocks load before the chain; without prefetch each step loads its own
        b_bc = _bcol(p_b, o_r, m_r, o_t, 0, BT, TP)
    for i in tl.static_range(NT):
        if i * BT < T:
            if PREFETCH:  # next column block of B in flight during this step
                b_bc_next = _bcol(p_b, o_r, m_r, o_t, i + 1, BT, TP)
            else:
                b_bc = _bcol(p_b, o_r, m_r, o_t, i, BT, TP)
            b_d = _tile_of(b_r, i, NT, BT, BV)
            o_i = i * BT + o_t
            tl.store(p_d + o_i[:, None] * (HV * V) + o_c[None, :], b_d, mask=(o_i < T)[:, None] & m_c[None, :])
            if i < NT - 1:  # rows below tile i: residual -= B[:, i] Delta_i
                b_r = b_r - mm(b_bc, b_d, PREC, INTERPRET)
            if PREFETCH:
                b_bc = b_bc_next
    # b_r is Delta now: O = QH + P Delta, one row tile at a time (P is zero right of the tile's diagonal block)
    if PREFETCH:
        b_p = _prow(p_m, o_r, o_t, 0, T, BT, TP)
    for i in tl.static_range(NT):
        if i * BT < T:
            o_i = i * BT + o_t
            m_i = o_i < T
            if PREFETCH:
                b_p_next = _prow(p_m, o_r, o_t, i + 1, T, BT, TP)
            else:
                b_p = _prow(p_m, o_r, o_t, i, T, BT, TP)
            b_o = mm(b_p, b_r, PREC, INTERPRET)
            if PREFETCH:
                b_p = b_p_next
            m_ic = m_i[:, None] & m_c[None, :]
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
) -> tuple[torch.Tensor, GDNTreeAux]:
    """Allocate outputs and scratch, launch the prep and solve kernels (inputs already validated).
    run_solve=False stops after the prep kernel (for stage timing only; o and aux.delta are then garbage)."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    BT, BV = config.BT, config.BV
    if BT not in (16, 32, 64) or BV < 16 or BV & (BV - 1):
        raise ValueError(f"config needs BT in (16, 32, 64) and BV a power of two >= 16, got {config}")
    dev = q.device
    TP = tile_rows(T, BT)
    o = torch.empty(B, T, HV, V, dtype=out_dtype, device=dev)
    aux = GDNTreeAux(
        k=torch.empty(B, T, H, K, dtype=torch.float32, device=dev),
        delta=torch.empty(B, T, HV, V, dtype=torch.float32, device=dev),
        G=torch.empty(B, T, HV, dtype=torch.float32, device=dev),
    )
    bmat = torch.empty(B, HV, TP, TP, dtype=torch.float32, device=dev)  # B_ij = X_ii A_ij, j < i
    pmat = torch.empty(B, HV, TP, TP, dtype=torch.float32, device=dev)  # P_ij, j <= i
    xr = torch.empty(B, HV, TP, V, dtype=torch.float32, device=dev)
    use_h0 = initial_state is not None
    qh = torch.empty(B, HV, TP, V, dtype=torch.float32, device=dev) if use_h0 else xr
    lowp = q.dtype == torch.bfloat16 and k.dtype == torch.bfloat16
    prec = precision_code(config.precision, q.dtype)
    interp = interpreting()
    h0 = initial_state if use_h0 else aux.G  # dummy pointer when absent
    NT = triton.cdiv(T, BT)
    n_items = NT * (1 + triton.cdiv(V, config.BVP)) if config.state_items else NT
    gdn_tree_prep_kernel[(n_items, B * HV)](
        q, k, v, g, beta, h0, tree.anc, tree.depth, bmat, pmat, xr, qh, aux.k, aux.G, float(scale), T,
        H=H, HV=HV, K=K, V=V, BT=BT, BK=next_pow2(K), BVP=config.BVP, TP=TP, TA=next_pow2(T),
        LOG2BT=BT.bit_length() - 1, USE_H0=use_h0, L2NORM=use_qk_l2norm, LOWP=lowp, PREC=prec,
        STATE_ITEMS=config.state_items, INTERPRET=interp, num_warps=config.prep_warps, num_stages=config.prep_stages,
    )  # fmt: skip
    if not run_solve:
        return o, aux
    gdn_tree_solve_kernel[(triton.cdiv(V, BV), B * HV)](
        bmat, pmat, xr, qh, o, aux.delta, T, HV=HV, V=V, BT=BT, BV=BV, TP=TP, USE_H0=use_h0, PREC=prec,
        PREFETCH=config.prefetch, INTERPRET=interp, num_warps=config.num_warps, num_stages=config.num_stages,
    )  # fmt: skip
    return o, aux


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
    check_device(q, k, v, g, beta, initial_state, tree.anc)
    cfg = config if config is not None else default_config(T, V, q.dtype, initial_state is not None)
    scale = K**-0.5 if scale is None else scale
    q, k, v, g, beta = (x.contiguous() for x in (q, k, v, g, beta))
    if initial_state is not None:
        initial_state = initial_state.contiguous()
    out_dtype = v.dtype if out_dtype is None else out_dtype
    return gdn_tree_fwd(q, k, v, g, beta, tree, scale, initial_state, use_qk_l2norm, cfg, out_dtype)
