r"""GDN tree verification in Triton (DESIGN §4.3, §4.6): two launches per layer, static shapes.

Math (one value head; G = root-path prefix sum of g, M = ancestor-or-self mask, H0 read only)::

    A[i, j] = beta_i exp(G_i - G_j) k_i.k_j            j a strict ancestor of i
    (I + A) Delta = beta * (V - exp(G) * (K H0))        unit lower triangular (topological order)
    O = scale * [exp(G) * (Q H0) + (M * exp(G_i - G_j) * Q K^T) Delta]

1. `gdn_tree_prep_kernel` does everything that needs no Delta, every tile in parallel (one work item
   per program): the Gram tiles K_i K_j^T and scale Q_i K_j^T once per key head (shared by its value
   heads; rows l2-normalised here when asked) and aux.k; per value head and diagonal tile the root-path
   sums G (masked row sums of the ancestor mask -> aux.G) and X_ii = (I + A_ii)^-1 as the Neumann product
   (I - A)(I + A^2)(I + A^4)... whose length is set at run time by the longest ancestor chain inside the
   tile (a tree of depth d needs ceil(log2(d + 1)) factors, a chain tile of 32 five); per (tile, value
   head, value block) the state products K_i H0 and Q_i H0.
2. `gdn_tree_fwd_kernel`, one program per (value block, batch row x value head), walks the row tiles in
   order (block forward substitution): rhs_i = beta (v - e^G K_i H0) minus A_ij Delta_j for the earlier
   tiles j, Delta_i = X_ii rhs_i, o_i = e^G Q_i H0 + sum_j P_ij Delta_j. A_ij and P_ij are the prep's Gram
   tiles times the decay exp(G_i - G_j), masked to ancestors *before* exp (off-mask differences can be
   positive). Delta_i is stored to aux.delta and read back by later tiles of the same program.

Precision: q/k/v bf16 or fp32; gates, state, G, A, the solve and Delta in fp32. Gram dots of bf16
inputs are exact products with fp32 accumulation; fp32 x fp32 products follow `precision` (see
`weaver.ops.triton._utils.PRECISIONS`; 'auto' = ieee for fp32 inputs, bf16x3 for bf16 inputs).
"""

from __future__ import annotations

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
    num_warps: int = 4
    num_stages: int = 1
    precision: str = "auto"


def default_config(T: int, V: int) -> GDNTreeConfig:
    """The fixed configuration for T nodes (H200 sweep in benchmarks/results/kernels/NOTES.md: BT=32 beat
    16 from T=32 on; BV=64 beat 32 at T=128 by 4 us with the same error; tf32 and num_stages=2 were faster
    too but tf32 adds error and neither was measured in combination)."""
    BT = 16 if T <= 16 else 32
    return GDNTreeConfig(BT=BT, BV=min(64 if T >= 128 else 32, next_pow2(V)))


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


@triton.jit(do_not_specialize=["T"])
def gdn_tree_prep_kernel(
    q, k, g, beta, h0, anc, depth, gram_s, gram_p, xinv, kh, qh, aux_k, aux_G, scale, T,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
    BV: tl.constexpr, TP: tl.constexpr, TA: tl.constexpr, LOG2BT: tl.constexpr, USE_H0: tl.constexpr,
    L2NORM: tl.constexpr, LOWP: tl.constexpr, PREC: tl.constexpr, INTERPRET: tl.constexpr,
):  # fmt: skip
    """Everything that needs no Delta, all tiles in parallel; one work item per program (axis 0), per batch
    row x key head (axis 1):
      w < NT*NT            Gram tile (i, j), j <= i: S = K_i K_j^T, P = scale Q_i K_j^T (normalised rows),
                           and aux.k rows for i = j;
      next NT*R items      diagonal tile i of one value head: G rows (aux.G), A_ii, X_ii = (I + A_ii)^-1;
      next NT*R*NV items   state products of tile i, one value head and value block: K_i H0, Q_i H0."""
    w, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_h = (i_bh // H).to(tl.int64), i_bh % H
    R: tl.constexpr = HV // H
    NT = (T + BT - 1) // BT
    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, BK)
    m_k = o_k < K
    if w < NT * NT:
        i, j = w // NT, w % NT
        if j <= i:
            o_i, o_j = i * BT + o_t, j * BT + o_t
            m_i, m_j = o_i < T, o_j < T
            p_i = ((i_b * T + o_i[:, None]) * H + i_h) * K + o_k[None, :]
            b_ki = tl.load(k + p_i, mask=m_i[:, None] & m_k[None, :], other=0)
            b_qi = tl.load(q + p_i, mask=m_i[:, None] & m_k[None, :], other=0)
            b_kj = tl.load(k + ((i_b * T + o_j[:, None]) * H + i_h) * K + o_k[None, :],
                           mask=m_j[:, None] & m_k[None, :], other=0)  # fmt: skip
            b_rki = _rnorm(b_ki, L2NORM, BT)
            b_rqi = _rnorm(b_qi, L2NORM, BT) * scale
            b_rkj = _rnorm(b_kj, L2NORM, BT)
            b_kjt = tl.trans(b_kj)
            b_s = _gram(b_ki, b_kjt, LOWP, PREC, INTERPRET) * b_rki[:, None] * b_rkj[None, :]
            b_p = _gram(b_qi, b_kjt, LOWP, PREC, INTERPRET) * b_rqi[:, None] * b_rkj[None, :]
            p_g = (i_bh.to(tl.int64) * TP + o_i[:, None]) * TP + o_j[None, :]
            tl.store(gram_s + p_g, b_s)
            tl.store(gram_p + p_g, b_p)
            if i == j:
                tl.store(aux_k + p_i, b_ki.to(tl.float32) * b_rki[:, None], mask=m_i[:, None] & m_k[None, :])
    elif w < NT * NT + NT * R:
        d = w - NT * NT
        i = d // R
        i_hv = i_h * R + d % R
        o_i = i * BT + o_t
        m_i = o_i < T
        # G = root-path sum of g: masked row sums of the ancestor mask
        o_a = tl.arange(0, TA)
        m_a = o_a < T
        b_ga = tl.load(g + (i_b * T + o_a) * HV + i_hv, mask=m_a, other=0).to(tl.float32)
        b_ma = tl.load(anc + (i_b * T + o_i[:, None]) * T + o_a[None, :], mask=m_i[:, None] & m_a[None, :], other=0)
        b_G = tl.sum(tl.where(b_ma != 0, b_ga[None, :], 0.0), 1)
        tl.store(aux_G + (i_b * T + o_i) * HV + i_hv, b_G, mask=m_i)
        # A_ii and its inverse
        b_ki = tl.load(k + ((i_b * T + o_i[:, None]) * H + i_h) * K + o_k[None, :],
                       mask=m_i[:, None] & m_k[None, :], other=0)  # fmt: skip
        b_rk = _rnorm(b_ki, L2NORM, BT)
        b_beta = tl.load(beta + (i_b * T + o_i) * HV + i_hv, mask=m_i, other=0).to(tl.float32)
        b_m = tl.load(anc + (i_b * T + o_i[:, None]) * T + o_i[None, :], mask=m_i[:, None] & m_i[None, :], other=0)
        b_m = b_m != 0
        b_dec = tl.exp(tl.where(b_m, b_G[:, None] - b_G[None, :], float("-inf")))
        b_s = _gram(b_ki, tl.trans(b_ki), LOWP, PREC, INTERPRET) * (b_beta * b_rk)[:, None] * b_rk[None, :]
        b_n = -tl.where(o_t[:, None] > o_t[None, :], b_s * b_dec, 0.0)
        # the longest ancestor chain inside the tile bounds the nilpotency of A_ii
        b_dep = tl.load(depth + i_b * T + o_i, mask=m_i, other=0)
        b_top = tl.min(tl.where(b_m, b_dep[None, :], 1 << 30), 1)
        n_chain = tl.max(tl.where(m_i, b_dep - b_top + 1, 1), 0)
        b_x = tl.where(o_t[:, None] == o_t[None, :], 1.0, 0.0) + b_n  # (I + A)^-1 = (I - A)(I + A^2)(I + A^4)...
        for lv in tl.static_range(1, LOG2BT):
            if (1 << lv) < n_chain:
                b_n = mm(b_n, b_n, PREC, INTERPRET)
                b_x = b_x + mm(b_x, b_n, PREC, INTERPRET)
        tl.store(xinv + ((i_b * HV + i_hv) * TP + o_i[:, None]) * BT + o_t[None, :], b_x)
    elif USE_H0:
        d = w - NT * NT - NT * R
        NV = (V + BV - 1) // BV
        i, i_hv, i_v = d // (R * NV), i_h * R + (d // NV) % R, d % NV
        o_i = i * BT + o_t
        m_i = o_i < T
        o_v = i_v * BV + tl.arange(0, BV)
        m_v = o_v < V
        p_i = ((i_b * T + o_i[:, None]) * H + i_h) * K + o_k[None, :]
        b_ki = tl.load(k + p_i, mask=m_i[:, None] & m_k[None, :], other=0)
        b_qi = tl.load(q + p_i, mask=m_i[:, None] & m_k[None, :], other=0)
        b_h = tl.load(h0 + ((i_b * HV + i_hv) * K + o_k[:, None]) * V + o_v[None, :],
                      mask=m_k[:, None] & m_v[None, :], other=0).to(tl.float32)  # fmt: skip
        if LOWP and PREC == 3:  # H0 = hi + lo in bf16; q/k are exact in bf16: two passes, ~fp32 accuracy
            b_hhi = b_h.to(tl.bfloat16)
            b_hlo = (b_h - b_hhi.to(tl.float32)).to(tl.bfloat16)
            b_kh = dot_lp(b_ki, b_hhi, INTERPRET) + dot_lp(b_ki, b_hlo, INTERPRET)
            b_qh = dot_lp(b_qi, b_hhi, INTERPRET) + dot_lp(b_qi, b_hlo, INTERPRET)
        else:
            b_kh = mm(b_ki.to(tl.float32), b_h, PREC, INTERPRET)
            b_qh = mm(b_qi.to(tl.float32), b_h, PREC, INTERPRET)
        p_o = ((i_b * T + o_i[:, None]) * HV + i_hv) * V + o_v[None, :]
        tl.store(kh + p_o, b_kh * _rnorm(b_ki, L2NORM, BT)[:, None], mask=m_i[:, None] & m_v[None, :])
        tl.store(qh + p_o, b_qh * (_rnorm(b_qi, L2NORM, BT) * scale)[:, None], mask=m_i[:, None] & m_v[None, :])


@triton.jit(do_not_specialize=["T"])
def gdn_tree_fwd_kernel(
    v, beta, anc, gram_s, gram_p, xinv, qh, aux_G, o, aux_delta, T,
    H: tl.constexpr, HV: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr, TP: tl.constexpr,
    USE_H0: tl.constexpr, PREC: tl.constexpr, INTERPRET: tl.constexpr,
):  # fmt: skip
    """Block forward substitution over row tiles for one (value block, batch row x value head). On entry
    aux.delta holds K H0 (from the prep kernel); each tile's rows are replaced by Delta."""
    i_v, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_hv = (i_bh // HV).to(tl.int64), i_bh % HV
    i_h = i_hv // (HV // H)
    NT = (T + BT - 1) // BT
    o_t = tl.arange(0, BT)
    o_v = i_v * BV + tl.arange(0, BV)
    m_v = o_v < V
    p_s = gram_s + (i_b * H + i_h) * TP * TP
    p_p = gram_p + (i_b * H + i_h) * TP * TP
    p_x = xinv + (i_b * HV + i_hv) * TP * BT
    p_anc = anc + i_b * T * T
    for i in range(0, NT):
        o_i = i * BT + o_t
        m_i = o_i < T
        m_iv = m_i[:, None] & m_v[None, :]
        p_o = ((i_b * T + o_i[:, None]) * HV + i_hv) * V + o_v[None, :]
        b_v = tl.load(v + p_o, mask=m_iv, other=0).to(tl.float32)
        b_beta = tl.load(beta + (i_b * T + o_i) * HV + i_hv, mask=m_i, other=0).to(tl.float32)
        b_Gi = tl.load(aux_G + (i_b * T + o_i) * HV + i_hv, mask=m_i, other=0)
        b_x = tl.load(p_x + o_i[:, None] * BT + o_t[None, :])
        b_pd = tl.load(p_p + o_i[:, None] * TP + o_i[None, :])
        b_md = tl.load(p_anc + o_i[:, None] * T + o_i[None, :], mask=m_i[:, None] & m_i[None, :], other=0)
        b_eG = tl.exp(b_Gi)
        b_rhs = b_v
        b_o = tl.zeros([BT, BV], dtype=tl.float32)
        if USE_H0:
            b_rhs -= b_eG[:, None] * tl.load(aux_delta + p_o, mask=m_iv, other=0)
            b_o = b_eG[:, None] * tl.load(qh + p_o, mask=m_iv, other=0)
        b_rhs = b_beta[:, None] * b_rhs

        # earlier tiles: rhs_i -= A_ij Delta_j, o_i += P_ij Delta_j (Gram tiles from the prep kernel)
        for j in range(0, i):
            o_j = j * BT + o_t
            m_j = o_j < T
            p_g = o_i[:, None] * TP + o_j[None, :]
            b_s = tl.load(p_s + p_g)
            b_p = tl.load(p_p + p_g)
            b_m = tl.load(p_anc + o_i[:, None] * T + o_j[None, :], mask=m_i[:, None] & m_j[None, :], other=0)
            b_Gj = tl.load(aux_G + (i_b * T + o_j) * HV + i_hv, mask=m_j, other=0)
            b_dj = tl.load(aux_delta + ((i_b * T + o_j[:, None]) * HV + i_hv) * V + o_v[None, :],
                           mask=m_j[:, None] & m_v[None, :], other=0)  # fmt: skip
            b_dec = tl.exp(tl.where(b_m != 0, b_Gi[:, None] - b_Gj[None, :], float("-inf")))
            b_rhs -= mm(b_s * b_dec * b_beta[:, None], b_dj, PREC, INTERPRET)
            b_o += mm(b_p * b_dec, b_dj, PREC, INTERPRET)

        # diagonal tile: Delta_i = X_ii rhs_i
        b_dec = tl.exp(tl.where(b_md != 0, b_Gi[:, None] - b_Gi[None, :], float("-inf")))
        b_d = mm(b_x, b_rhs, PREC, INTERPRET)
        b_o += mm(b_pd * b_dec, b_d, PREC, INTERPRET)
        tl.store(aux_delta + p_o, b_d, mask=m_iv)
        tl.store(o + p_o, b_o.to(o.dtype.element_ty), mask=m_iv)
        tl.debug_barrier()  # Delta_i is read back by later tiles of this program


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
    NT = triton.cdiv(T, BT)
    TP = NT * BT
    o = torch.empty(B, T, HV, V, dtype=out_dtype, device=dev)
    aux = GDNTreeAux(
        k=torch.empty(B, T, H, K, dtype=torch.float32, device=dev),
        delta=torch.empty(B, T, HV, V, dtype=torch.float32, device=dev),
        G=torch.empty(B, T, HV, dtype=torch.float32, device=dev),
    )
    gram_s = torch.empty(B, H, TP, TP, dtype=torch.float32, device=dev)
    gram_p = torch.empty(B, H, TP, TP, dtype=torch.float32, device=dev)
    xinv = torch.empty(B, HV, TP, BT, dtype=torch.float32, device=dev)
    qh = torch.empty(B, T, HV, V, dtype=torch.float32, device=dev) if initial_state is not None else aux.delta
    lowp = q.dtype == torch.bfloat16 and k.dtype == torch.bfloat16
    prec = precision_code(config.precision, q.dtype)
    interp = interpreting()
    R, NV = HV // H, triton.cdiv(V, BV)
    use_h0 = initial_state is not None
    h0 = initial_state if use_h0 else aux.G  # dummy pointer when absent
    n_items = NT * NT + NT * R + (NT * R * NV if use_h0 else 0)
    gdn_tree_prep_kernel[(n_items, B * H)](
        q, k, g, beta, h0, tree.anc, tree.depth, gram_s, gram_p, xinv, aux.delta, qh, aux.k, aux.G, float(scale), T,
        H=H, HV=HV, K=K, V=V, BT=BT, BK=next_pow2(K), BV=BV, TP=TP, TA=next_pow2(T), LOG2BT=BT.bit_length() - 1,
        USE_H0=use_h0, L2NORM=use_qk_l2norm, LOWP=lowp, PREC=prec, INTERPRET=interp, num_warps=4,
    )  # fmt: skip
    if not run_solve:
        return o, aux
    gdn_tree_fwd_kernel[(NV, B * HV)](
        v, beta, tree.anc, gram_s, gram_p, xinv, qh, aux.G, o, aux.delta, T,
        H=H, HV=HV, V=V, BT=BT, BV=BV, TP=TP, USE_H0=use_h0, PREC=prec, INTERPRET=interp,
        num_warps=config.num_warps, num_stages=config.num_stages,
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
    """Tree verification in one Triton launch; same contract as `weaver.ops.gdn.gdn_tree`.

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
    if T > 1024:
        raise ValueError(f"trees up to 1024 nodes are supported (tested to 256), got T={T}")
    tree = as_structure(parents)
    if tree.anc.shape != (B, T, T):
        raise ValueError(f"parents/structure must describe [B, T] = {(B, T)} trees, got {tuple(tree.depth.shape)}")
    check_device(q, k, v, g, beta, initial_state, tree.anc)
    cfg = config if config is not None else default_config(T, V)
    scale = K**-0.5 if scale is None else scale
    q, k, v, g, beta = (x.contiguous() for x in (q, k, v, g, beta))
    if initial_state is not None:
        initial_state = initial_state.contiguous()
    out_dtype = v.dtype if out_dtype is None else out_dtype
    return gdn_tree_fwd(q, k, v, g, beta, tree, scale, initial_state, use_qk_l2norm, cfg, out_dtype)
