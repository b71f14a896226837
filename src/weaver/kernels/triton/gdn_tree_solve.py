"""The solve kernels of the GDN tree verify (`weaver.kernels.triton.gdn_tree` has the math and the prep): block
forward substitution over the tiles the prep kernel wrote, right-looking (the residual of all rows in registers;
optionally behind the root as a lead row) or left-looking (one row tile at a time), then O = QH + P Delta."""

from __future__ import annotations

import triton
import triton.language as tl

from weaver.kernels.triton._utils import mm

__all__ = ["gdn_tree_solve_kernel", "gdn_tree_solve_left_kernel"]


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
                 TP: tl.constexpr, TS: tl.constexpr):  # fmt: skip
    """This solve program's (value block, batch row x value head) bases: A/X and P [TP, TP] (tile rows), rhs and
    QH [TS, V] (scratch, per head, node ids), Delta and o (node n at n * HV * V)."""
    i_v, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_hv = (i_bh // HV).to(tl.int64), i_bh % HV
    p_a = amat + i_bh.to(tl.int64) * TP * TP
    p_m = pmat + i_bh.to(tl.int64) * TP * TP
    p_r = rhs + i_bh.to(tl.int64) * TS * V + i_v * BV
    p_qh = qh + i_bh.to(tl.int64) * TS * V + i_v * BV
    p_d = aux_delta + i_b * T * HV * V + i_hv * V + i_v * BV
    p_o = o + i_b * T * HV * V + i_hv * V + i_v * BV
    return p_a, p_m, p_r, p_qh, p_d, p_o


@triton.jit(do_not_specialize=["T"])
def gdn_tree_solve_kernel(
    amat, pmat, lead, rhs, qh, o, aux_delta, T,
    HV: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr, TP: tl.constexpr,
    USE_H0: tl.constexpr, PREC: tl.constexpr, INTERPRET: tl.constexpr, LEAD: tl.constexpr,
):  # fmt: skip
    """Right-looking block forward substitution for one (value block, batch row x value head). LEAD: the root
    comes first as a row of its own, Delta_0 = rhs_0 (X_00 = 1), and leaves the rank-one residual update
    A[:, 0] Delta_0 to the TP rows of the tiles (nodes 1 ..)."""
    i_v = tl.program_id(0)
    NT: tl.constexpr = TP // BT
    TS: tl.constexpr = TP + LEAD
    p_a, p_m, p_r, p_qh, p_d, p_o = _solve_bases(amat, pmat, rhs, qh, o, aux_delta, T, HV, V, BV, TP, TS)
    p_l = lead + tl.program_id(1).to(tl.int64) * (2 * TP + 1)  # the root's column of A, of P, then P_00
    r_r = tl.arange(0, TP)  # tile rows of A and P
    o_r = LEAD + r_r  # node ids
    m_r = o_r < T
    o_t = tl.arange(0, BT)
    o_c = tl.arange(0, BV)
    m_c = i_v * BV + o_c < V
    b_r = tl.load(p_r + o_r[:, None] * V + o_c[None, :], mask=m_r[:, None] & m_c[None, :], other=0)
    if LEAD:
        b_d0 = tl.load(p_r + o_c, mask=m_c, other=0)  # Delta_0
        tl.store(p_d + o_c, b_d0, mask=m_c)
        b_a0 = tl.load(p_l + r_r, mask=m_r, other=0)
        b_r = b_r - b_a0[:, None] * b_d0[None, :]
    for i in tl.static_range(NT):
        if LEAD + i * BT < T:
            r_i = i * BT + o_t
            o_i = LEAD + r_i
            m_i = o_i < T
            b_x = tl.load(p_a + r_i[:, None] * TP + r_i[None, :], mask=m_i[:, None] & m_i[None, :], other=0)
            b_d = mm(b_x, _tile_of(b_r, i, NT, BT, BV), PREC, INTERPRET)  # Delta_i = X_ii residual_i
            tl.store(p_d + o_i[:, None] * (HV * V) + o_c[None, :], b_d, mask=m_i[:, None] & m_c[None, :])
            if i < NT - 1:  # rows below tile i: residual -= A[:, i] Delta_i
                m_b = m_r & (o_r >= LEAD + (i + 1) * BT)
                b_ac = tl.load(p_a + r_r[:, None] * TP + r_i[None, :], mask=m_b[:, None], other=0)
                b_r = b_r - mm(b_ac, b_d, PREC, INTERPRET)
            b_r = _set_tile(b_r, b_d, i, NT, BT, BV)
    # b_r is Delta now: O = QH + P Delta, one row tile at a time (P is zero right of the tile's diagonal block)
    if LEAD:
        b_o0 = tl.load(p_l + 2 * TP) * b_d0
        if USE_H0:
            b_o0 += tl.load(p_qh + o_c, mask=m_c, other=0)
        tl.store(p_o + o_c, b_o0.to(o.dtype.element_ty), mask=m_c)
    for i in tl.static_range(NT):
        if LEAD + i * BT < T:
            r_i = i * BT + o_t
            o_i = LEAD + r_i
            m_i = o_i < T
            b_p = tl.load(p_m + r_i[:, None] * TP + r_r[None, :],
                          mask=m_i[:, None] & (r_r < (i + 1) * BT)[None, :], other=0)  # fmt: skip
            b_o = mm(b_p, b_r, PREC, INTERPRET)
            if LEAD:
                b_o += tl.load(p_l + TP + r_i, mask=m_i, other=0)[:, None] * b_d0[None, :]
            m_ic = m_i[:, None] & m_c[None, :]
            if USE_H0:
                b_o += tl.load(p_qh + o_i[:, None] * V + o_c[None, :], mask=m_ic, other=0)
            tl.store(p_o + o_i[:, None] * (HV * V) + o_c[None, :], b_o.to(o.dtype.element_ty), mask=m_ic)


@triton.jit(do_not_specialize=["T"])
def gdn_tree_solve_left_kernel(
    amat, pmat, lead, rhs, qh, o, aux_delta, T,
    HV: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr, TP: tl.constexpr,
    USE_H0: tl.constexpr, PREC: tl.constexpr, INTERPRET: tl.constexpr,
):  # fmt: skip
    """Left-looking block forward substitution for one (value block, batch row x value head): tile i's
    residual rhs_i - sum_{j<i} A_ij Delta_j from the Delta_j this program stored (a barrier makes them
    visible to all its threads), Delta_i = X_ii residual_i; then O_i = QH_i + sum_{j<=i} P_ij Delta_j.
    Registers hold one row tile at a time, whatever T."""
    i_v = tl.program_id(0)
    NT: tl.constexpr = TP // BT
    p_a, p_m, p_r, p_qh, p_d, p_o = _solve_bases(amat, pmat, rhs, qh, o, aux_delta, T, HV, V, BV, TP, TP)
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
