"""Tree short convolution and its commit in Triton (DESIGN §4.5; same contracts as weaver.ops.conv).

Node i's window is itself plus its W-1 nearest ancestors, continuing into the committed conv state above
the root (the root's "parent" is state[..., -1], then state[..., -2], ...); pad nodes (parent -1) act as
roots. The ancestor walk is W-1 dependent gathers of `parents` per node, done once per node block and
shared by every channel block of that program. Memory bound: x read once (plus ancestor rows, mostly
from L2), y written once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from weaver.kernels.triton._utils import check_device, next_pow2
from weaver.kernels.triton.structure import TreeStructure
from weaver.ops.conv import check_conv_args

__all__ = ["conv_state_commit", "conv_state_commit_stacked", "tree_conv1d"]


@triton.jit
def tree_conv1d_kernel(
    x,
    weight,
    parents,
    state,
    y,
    x_out,
    N,
    C,
    sxb,
    sxn,
    W: tl.constexpr,
    BN: tl.constexpr,
    BC: tl.constexpr,
    USE_STATE: tl.constexpr,
    SILU: tl.constexpr,
    STORE_X: tl.constexpr,
):
    i_c, i_n, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    o_n = i_n * BN + tl.arange(0, BN)
    o_c = i_c * BC + tl.arange(0, BC)
    m_n = o_n < N
    m_c = o_c < C
    S: tl.constexpr = W - 1
    p_x = x + i_b * sxb + o_c[None, :]  # x may be a column slice of a wider tensor: node n at n * sxn
    b_x = tl.load(p_x + o_n[:, None] * sxn, mask=m_n[:, None] & m_c[None, :], other=0)
    if STORE_X:  # keep the raw inputs for the commit (each tile is loaded by exactly one program)
        tl.store(x_out + (i_b * N + o_n[:, None]) * C + o_c[None, :], b_x, mask=m_n[:, None] & m_c[None, :])
    b_w = tl.load(weight + o_c * W + (W - 1), mask=m_c, other=0).to(tl.float32)
    b_y = b_x.to(tl.float32) * b_w[None, :]
    # e >= 0: a node id; e < 0: state column S + e (below 0: zeros)
    b_e = o_n
    for s in tl.static_range(1, W):
        is_node = b_e >= 0
        b_p = tl.load(parents + i_b * N + b_e, mask=is_node & m_n, other=-1).to(tl.int32)
        b_e = tl.where(is_node, tl.where(b_p >= 0, b_p, -1), b_e - 1)
        m_x = (b_e >= 0) & m_n
        b_a = tl.load(p_x + b_e[:, None] * sxn, mask=m_x[:, None] & m_c[None, :], other=0)
        b_a = b_a.to(tl.float32)
        if USE_STATE:
            b_col = S + b_e
            m_s = (b_e < 0) & (b_col >= 0) & m_n
            b_a += tl.load(
                state + (i_b * C + o_c[None, :]) * S + b_col[:, None], mask=m_s[:, None] & m_c[None, :], other=0
            ).to(tl.float32)
        b_w = tl.load(weight + o_c * W + (W - 1 - s), mask=m_c, other=0).to(tl.float32)
        b_y += b_a * b_w[None, :]
    if SILU:
        b_y = b_y / (1.0 + tl.exp(-b_y))  # silu (tl.sigmoid is a jit helper; see __init__)
    tl.store(
        y + (i_b * N + o_n[:, None]) * C + o_c[None, :], b_y.to(y.dtype.element_ty), mask=m_n[:, None] & m_c[None, :]
    )


@triton.jit
def conv_state_commit_kernel(
    x, path, state, out, B, N, C, P, stride_sl, S: tl.constexpr, BS: tl.constexpr, BC: tl.constexpr,
    BP: tl.constexpr, IN_PLACE: tl.constexpr,
):
    i_c, i_b, i_l = tl.program_id(0), tl.program_id(1).to(tl.int64), tl.program_id(2).to(tl.int64)
    x += i_l * B * N * C  # layer i_l of the stacked inputs (0 for one layer)
    state += i_l * stride_sl
    out += i_l * stride_sl
    o_c = i_c * BC + tl.arange(0, BC)
    m_c = o_c < C
    o_p = tl.arange(0, BP)
    n = tl.sum(tl.where(tl.load(path + i_b * P + o_p, mask=o_p < P, other=-1) >= 0, 1, 0), 0)
    for p0 in range(BP, P, BP):
        n += tl.sum(tl.where(tl.load(path + i_b * P + p0 + o_p, mask=p0 + o_p < P, other=-1) >= 0, 1, 0), 0)
    # column s of the result is entry n + s of concat(state, x[path])
    o_s = tl.arange(0, BS)
    m_s = o_s < S
    b_idx = n + o_s
    m_st = m_s & (b_idx < S)
    m_pa = m_s & (b_idx >= S)
    b_node = tl.load(path + i_b * P + (b_idx - S), mask=m_pa, other=0).to(tl.int64)
    b_from_x = tl.load(x + (i_b * N + b_node[None, :]) * C + o_c[:, None], mask=m_c[:, None] & m_pa[None, :], other=0)
    b_from_s = tl.load(
        state + (i_b * C + o_c[:, None]) * S + b_idx[None, :], mask=m_c[:, None] & m_st[None, :], other=0
    )
    b_out = tl.where(m_pa[None, :], b_from_x.to(tl.float32), b_from_s.to(tl.float32))
    if IN_PLACE:  # column s is written from column n + s: every thread's loads before any thread's store
        tl.debug_barrier()
    tl.store(
        out + (i_b * C + o_c[:, None]) * S + o_s[None, :],
        b_out.to(out.dtype.element_ty),
        mask=m_c[:, None] & m_s[None, :],
    )


def tree_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    parents: torch.Tensor | TreeStructure,
    state: torch.Tensor | None = None,
    activation: str | None = "silu",
    *,
    x_out: torch.Tensor | None = None,
    BN: int = 16,
    BC: int = 128,
) -> torch.Tensor:
    """Causal depthwise conv on a tree; same contract as `weaver.ops.conv.tree_conv1d`.

    Args:
        x: [B, N, C] raw inputs of the tree nodes; weight: [C, W].
        parents: LongTensor [B, N] or a TreeStructure (its parents are used).
        state: [B, C, W-1] committed raw inputs before the root, oldest first (None = zeros).
        activation: None or "silu".
        x_out: optional contiguous [B, N, C] tensor of x's dtype that receives a copy of x (the commit's slot in
            the stacked inputs of every layer, written by the same launch: no extra copy kernel).
    Returns:
        y: [B, N, C] in x's dtype.
    """
    par = parents.parents if isinstance(parents, TreeStructure) else parents
    W = check_conv_args(x, weight, state, activation)
    B, N, C = x.shape
    if par.shape != (B, N):
        raise ValueError(f"parents must be [B, N] = {(B, N)}, got shape {tuple(par.shape)}")
    check_device(x, weight, par, state, x_out)
    if x_out is not None and (x_out.shape != x.shape or x_out.dtype != x.dtype or not x_out.is_contiguous()):
        raise ValueError(f"x_out must be contiguous {x.dtype} {tuple(x.shape)}, got {x_out.dtype} {tuple(x_out.shape)}")
    if x.stride(2) != 1 and C > 1:  # node rows may be strided (a column slice), channels must be dense
        x = x.contiguous()
    weight, par = weight.contiguous(), par.contiguous()
    use_state = state is not None and W > 1
    st = state.contiguous() if use_state else x
    y = torch.empty(B, N, C, dtype=x.dtype, device=x.device)
    BC = min(BC, next_pow2(C))
    grid = (triton.cdiv(C, BC), triton.cdiv(N, BN), B)
    tree_conv1d_kernel[grid](
        x, weight, par, st, y, x_out if x_out is not None else y, N, C, x.stride(0), x.stride(1), W=W, BN=BN, BC=BC,
        USE_STATE=use_state, SILU=activation == "silu", STORE_X=x_out is not None, num_warps=4,
    )  # fmt: skip
    return y


def conv_state_commit(x: torch.Tensor, path: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """Conv state after accepting `path`: the last W-1 raw inputs of concat(state, x[path]).

    Same contract as `weaver.ops.conv.conv_state_commit`: x [B, N, C]; path [B, P] root..leaf node ids,
    right-padded with -1; state [B, C, W-1]. Returns the new state [B, C, W-1] in x's dtype.
    """
    if x.dim() != 3 or state.dim() != 3 or state.shape[:2] != (x.shape[0], x.shape[2]):
        raise ValueError(
            f"need x [B, N, C] and state [B, C, W-1] with matching B, C; got {tuple(x.shape)}, {tuple(state.shape)}"
        )
    B, N, C = x.shape
    S = state.shape[2]
    if path.dim() != 2 or path.shape[0] != B or path.shape[1] < 1:
        raise ValueError(f"path must be [B, P] with B = {B} and P >= 1, got shape {tuple(path.shape)}")
    check_device(x, path, state)
    out = torch.empty(B, C, S, dtype=x.dtype, device=x.device)
    if S == 0:
        return out
    x, path, state = x.contiguous(), path.contiguous(), state.contiguous()
    BC = min(128, next_pow2(C))
    conv_state_commit_kernel[(triton.cdiv(C, BC), B, 1)](
        x, path, state, out, B, N, C, path.shape[1], 0, S=S, BS=next_pow2(S, 2), BC=BC, BP=16, IN_PLACE=False,
        num_warps=4,
    )  # fmt: skip
    return out


def conv_state_commit_stacked(x: torch.Tensor, path: torch.Tensor, state: torch.Tensor) -> None:
    """Every layer's conv window after accepting `path`, written into `state` in place: one launch for L layers.

    Layer l gets `conv_state_commit(x[l], path, state[l])`. x: [L, B, N, C] contiguous (the stacked pre-conv
    inputs of the tree nodes); path: [B, P] root..leaf node ids, right-padded with -1 (shared by every layer);
    state: [L, B, C, W-1] in x's dtype, each layer contiguous (rows of a bigger stack are fine). In place is
    safe: a program reads its whole [BC, W-1] block of `state` before a barrier and writes only that block.
    """
    if x.dim() != 4 or state.dim() != 4 or state.shape[:3] != (x.shape[0], x.shape[1], x.shape[3]):
        raise ValueError(
            f"need x [L, B, N, C] and state [L, B, C, W-1] with matching L, B, C; got {tuple(x.shape)}, "
            f"{tuple(state.shape)}"
        )
    L, B, N, C = x.shape
    S = state.shape[3]
    if path.dim() != 2 or path.shape[0] != B or path.shape[1] < 1:
        raise ValueError(f"path must be [B, P] with B = {B} and P >= 1, got shape {tuple(path.shape)}")
    if state.dtype != x.dtype or not x.is_contiguous() or not state[0].is_contiguous():
        raise ValueError(
            f"need contiguous x and state layers of one dtype; got x {x.dtype} strides {x.stride()}, state "
            f"{state.dtype} strides {state.stride()}"
        )
    check_device(x, path, state)
    if S == 0:
        return
    path = path.contiguous()
    BC = min(128, next_pow2(C))
    conv_state_commit_kernel[(triton.cdiv(C, BC), B, L)](
        x, path, state, state, B, N, C, path.shape[1], state.stride(0), S=S, BS=next_pow2(S, 2), BC=BC, BP=16,
        IN_PLACE=True, num_warps=4,
    )  # fmt: skip
