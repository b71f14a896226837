r"""Commit fold of the GDN state along the accepted path (DESIGN §4.4), one Triton launch (for every layer).

For the accepted leaf l (the last valid entry of `path`)::

    H* = exp(G_l) H0 + sum_{j on path} exp(G_l - G_j) k_j Delta_j^T

from the per-node factors (k, Delta, G) that the tree pass kept; no replay of the layer. One program per
(state tile, batch row x value head) holds a [BK, BV] fp32 tile of the new state (key rows x value columns);
the path is walked in chunks of BP nodes (only the valid ones) and each chunk adds one [BK, BP] x [BP, BV]
dot. The fold is separable in both dimensions, so the tiling is a launch choice: [K, BV] tiles read BV-column
strips of every row, [BK, V] tiles read whole rows, contiguous. The default, [64, 64] with 4 warps, was the
fastest of six tiles at the 27B shape on an H100 (0.89-0.92x the [128, 32] tile it replaced, at paths of 1-16;
benchmarks/results/kernels/h100_session39/).

`gdn_tree_commit_stacked` folds every GDN layer at once (the grid's third axis is the layer) into the stacked
state [L, B, HV, K, V] in place. In place is safe: a program reads exactly the [BK, BV] tile of H0 that it
writes, no other program touches that block, and every stored element is computed from the load of that same
element (a data dependence), so no element is overwritten before it has been read.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from weaver.kernels.triton._utils import check_device, interpreting, mm, next_pow2, precision_code
from weaver.ops.gdn import GDNTreeAux

__all__ = ["gdn_tree_commit", "gdn_tree_commit_stacked"]

DEFAULT_BK, DEFAULT_BV = 64, 64  # the state tile both launchers default to (module docstring)


@triton.jit(do_not_specialize=["T", "P"])
def gdn_commit_kernel(
    aux_k,
    aux_delta,
    aux_G,
    path,
    h0,
    h_out,
    B,
    T,
    P,
    stride_hl,
    H: tl.constexpr,
    HV: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BP: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    USE_H0: tl.constexpr,
    PREC: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    i_t, i_bh, i_l = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    i_k, i_v = i_t // tl.cdiv(V, BV), i_t % tl.cdiv(V, BV)
    i_b, i_hv = (i_bh // HV).to(tl.int64), i_bh % HV
    aux_k += i_l * B * T * H * K  # layer i_l of the stacked factors (0 for one layer)
    aux_delta += i_l * B * T * HV * V
    aux_G += i_l * B * T * HV
    h0 += i_l * stride_hl
    h_out += i_l * stride_hl
    i_h = i_hv // (HV // H)
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    o_p = tl.arange(0, BP)

    # number of valid entries (the path is right-padded with -1)
    n = tl.sum(tl.where(tl.load(path + i_b * P + o_p, mask=o_p < P, other=-1) >= 0, 1, 0), 0)
    for p0 in range(BP, P, BP):
        b_node = tl.load(path + i_b * P + p0 + o_p, mask=p0 + o_p < P, other=-1)
        n += tl.sum(tl.where(b_node >= 0, 1, 0), 0)
    leaf = tl.load(path + i_b * P + tl.maximum(n - 1, 0)).to(tl.int64)
    b_Gl = tl.load(aux_G + (i_b * T + leaf) * HV + i_hv, mask=(n > 0) & (leaf >= 0), other=0)

    b_h = tl.zeros([BK, BV], dtype=tl.float32)
    if USE_H0:
        p_h = h0 + ((i_b * HV + i_hv) * K + o_k[:, None]) * V + o_v[None, :]
        b_h = tl.exp(b_Gl) * tl.load(p_h, mask=m_k[:, None] & m_v[None, :], other=0).to(tl.float32)
    for p0 in range(0, n, BP):
        b_node = tl.load(path + i_b * P + p0 + o_p, mask=p0 + o_p < n, other=-1).to(tl.int64)
        m_p = b_node >= 0
        b_Gj = tl.load(aux_G + (i_b * T + b_node) * HV + i_hv, mask=m_p, other=0)
        b_w = tl.exp(tl.where(m_p, b_Gl - b_Gj, float("-inf")))
        b_kj = tl.load(
            aux_k + ((i_b * T + b_node[:, None]) * H + i_h) * K + o_k[None, :],
            mask=m_p[:, None] & m_k[None, :],
            other=0,
        )
        b_dj = tl.load(
            aux_delta + ((i_b * T + b_node[:, None]) * HV + i_hv) * V + o_v[None, :],
            mask=m_p[:, None] & m_v[None, :],
            other=0,
        )
        b_h += mm(tl.trans(b_kj * b_w[:, None]), b_dj, PREC, INTERPRET)
    tl.store(h_out + ((i_b * HV + i_hv) * K + o_k[:, None]) * V + o_v[None, :], b_h, mask=m_k[:, None] & m_v[None, :])


def _tile(K: int, V: int, BK: int | None, BV: int) -> tuple[int, int, int]:
    """The state tile per program, BK key rows (None: all of K) x BV value columns, each clipped to the state,
    and the number of tiles a [K, V] state holds (the grid's first axis)."""
    for name, size in (("BK", BK), ("BV", BV)):
        if size is not None and (size < 1 or size & (size - 1)):
            raise ValueError(f"{name} must be a power of two, got {size}")
    BK, BV = min(BK or next_pow2(K), next_pow2(K)), min(BV, next_pow2(V))
    return BK, BV, triton.cdiv(K, BK) * triton.cdiv(V, BV)


def gdn_tree_commit(
    aux: GDNTreeAux,
    path: torch.Tensor,
    initial_state: torch.Tensor | None,
    *,
    precision: str = "ieee",
    BK: int | None = DEFAULT_BK,
    BV: int = DEFAULT_BV,
    num_warps: int = 4,
) -> torch.Tensor:
    """State after the last node of `path`; same contract as `weaver.ops.gdn.gdn_tree_commit`.

    Args:
        aux: GDNTreeAux(k [B, T, H, K], delta [B, T, HV, V], G [B, T, HV]) from `gdn_tree`.
        path: integer tensor [B, P], node ids root..leaf, right-padded with -1 (>= 1 valid entry per row;
            a row with none gives H0 back).
        initial_state: [B, HV, K, V], the state passed to gdn_tree; None means zeros.
        precision: fp32 dot precision of the fold ('ieee' default; see _utils.PRECISIONS).
        BK, BV: the state tile per program, key rows (None: all K) x value columns (powers of two; the
            module docstring says why 64 x 64).
        num_warps: warps per program.
    Returns:
        h: [B, HV, K, V] float32.
    """
    k, delta, G = aux
    B, T, H, K = k.shape
    HV, V = delta.shape[2], delta.shape[3]
    if delta.shape[:2] != (B, T) or G.shape != (B, T, HV) or HV % H != 0:
        raise ValueError(f"aux shapes disagree: k {tuple(k.shape)}, delta {tuple(delta.shape)}, G {tuple(G.shape)}")
    if path.dim() != 2 or path.shape[0] != B or path.shape[1] < 1:
        raise ValueError(f"path must be [B, P] with B = {B} and P >= 1, got {tuple(path.shape)}")
    if initial_state is not None and initial_state.shape != (B, HV, K, V):
        raise ValueError(f"initial_state must be [B, HV, K, V] = {(B, HV, K, V)}, got {tuple(initial_state.shape)}")
    check_device(k, delta, G, path, initial_state)
    k, delta, G = (x.float().contiguous() for x in (k, delta, G))
    path = path.contiguous()
    if initial_state is not None:
        initial_state = initial_state.contiguous()
    h = torch.empty(B, HV, K, V, dtype=torch.float32, device=k.device)
    BK, BV, tiles = _tile(K, V, BK, BV)
    gdn_commit_kernel[(tiles, B * HV, 1)](
        k, delta, G, path, initial_state if initial_state is not None else h, h, B, T, path.shape[1], 0,
        H=H, HV=HV, K=K, V=V, BP=16, BK=BK, BV=BV, USE_H0=initial_state is not None,
        PREC=precision_code(precision, torch.float32), INTERPRET=interpreting(), num_warps=num_warps,
    )  # fmt: skip
    return h


def gdn_tree_commit_stacked(
    k: torch.Tensor,
    delta: torch.Tensor,
    G: torch.Tensor,
    path: torch.Tensor,
    state: torch.Tensor,
    *,
    precision: str = "ieee",
    BK: int | None = DEFAULT_BK,
    BV: int = DEFAULT_BV,
    num_warps: int = 4,
) -> None:
    """Every layer's state after the last node of `path`, written into `state` in place: one launch for L layers.

    Layer l gets `gdn_tree_commit((k[l], delta[l], G[l]), path, state[l])`.

    Args:
        k: [L, B, T, H, K], delta: [L, B, T, HV, V], G: [L, B, T, HV]; float32, contiguous (the stacked
            factors every layer's `gdn_tree` wrote).
        path: integer tensor [B, P], node ids root..leaf, right-padded with -1 (shared by every layer).
        state: [L, B, HV, K, V] float32, each layer's [B, HV, K, V] contiguous (rows of a bigger stack are fine).
        precision, BK, BV, num_warps: as `gdn_tree_commit`.
    """
    if k.dim() != 5 or delta.dim() != 5 or state.dim() != 5:
        raise ValueError(
            f"need k [L, B, T, H, K], delta [L, B, T, HV, V] and state [L, B, HV, K, V]; got {tuple(k.shape)}, "
            f"{tuple(delta.shape)}, {tuple(state.shape)}"
        )
    L, B, T, H, K = k.shape
    HV, V = delta.shape[3], delta.shape[4]
    if delta.shape[:3] != (L, B, T) or G.shape != (L, B, T, HV) or HV % H != 0:
        raise ValueError(f"factor shapes disagree: k {tuple(k.shape)}, delta {tuple(delta.shape)}, G {tuple(G.shape)}")
    if state.shape != (L, B, HV, K, V) or state.dtype != torch.float32 or not state[0].is_contiguous():
        raise ValueError(
            f"state must be float32 [L, B, HV, K, V] = {(L, B, HV, K, V)} with contiguous layers, got "
            f"{state.dtype} {tuple(state.shape)} strides {state.stride()}"
        )
    if any(x.dtype != torch.float32 or not x.is_contiguous() for x in (k, delta, G)):
        raise ValueError("k, delta and G must be contiguous float32 (allocate them stacked)")
    if path.dim() != 2 or path.shape[0] != B or path.shape[1] < 1:
        raise ValueError(f"path must be [B, P] with B = {B} and P >= 1, got {tuple(path.shape)}")
    check_device(k, delta, G, path, state)
    path = path.contiguous()
    BK, BV, tiles = _tile(K, V, BK, BV)
    gdn_commit_kernel[(tiles, B * HV, L)](
        k, delta, G, path, state, state, B, T, path.shape[1], state.stride(0),
        H=H, HV=HV, K=K, V=V, BP=16, BK=BK, BV=BV, USE_H0=True,
        PREC=precision_code(precision, torch.float32), INTERPRET=interpreting(), num_warps=num_warps,
    )  # fmt: skip
