"""Fused tree-verify kernels for attention layers: one or two launches between the qkv and o projections.

    q = tree_rope_kv_write(qkv, cache_k, cache_v, lengths, depth, inv_freq, H, Hkv, q_norm, k_norm)
    o = tree_attention(q, cache_k, cache_v, lengths, anc, H, Hkv)
or, for small trees (the chain's verify, the drafter's block),
    cos, sin = rope_table(lengths, depth, inv_freq, dtype)      # once a verify, shared by every layer
    o = tree_attention_rope(qkv, cache_k, cache_v, lengths, anc, cos, sin, H, Hkv, q_norm, k_norm)

A batch row b holds a draft tree of T nodes after L_b = lengths[b] committed tokens. Node j sits at
position L_b + depth[b, j] and writes its K/V at slot L_b + j (the committed length does not move;
`Decoder.commit` compacts the accepted path later). Node i attends to

    slots s < L_b                     (the committed prefix)
    slots L_b + j, anc[b, i, j]       (its ancestors-or-self: `weaver.ops.tree.ancestor_mask`)

so a pad node (parent -1 past the root) sees the prefix and itself and changes nobody. Attention
must read K/V that other programs write, hence two launches where the decode step has one; or each
attention program ropes every tree node's K itself (`tree_attention_rope`: cheap for a few dozen nodes).

`tree_attention` is a flash-attention tile: a program takes BLOCK_R (node, query head) rows that share
one kv head, so each K/V tile is read once for the whole group and both products run on the tensor
cores; the probabilities meet V rounded to the model dtype (as in SDPA's fused kernels). Torch
references: `weaver.ops.decode.tree_rope_kv_write_ref` / `tree_attention_ref`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from weaver.kernels.triton import tuning
from weaver.kernels.triton._utils import check_device, interpreting, pdl_launch, pdl_wait, prefetch_prefix
from weaver.kernels.triton.decode import _round


def _check_caches(cache_k: torch.Tensor, cache_v: torch.Tensor, num_heads: int, num_kv_heads: int) -> None:
    """The layout every verify kernel indexes: K and V caches of equal strides, unit stride along D, and
    whole groups of query heads per kv head."""
    if cache_k.stride() != cache_v.stride() or cache_k.stride(3) != 1 or num_heads % num_kv_heads:
        raise ValueError("cache_k and cache_v need equal strides, unit stride along D, and H % Hkv == 0")


@triton.jit
def _rope_rows(
    p_rows, mask_r, o_d, D: tl.constexpr, ROT: tl.constexpr, cos, sin, norm_ptr, eps,
    QK_NORM: tl.constexpr, DTYPE: tl.constexpr,
):
    """Head rows [R, BLOCK_D] in fp32 (p_rows: [R, 1] pointers to each head's first element; cos, sin: fp32
    holding DTYPE values, [R or 1, BLOCK_D], entry d at frequency d % (ROT/2)): [RMSNorm ->] RoPE on the
    first ROT dims, with the rounding points of decode's `_head_vector`."""
    HALF: tl.constexpr = ROT // 2
    mask = mask_r[:, None] & (o_d < D)[None, :]
    partner = tl.where(o_d < HALF, o_d + HALF, o_d - HALF)
    in_rot = o_d < ROT
    mask_p = mask & in_rot[None, :]
    x = tl.load(p_rows + o_d[None, :], mask=mask, other=0.0).to(tl.float32)
    xp = tl.load(p_rows + partner[None, :], mask=mask_p, other=0.0).to(tl.float32)
    if QK_NORM:
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / D + eps)
        w = tl.load(norm_ptr + o_d, mask=o_d < D, other=0.0).to(tl.float32)
        wp = tl.load(norm_ptr + partner, mask=in_rot & (o_d < D), other=0.0).to(tl.float32)
        x = _round(_round(x * rstd[:, None], DTYPE) * w[None, :], DTYPE)
        xp = _round(_round(xp * rstd[:, None], DTYPE) * wp[None, :], DTYPE)
    signed = tl.where((o_d < HALF)[None, :], -xp, xp)
    rotated = _round(_round(x * cos, DTYPE) + _round(signed * sin, DTYPE), DTYPE)
    return _round(tl.where(in_rot[None, :], rotated, x), DTYPE)


@triton.jit
def _heads_rope(
    src, o_h, mask_h, o_d, D: tl.constexpr, ROT: tl.constexpr, pos, inv_freq_ptr, norm_ptr, eps,
    QK_NORM: tl.constexpr, DTYPE: tl.constexpr,
):
    """Heads [BLOCK_H, BLOCK_D] of one node's q or k (at position pos) in fp32: `_rope_rows` of its heads,
    the angles computed once for all of them."""
    freq = tl.load(inv_freq_ptr + (o_d % (ROT // 2)), mask=o_d < ROT, other=0.0)
    angle = pos.to(tl.float32) * freq
    cos = _round(tl.cos(angle), DTYPE)[None, :]
    sin = _round(tl.sin(angle), DTYPE)[None, :]
    return _rope_rows(src + o_h[:, None] * D, mask_h, o_d, D, ROT, cos, sin, norm_ptr, eps, QK_NORM, DTYPE)


@triton.jit
def _rope_table_kernel(len_ptr, depth_ptr, inv_freq_ptr, cos_ptr, sin_ptr, T, stride_db, stride_dj,
                       HALF: tl.constexpr, BLOCK_F: tl.constexpr, PDL: tl.constexpr = False):  # fmt: skip
    if PDL:  # programmatic dependent launch: nothing is read before the wait
        pdl_wait()
    i_row = tl.program_id(0)  # b * T + j: one node
    i_b = i_row // T
    pos = tl.load(len_ptr + i_b) + tl.load(depth_ptr + i_b * stride_db + (i_row % T) * stride_dj)
    o_f = tl.arange(0, BLOCK_F)
    mask = o_f < HALF
    angle = pos.to(tl.float32) * tl.load(inv_freq_ptr + o_f, mask=mask, other=0.0)
    dtype = cos_ptr.dtype.element_ty  # rounded as the kernels that compute their own angles round them
    tl.store(cos_ptr + i_row * HALF + o_f, _round(tl.cos(angle), dtype).to(dtype), mask=mask)
    tl.store(sin_ptr + i_row * HALF + o_f, _round(tl.sin(angle), dtype).to(dtype), mask=mask)


def rope_table(
    lengths: torch.Tensor, depth: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [B T, rot/2] in `dtype` of every tree node's position lengths[b] + depth[b, j]: one launch a
    verify, shared by every layer's `tree_attention_rope` (so no layer computes a sine)."""
    check_device(lengths, depth, inv_freq)
    b, t = depth.shape
    if lengths.shape != (b,):
        raise ValueError(f"lengths must be [{b}], got {tuple(lengths.shape)}")
    half = inv_freq.shape[0]
    inv_freq = inv_freq.float().contiguous()
    cos = torch.empty(b * t, half, device=depth.device, dtype=dtype)
    sin = torch.empty_like(cos)
    _rope_table_kernel[(b * t,)](lengths, depth, inv_freq, cos, sin, t, *depth.stride(), HALF=half,
                                 BLOCK_F=triton.next_power_of_2(half), num_warps=1,
                                 **pdl_launch(lengths.device))  # fmt: skip
    return cos, sin


@triton.jit
def _tree_rope_kv_kernel(
    qkv_ptr, k_ptr, v_ptr, len_ptr, depth_ptr, inv_freq_ptr, qn_ptr, kn_ptr, q_out_ptr,
    T, S, eps,
    stride_qkv, stride_db, stride_dj, stride_cb, stride_ch, stride_cs, stride_q,
    H: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, ROT: tl.constexpr, QK_NORM: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_HKV: tl.constexpr, BLOCK_D: tl.constexpr, PDL: tl.constexpr = False,
):
    if PDL:  # programmatic dependent launch: nothing is read before the wait
        pdl_wait()
    i_row = tl.program_id(0)  # b * T + j: one node, all of its heads
    i_b = i_row // T
    i_j = i_row % T
    dtype = qkv_ptr.dtype.element_ty
    length = tl.load(len_ptr + i_b)
    pos = length + tl.load(depth_ptr + i_b * stride_db + i_j * stride_dj)
    o_d = tl.arange(0, BLOCK_D)
    p_row = qkv_ptr + i_row * stride_qkv
    o_h = tl.arange(0, BLOCK_H)
    mask_h = o_h < H
    b_q = _heads_rope(p_row, o_h, mask_h, o_d, D, ROT, pos, inv_freq_ptr, qn_ptr, eps, QK_NORM, dtype)
    mask_q = mask_h[:, None] & (o_d < D)[None, :]
    tl.store(q_out_ptr + i_row * stride_q + o_h[:, None] * D + o_d[None, :], b_q.to(dtype), mask=mask_q)
    o_g = tl.arange(0, BLOCK_HKV)
    slot = length + i_j + 0 * o_g
    mask_g = (o_g < HKV) & (slot < S)  # a tree past the capacity is dropped, never written out of bounds
    b_k = _heads_rope(p_row + H * D, o_g, mask_g, o_d, D, ROT, pos, inv_freq_ptr, kn_ptr, eps, QK_NORM, dtype)
    mask_kv = mask_g[:, None] & (o_d < D)[None, :]
    b_v = tl.load(p_row + (H + HKV) * D + o_g[:, None] * D + o_d[None, :], mask=mask_kv, other=0.0)
    offset = i_b * stride_cb + o_g[:, None] * stride_ch + slot[:, None] * stride_cs + o_d[None, :]
    tl.store(k_ptr + offset, b_k.to(k_ptr.dtype.element_ty), mask=mask_kv)
    tl.store(v_ptr + offset, b_v.to(v_ptr.dtype.element_ty), mask=mask_kv)


def check_tree_rope(
    cache_k: torch.Tensor, cache_v: torch.Tensor, lengths: torch.Tensor, depth: torch.Tensor, num_heads: int,
    num_kv_heads: int, q_norm: torch.Tensor | None, k_norm: torch.Tensor | None,
) -> tuple[int, int, int, int]:
    """The RoPE + K/V-write arguments of `tree_rope_kv_write` (and `qkv_rope.qkv_rope_kv`) checked: B, T, S, D."""
    b, _, s, d = cache_k.shape
    if depth.dim() != 2 or depth.shape[0] != b or lengths.shape != (b,):
        raise ValueError(f"lengths must be [{b}] and depth [{b}, T], got {tuple(lengths.shape)}, {tuple(depth.shape)}")
    _check_caches(cache_k, cache_v, num_heads, num_kv_heads)
    if (q_norm is None) != (k_norm is None):
        raise ValueError("q_norm and k_norm come together (qk-norm) or not at all")
    return b, depth.shape[1], s, d


def tree_rope_kv_write(
    qkv: torch.Tensor,  # [B T, (H + 2 Hkv) D]: the fused q | k | v projection, node-major per row
    cache_k: torch.Tensor,  # [B, Hkv, S, D], unit stride along D
    cache_v: torch.Tensor,
    lengths: torch.Tensor,  # [B] long: committed tokens per row
    depth: torch.Tensor,  # [B, T] long: node depths (root 0)
    inv_freq: torch.Tensor,  # [rot/2] fp32
    num_heads: int,
    num_kv_heads: int,
    q_norm: torch.Tensor | None = None,  # [D] per-head RMSNorm weights (qwen3)
    k_norm: torch.Tensor | None = None,
    eps: float = 1e-6,
    num_warps: int | None = None,  # None: tuned (`tuning`), else 4
) -> torch.Tensor:
    """qk-norm + RoPE at lengths + depth; K/V of node j to slot lengths + j; returns q [B T, H D]: one launch."""
    check_device(qkv, cache_k, cache_v, lengths, depth, inv_freq)
    b, t, s, d = check_tree_rope(cache_k, cache_v, lengths, depth, num_heads, num_kv_heads, q_norm, k_norm)
    width = (num_heads + 2 * num_kv_heads) * d
    if qkv.shape != (b * t, width) or qkv.stride(1) != 1:
        raise ValueError(f"qkv must be [{b * t}, {width}] with unit stride, got {tuple(qkv.shape)}")
    q = torch.empty(b * t, num_heads * d, device=qkv.device, dtype=qkv.dtype)
    inv_freq = inv_freq.float().contiguous()
    if num_warps is None:
        key = tuning.attention_key(b * t, num_heads, num_kv_heads, d, qkv.dtype)
        num_warps = (tuning.tuned("tree_rope_kv_write", key) or [4])[0]
    _tree_rope_kv_kernel[(b * t,)](
        qkv, cache_k, cache_v, lengths, depth, inv_freq,
        q_norm if q_norm is not None else inv_freq, k_norm if k_norm is not None else inv_freq, q,
        t, s, eps,
        qkv.stride(0), *depth.stride(), cache_k.stride(0), cache_k.stride(1), cache_k.stride(2), q.stride(0),
        H=num_heads, HKV=num_kv_heads, D=d, ROT=2 * inv_freq.shape[0], QK_NORM=q_norm is not None,
        BLOCK_H=triton.next_power_of_2(num_heads), BLOCK_HKV=triton.next_power_of_2(num_kv_heads),
        BLOCK_D=triton.next_power_of_2(d), num_warps=num_warps, **pdl_launch(qkv.device),
    )
    return q


@triton.jit
def _dot_lp(a, b, DTYPE: tl.constexpr, INTERPRET: tl.constexpr):
    """a @ b, fp32 result: 16-bit operands on the tensor cores, fp32 (and the interpreter) as exact FMAs."""
    if INTERPRET or DTYPE == tl.float32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        return tl.dot(a.to(DTYPE), b.to(DTYPE))


@triton.jit
def _softmax_step(scores, b_v, m_i, l_i, acc, DTYPE: tl.constexpr, INTERPRET: tl.constexpr):
    """One online-softmax update of rows [R] with scores [R, S] (-inf where hidden) and values [S, D].

    A row that has seen nothing visible yet keeps m = -inf; the shift by 0 then keeps exp() finite.
    The probabilities meet V rounded to the model dtype, as in flash attention."""
    m_new = tl.maximum(m_i, tl.max(scores, axis=1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.exp(scores - m_safe[:, None])
    alpha = tl.exp(m_i - m_safe)
    acc = acc * alpha[:, None] + _dot_lp(_round(p, DTYPE), b_v, DTYPE, INTERPRET)
    return m_new, l_i * alpha + tl.sum(p, axis=1), acc


@triton.jit
def _program_rows(T, H: tl.constexpr, HKV: tl.constexpr, BLOCK_R: tl.constexpr):
    """A tree-attention program's rows: a block i_r of (node, query head) pairs of one batch row i_b and kv
    head i_kvh (so each K/V tile is read once for the whole group); their nodes, heads and validity."""
    i_r = tl.program_id(0)
    i_bh = tl.program_id(1)
    GROUP: tl.constexpr = H // HKV
    i_b = i_bh // HKV
    i_kvh = i_bh % HKV
    o_r = i_r * BLOCK_R + tl.arange(0, BLOCK_R)
    o_i = o_r // GROUP  # query node
    o_h = i_kvh * GROUP + o_r % GROUP  # query head
    return i_r, i_b, i_kvh, o_i, o_h, o_i < T


@triton.jit
def _attend_slots(
    b_q, p_k, p_v, lo, hi, stride_cs, o_d, mask_d, scale, DTYPE: tl.constexpr, INTERPRET: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr, row_lo=0, WINDOWED: tl.constexpr = False,
):
    """Online-softmax state (m, l, acc) of rows b_q [BLOCK_R, BLOCK_D] after slots lo .. hi-1 of one kv head's
    cache (p_k, p_v), visible to every row (WINDOWED: to the rows whose first visible slot row_lo [BLOCK_R] is at
    or before them): the committed prefix is lo = 0, hi = length."""
    m_i = tl.full([BLOCK_R], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_R], dtype=tl.float32)
    acc = tl.zeros([BLOCK_R, BLOCK_D], dtype=tl.float32)
    o_s0 = tl.arange(0, BLOCK_S)
    for start in range(lo, hi, BLOCK_S):
        o_s = start + o_s0
        mask_s = o_s < hi
        b_kt = tl.load(p_k + o_s[None, :] * stride_cs + o_d[:, None], mask=mask_d[:, None] & mask_s[None, :], other=0.0)
        scores = _dot_lp(b_q, b_kt, DTYPE, INTERPRET) * scale  # [BLOCK_R, BLOCK_S]
        if WINDOWED:
            scores = tl.where(mask_s[None, :] & (o_s[None, :] >= row_lo[:, None]), scores, float("-inf"))
        else:
            scores = tl.where(mask_s[None, :], scores, float("-inf"))
        b_v = tl.load(p_v + o_s[:, None] * stride_cs + o_d[None, :], mask=mask_s[:, None] & mask_d[None, :], other=0.0)
        m_i, l_i, acc = _softmax_step(scores, b_v, m_i, l_i, acc, DTYPE, INTERPRET)
    return m_i, l_i, acc


@triton.jit
def _attend_tree_slots(
    b_q, p_k, p_v, p_anc, mask_r, length, T, stride_aj, stride_cs, o_d, mask_d, scale, m_i, l_i, acc,
    DTYPE: tl.constexpr, INTERPRET: tl.constexpr, BLOCK_S: tl.constexpr,
):
    """(m, l, acc) after the tree slots: slot length + j is visible to the ancestors-or-self of j (p_anc: the rows'
    ancestor-mask rows [BLOCK_R, 1])."""
    o_s0 = tl.arange(0, BLOCK_S)
    for start in range(0, T, BLOCK_S):
        o_j = start + o_s0
        mask_j = o_j < T
        visible = tl.load(p_anc + o_j[None, :] * stride_aj, mask=mask_r[:, None] & mask_j[None, :], other=0) != 0
        o_s = length + o_j
        b_kt = tl.load(p_k + o_s[None, :] * stride_cs + o_d[:, None], mask=mask_d[:, None] & mask_j[None, :], other=0.0)
        scores = tl.where(visible, _dot_lp(b_q, b_kt, DTYPE, INTERPRET) * scale, float("-inf"))
        b_v = tl.load(p_v + o_s[:, None] * stride_cs + o_d[None, :], mask=mask_j[:, None] & mask_d[None, :], other=0.0)
        m_i, l_i, acc = _softmax_step(scores, b_v, m_i, l_i, acc, DTYPE, INTERPRET)
    return m_i, l_i, acc


@triton.jit
def _store_rows(p_o, acc, l_i, mask, DTYPE: tl.constexpr):
    """acc / l rounded to DTYPE; a pad row of the block (l = 0: it saw nothing) stores zeros."""
    l_i = tl.where(l_i > 0, l_i, 1.0)
    tl.store(p_o, _round(acc / l_i[:, None], DTYPE).to(DTYPE), mask=mask)


@triton.jit
def _tree_attention_kernel(
    q_ptr, k_ptr, v_ptr, len_ptr, anc_ptr, out_ptr,
    T, scale,
    stride_q, stride_ab, stride_ai, stride_aj, stride_cb, stride_ch, stride_cs, stride_o,
    H: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, INTERPRET: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr, PDL: tl.constexpr = False,
):
    if PDL:  # programmatic dependent launch: nothing is read before the wait
        pdl_wait()
    i_r, i_b, i_kvh, o_i, o_h, mask_r = _program_rows(T, H, HKV, BLOCK_R)
    dtype = q_ptr.dtype.element_ty
    length = tl.load(len_ptr + i_b)
    o_d = tl.arange(0, BLOCK_D)
    mask_d = o_d < D
    mask_q = mask_r[:, None] & mask_d[None, :]
    p_q = q_ptr + (i_b * T + o_i)[:, None] * stride_q + o_h[:, None] * D + o_d[None, :]
    b_q = tl.load(p_q, mask=mask_q, other=0.0)  # [BLOCK_R, BLOCK_D]
    p_k = k_ptr + i_b * stride_cb + i_kvh * stride_ch
    p_v = v_ptr + i_b * stride_cb + i_kvh * stride_ch
    m_i, l_i, acc = _attend_slots(b_q, p_k, p_v, 0, length, stride_cs, o_d, mask_d, scale, dtype, INTERPRET,
                                   BLOCK_R, BLOCK_D, BLOCK_S)  # fmt: skip
    p_anc = anc_ptr + i_b * stride_ab + o_i[:, None] * stride_ai
    m_i, l_i, acc = _attend_tree_slots(b_q, p_k, p_v, p_anc, mask_r, length, T, stride_aj, stride_cs, o_d, mask_d,
                                       scale, m_i, l_i, acc, dtype, INTERPRET, BLOCK_S)  # fmt: skip
    p_o = out_ptr + (i_b * T + o_i)[:, None] * stride_o + o_h[:, None] * D + o_d[None, :]
    _store_rows(p_o, acc, l_i, mask_q, dtype)


def tree_attention(
    q: torch.Tensor,  # [B T, H D]: roped queries (tree_rope_kv_write)
    cache_k: torch.Tensor,  # [B, Hkv, S, D] holding the tree's K/V at slots lengths + j
    cache_v: torch.Tensor,
    lengths: torch.Tensor,  # [B] long: committed tokens per row
    anc: torch.Tensor,  # [B, T, T] bool: ancestor-or-self mask (weaver.ops.tree.ancestor_mask)
    num_heads: int,
    num_kv_heads: int,
    block_r: int | None = None,  # (node, head) rows per program; None: 32 on GPU, all rows interpreted
    block_s: int | None = None,  # slots per step; None: 64 on GPU, 128 interpreted
    num_warps: int | None = None,  # None: 4
    num_stages: int | None = None,  # None: 3 (Triton's default on NVIDIA GPUs)
) -> torch.Tensor:
    """Each node attends to the committed prefix and its ancestors-or-self; o [B T, H D]: one launch.

    With no launch parameter given, a WEAVER_TRITON_TUNING entry for this shape (`tuning`) sets all four."""
    check_device(q, cache_k, cache_v, lengths, anc)
    b, _, s, d = cache_k.shape
    if anc.dim() != 3 or anc.shape[0] != b or anc.shape[1] != anc.shape[2]:
        raise ValueError(f"anc must be [{b}, T, T], got {tuple(anc.shape)}")
    t = anc.shape[1]
    if q.shape != (b * t, num_heads * d) or q.stride(1) != 1:
        raise ValueError(f"q must be [{b * t}, {num_heads * d}] with unit stride, got {tuple(q.shape)}")
    _check_caches(cache_k, cache_v, num_heads, num_kv_heads)
    if anc.dtype == torch.bool:
        anc = anc.view(torch.uint8)  # same bytes; triton reads bytes
    out = torch.empty(b * t, num_heads * d, device=q.device, dtype=q.dtype)
    rows = t * (num_heads // num_kv_heads)
    interpret = interpreting()
    block_r, block_s, num_warps, num_stages = _attention_launch(
        b * t, rows, num_heads, num_kv_heads, d, q.dtype, block_r, block_s, num_warps, num_stages
    )
    _tree_attention_kernel[(triton.cdiv(rows, block_r), b * num_kv_heads)](
        q, cache_k, cache_v, lengths, anc, out,
        t, d**-0.5,
        q.stride(0), anc.stride(0), anc.stride(1), anc.stride(2),
        cache_k.stride(0), cache_k.stride(1), cache_k.stride(2), out.stride(0),
        H=num_heads, HKV=num_kv_heads, D=d, INTERPRET=interpret,
        BLOCK_R=block_r, BLOCK_D=max(16, triton.next_power_of_2(d)), BLOCK_S=block_s,
        num_warps=num_warps, num_stages=num_stages, **pdl_launch(q.device),
    )
    return out


ROPE_TREE_TILE = 16  # tree nodes per step of tree_attention_rope: 64-node tiles of roped K spill on sm_90


def _attention_launch(
    nodes: int, rows: int, num_heads: int, num_kv_heads: int, d: int, dtype: torch.dtype,
    block_r: int | None, block_s: int | None, num_warps: int | None, num_stages: int | None,
) -> tuple[int, int, int, int]:
    """(block_r, block_s, num_warps, num_stages) of a tree-attention launch: the given ones; with none given,
    the WEAVER_TRITON_TUNING entry of the shape; then the defaults (few large programs when interpreted)."""
    if block_r is None and block_s is None and num_warps is None and num_stages is None:
        found = tuning.tuned("tree_attention", tuning.attention_key(nodes, num_heads, num_kv_heads, d, dtype))
        if found is not None:
            block_r, block_s, num_warps, num_stages = found
    if block_r is None:
        block_r = max(16, min(128, triton.next_power_of_2(rows))) if interpreting() else 32
    block_s = block_s or (128 if interpreting() else 64)
    if min(block_r, block_s) < 16 or block_r & (block_r - 1) or block_s & (block_s - 1):
        raise ValueError(f"block_r and block_s must be powers of two >= 16 (tl.dot), got {block_r}, {block_s}")
    return block_r, block_s, num_warps or 4, num_stages or 3


@triton.jit
def _tree_attention_rope_kernel(
    qkv_ptr, k_ptr, v_ptr, len_ptr, anc_ptr, cos_ptr, sin_ptr, qn_ptr, kn_ptr, out_ptr,
    T, S, scale, eps,
    stride_qkv, stride_ab, stride_ai, stride_aj, stride_cb, stride_ch, stride_cs, stride_o,
    H: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, ROT: tl.constexpr, QK_NORM: tl.constexpr,
    INTERPRET: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr,
    BLOCK_T: tl.constexpr, PDL: tl.constexpr = False,
):
    i_r, i_b, i_kvh, o_i, o_h, mask_r = _program_rows(T, H, HKV, BLOCK_R)
    dtype = qkv_ptr.dtype.element_ty
    if PDL:  # launched while the qkv GEMM ends: pull the committed prefix's K/V rows toward L2, then wait for it
        prefetch_prefix(k_ptr + i_b * stride_cb + i_kvh * stride_ch, v_ptr + i_b * stride_cb + i_kvh * stride_ch,
                         tl.load(len_ptr + i_b), stride_cs, D)  # fmt: skip
        pdl_wait()
    length = tl.load(len_ptr + i_b)
    o_d = tl.arange(0, BLOCK_D)
    mask_d = o_d < D
    HALF: tl.constexpr = ROT // 2
    o_f = o_d % HALF  # the table column of each head dim
    in_rot = o_d < ROT
    p_node = qkv_ptr + (i_b * T + o_i)[:, None] * stride_qkv  # [BLOCK_R, 1]: the query nodes' qkv rows
    p_cs = (i_b * T + o_i)[:, None] * HALF + o_f[None, :]
    mask_cs = mask_r[:, None] & in_rot[None, :]
    cos = tl.load(cos_ptr + p_cs, mask=mask_cs, other=0.0).to(tl.float32)
    sin = tl.load(sin_ptr + p_cs, mask=mask_cs, other=0.0).to(tl.float32)
    b_q = _rope_rows(p_node + o_h[:, None] * D, mask_r, o_d, D, ROT, cos, sin, qn_ptr, eps, QK_NORM, dtype).to(dtype)
    p_k = k_ptr + i_b * stride_cb + i_kvh * stride_ch
    p_v = v_ptr + i_b * stride_cb + i_kvh * stride_ch
    m_i, l_i, acc = _attend_slots(b_q, p_k, p_v, 0, length, stride_cs, o_d, mask_d, scale, dtype, INTERPRET,
                                   BLOCK_R, BLOCK_D, BLOCK_S)  # fmt: skip
    o_t0 = tl.arange(0, BLOCK_T)  # tree tiles: smaller than the prefix's (their K is roped in registers)
    for start in range(0, T, BLOCK_T):  # the tree from the qkv rows (k-norm + RoPE here), never from the cache
        o_j = start + o_t0
        mask_j = o_j < T
        p_tree = qkv_ptr + (i_b * T + o_j)[:, None] * stride_qkv  # [BLOCK_T, 1]
        p_cs_j = (i_b * T + o_j)[:, None] * HALF + o_f[None, :]  # (names of their own: a loop-carried name
        mask_cs_j = mask_j[:, None] & in_rot[None, :]  # must keep its shape, and BLOCK_T != BLOCK_R)
        cos_j = tl.load(cos_ptr + p_cs_j, mask=mask_cs_j, other=0.0).to(tl.float32)
        sin_j = tl.load(sin_ptr + p_cs_j, mask=mask_cs_j, other=0.0).to(tl.float32)
        b_k = _rope_rows(p_tree + (H + i_kvh) * D, mask_j, o_d, D, ROT, cos_j, sin_j, kn_ptr, eps, QK_NORM,
                         dtype).to(dtype)  # fmt: skip
        mask_kv = mask_j[:, None] & mask_d[None, :]
        b_v = tl.load(p_tree + (H + HKV + i_kvh) * D + o_d[None, :], mask=mask_kv, other=0.0)
        if i_r == 0:  # one program per (row, kv head) hands the tree's K/V to the cache, at slot length + j
            o_s = length + o_j
            p_slot = o_s[:, None] * stride_cs + o_d[None, :]
            mask_w = mask_kv & (o_s < S)[:, None]  # a tree past the capacity is dropped, never written out of bounds
            tl.store(p_k + p_slot, b_k.to(k_ptr.dtype.element_ty), mask=mask_w)
            tl.store(p_v + p_slot, b_v.to(v_ptr.dtype.element_ty), mask=mask_w)
        p_anc = anc_ptr + i_b * stride_ab + o_i[:, None] * stride_ai + o_j[None, :] * stride_aj
        visible = tl.load(p_anc, mask=mask_r[:, None] & mask_j[None, :], other=0) != 0  # [BLOCK_R, BLOCK_S]
        scores = tl.where(visible, _dot_lp(b_q, tl.trans(b_k), dtype, INTERPRET) * scale, float("-inf"))
        m_i, l_i, acc = _softmax_step(scores, b_v, m_i, l_i, acc, dtype, INTERPRET)
    p_o = out_ptr + (i_b * T + o_i)[:, None] * stride_o + o_h[:, None] * D + o_d[None, :]
    _store_rows(p_o, acc, l_i, mask_r[:, None] & mask_d[None, :], dtype)


def tree_attention_rope(
    qkv: torch.Tensor,  # [B T, (H + 2 Hkv) D]: the fused q | k | v projection, node-major per row
    cache_k: torch.Tensor,  # [B, Hkv, S, D], unit stride along D, the dtype of qkv
    cache_v: torch.Tensor,
    lengths: torch.Tensor,  # [B] long: committed tokens per row
    anc: torch.Tensor,  # [B, T, T] bool: ancestor-or-self mask
    cos: torch.Tensor,  # [B T, rot/2] in qkv's dtype: `rope_table` of the nodes' positions
    sin: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
    q_norm: torch.Tensor | None = None,  # [D] per-head RMSNorm weights (qwen3)
    k_norm: torch.Tensor | None = None,
    eps: float = 1e-6,
    block_r: int | None = None,
    block_s: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """`tree_attention(tree_rope_kv_write(qkv, ...), ...)` in one launch: o [B T, H D], K/V written alike.

    The programs of a (row, kv head) need every tree node's K/V, which no other launch has written yet, so
    each computes them from the qkv rows (T x D of k-norm + RoPE, cheap beside the attention) and the first
    hands them to the cache. Launch parameters as `tree_attention` (its tuning entries)."""
    check_device(qkv, cache_k, cache_v, lengths, anc, cos, sin)
    b, _, s, d = cache_k.shape
    t = anc.shape[-1]
    if lengths.shape != (b,) or anc.shape != (b, t, t) or cos.shape != sin.shape or cos.shape[0] != b * t:
        raise ValueError(f"need lengths [{b}], anc [{b}, T, T], cos and sin [{b} T, rot/2], got "
                         f"{tuple(lengths.shape)}, {tuple(anc.shape)}, {tuple(cos.shape)}, {tuple(sin.shape)}")
    if cos.dtype != qkv.dtype or sin.dtype != qkv.dtype or not (cos.is_contiguous() and sin.is_contiguous()):
        raise ValueError(f"cos and sin must be contiguous {qkv.dtype} (rope_table), got {cos.dtype}, {sin.dtype}")
    width = (num_heads + 2 * num_kv_heads) * d
    if qkv.shape != (b * t, width) or qkv.stride(1) != 1:
        raise ValueError(f"qkv must be [{b * t}, {width}] with unit stride, got {tuple(qkv.shape)}")
    _check_caches(cache_k, cache_v, num_heads, num_kv_heads)
    if cache_k.dtype != qkv.dtype or cache_v.dtype != qkv.dtype:
        raise ValueError(f"the caches must have the dtype of qkv ({qkv.dtype}), got {cache_k.dtype}, {cache_v.dtype}")
    if (q_norm is None) != (k_norm is None):
        raise ValueError("q_norm and k_norm come together (qk-norm) or not at all")
    if anc.dtype == torch.bool:
        anc = anc.view(torch.uint8)
    out = torch.empty(b * t, num_heads * d, device=qkv.device, dtype=qkv.dtype)
    block_r, block_s, num_warps, num_stages = _attention_launch(
        b * t, t * (num_heads // num_kv_heads), num_heads, num_kv_heads, d, qkv.dtype,
        block_r, block_s, num_warps, num_stages,
    )
    _tree_attention_rope_kernel[(triton.cdiv(t * (num_heads // num_kv_heads), block_r), b * num_kv_heads)](
        qkv, cache_k, cache_v, lengths, anc, cos, sin,
        q_norm if q_norm is not None else cos, k_norm if k_norm is not None else cos, out,
        t, s, d**-0.5, eps,
        qkv.stride(0), anc.stride(0), anc.stride(1), anc.stride(2),
        cache_k.stride(0), cache_k.stride(1), cache_k.stride(2), out.stride(0),
        H=num_heads, HKV=num_kv_heads, D=d, ROT=2 * cos.shape[1], QK_NORM=q_norm is not None,
        INTERPRET=interpreting(), BLOCK_R=block_r, BLOCK_D=max(16, triton.next_power_of_2(d)), BLOCK_S=block_s,
        BLOCK_T=ROPE_TREE_TILE, num_warps=num_warps, num_stages=num_stages,
        **pdl_launch(qkv.device, qkv.element_size()),
    )
    return out
