"""Fused tree-verify kernels for attention layers: two launches between the qkv and o projections.

    q = tree_rope_kv_write(qkv, cache_k, cache_v, lengths, depth, inv_freq, H, Hkv, q_norm, k_norm)
    o = tree_attention(q, cache_k, cache_v, lengths, anc, H, Hkv)

A batch row b holds a draft tree of T nodes after L_b = lengths[b] committed tokens. Node j sits at
position L_b + depth[b, j] and writes its K/V at slot L_b + j (the committed length does not move;
`Decoder.commit` compacts the accepted path later). Node i attends to

    slots s < L_b                     (the committed prefix)
    slots L_b + j, anc[b, i, j]       (its ancestors-or-self: `weaver.ops.tree.ancestor_mask`)

so a pad node (parent -1 past the root) sees the prefix and itself and changes nobody. Attention
must read K/V that other programs write, hence two launches where the decode step has one. Torch
references with the same rounding points: `weaver.ops.decode.tree_rope_kv_write_ref` /
`tree_attention_ref`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from weaver.ops.triton._utils import check_device, interpreting
from weaver.ops.triton.decode import _round


@triton.jit
def _heads_rope(
    src, o_h, mask_h, o_d, D: tl.constexpr, ROT: tl.constexpr, pos, inv_freq_ptr, norm_ptr, eps,
    QK_NORM: tl.constexpr, DTYPE: tl.constexpr,
):
    """Heads [BLOCK_H, BLOCK_D] of one node's q or k in fp32: [RMSNorm ->] RoPE on the first ROT dims.

    The 2-D form of decode's `_head_vector`, with the same rounding points."""
    HALF: tl.constexpr = ROT // 2
    mask = mask_h[:, None] & (o_d < D)[None, :]
    partner = tl.where(o_d < HALF, o_d + HALF, o_d - HALF)
    in_rot = o_d < ROT
    mask_p = mask & in_rot[None, :]
    x = tl.load(src + o_h[:, None] * D + o_d[None, :], mask=mask, other=0.0).to(tl.float32)
    xp = tl.load(src + o_h[:, None] * D + partner[None, :], mask=mask_p, other=0.0).to(tl.float32)
    if QK_NORM:
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / D + eps)
        w = tl.load(norm_ptr + o_d, mask=o_d < D, other=0.0).to(tl.float32)
        wp = tl.load(norm_ptr + partner, mask=in_rot & (o_d < D), other=0.0).to(tl.float32)
        x = _round(_round(x * rstd[:, None], DTYPE) * w[None, :], DTYPE)
        xp = _round(_round(xp * rstd[:, None], DTYPE) * wp[None, :], DTYPE)
    freq = tl.load(inv_freq_ptr + (o_d % HALF), mask=in_rot, other=0.0)
    angle = pos.to(tl.float32) * freq
    cos = _round(tl.cos(angle), DTYPE)[None, :]
    sin = _round(tl.sin(angle), DTYPE)[None, :]
    signed = tl.where((o_d < HALF)[None, :], -xp, xp)
    rotated = _round(_round(x * cos, DTYPE) + _round(signed * sin, DTYPE), DTYPE)
    return _round(tl.where(in_rot[None, :], rotated, x), DTYPE)


@triton.jit
def _tree_rope_kv_kernel(
    qkv_ptr, k_ptr, v_ptr, len_ptr, depth_ptr, inv_freq_ptr, qn_ptr, kn_ptr, q_out_ptr,
    T, S, eps,
    stride_qkv, stride_db, stride_cb, stride_ch, stride_cs, stride_q,
    H: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, ROT: tl.constexpr, QK_NORM: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_HKV: tl.constexpr, BLOCK_D: tl.constexpr,
):
    i_row = tl.program_id(0)  # b * T + j: one node, all of its heads
    i_b = i_row // T
    i_j = i_row % T
    dtype = qkv_ptr.dtype.element_ty
    length = tl.load(len_ptr + i_b)
    pos = length + tl.load(depth_ptr + i_b * stride_db + i_j)
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
) -> torch.Tensor:
    """qk-norm + RoPE at lengths + depth; K/V of node j to slot lengths + j; returns q [B T, H D]: one launch."""
    check_device(qkv, cache_k, cache_v, lengths, depth, inv_freq)
    b, _, s, d = cache_k.shape
    if depth.dim() != 2 or depth.shape[0] != b or lengths.shape != (b,):
        raise ValueError(f"lengths must be [{b}] and depth [{b}, T], got {tuple(lengths.shape)}, {tuple(depth.shape)}")
    t = depth.shape[1]
    width = (num_heads + 2 * num_kv_heads) * d
    if qkv.shape != (b * t, width) or qkv.stride(1) != 1:
        raise ValueError(f"qkv must be [{b * t}, {width}] with unit stride, got {tuple(qkv.shape)}")
    if cache_k.stride() != cache_v.stride() or cache_k.stride(3) != 1 or num_heads % num_kv_heads:
        raise ValueError("cache_k and cache_v need equal strides, unit stride along D, and H % Hkv == 0")
    if (q_norm is None) != (k_norm is None):
        raise ValueError("q_norm and k_norm come together (qk-norm) or not at all")
    q = torch.empty(b * t, num_heads * d, device=qkv.device, dtype=qkv.dtype)
    inv_freq = inv_freq.float().contiguous()
    _tree_rope_kv_kernel[(b * t,)](
        qkv, cache_k, cache_v, lengths, depth, inv_freq,
        q_norm if q_norm is not None else inv_freq, k_norm if k_norm is not None else inv_freq, q,
        t, s, eps,
        qkv.stride(0), depth.stride(0), cache_k.stride(0), cache_k.stride(1), cache_k.stride(2), q.stride(0),
        H=num_heads, HKV=num_kv_heads, D=d, ROT=2 * inv_freq.shape[0], QK_NORM=q_norm is not None,
        BLOCK_H=triton.next_power_of_2(num_heads), BLOCK_HKV=triton.next_power_of_2(num_kv_heads),
        BLOCK_D=triton.next_power_of_2(d), num_warps=4,
    )
    return q


@triton.jit
def _tree_attention_kernel(
    q_ptr, k_ptr, v_ptr, len_ptr, anc_ptr, out_ptr,
    T, scale,
    stride_q, stride_ab, stride_ai, stride_aj, stride_cb, stride_ch, stride_cs, stride_o,
    H: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr,
    BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr,
):
    i_row = tl.program_id(0)  # b * T + i: the query node
    i_kvh = tl.program_id(1)  # one kv head and the GROUP query heads that share it: K/V read once
    GROUP: tl.constexpr = H // HKV
    i_b = i_row // T
    i_i = i_row % T
    dtype = q_ptr.dtype.element_ty
    length = tl.load(len_ptr + i_b)
    o_g = tl.arange(0, BLOCK_G)
    o_d = tl.arange(0, BLOCK_D)
    mask_d = o_d < D
    mask_q = (o_g < GROUP)[:, None] & mask_d[None, :]
    p_q = q_ptr + i_row * stride_q + (i_kvh * GROUP + o_g[:, None]) * D + o_d[None, :]
    b_q = tl.load(p_q, mask=mask_q, other=0.0).to(tl.float32)  # [BLOCK_G, BLOCK_D]
    p_k = k_ptr + i_b * stride_cb + i_kvh * stride_ch
    p_v = v_ptr + i_b * stride_cb + i_kvh * stride_ch
    p_anc = anc_ptr + i_b * stride_ab + i_i * stride_ai
    # the node itself first (always visible, so the running max is finite from the start) ...
    b_k = tl.load(p_k + (length + i_i) * stride_cs + o_d, mask=mask_d, other=0.0).to(tl.float32)
    m_i = tl.sum(b_q * b_k[None, :], axis=1) * scale  # [BLOCK_G]
    l_i = m_i * 0.0 + 1.0
    b_v = tl.load(p_v + (length + i_i) * stride_cs + o_d, mask=mask_d, other=0.0).to(tl.float32)
    acc = b_q * 0.0 + b_v[None, :]  # [BLOCK_G, BLOCK_D]
    # ... then the committed slots and the other ancestors: one online-softmax pass over slots 0..L+T
    o_s0 = tl.arange(0, BLOCK_S)
    for start in range(0, length + T, BLOCK_S):
        o_s = start + o_s0
        o_j = o_s - length  # the tree node of the slot, when 0 <= o_j < T
        in_tree = (o_j >= 0) & (o_j < T) & (o_j != i_i)
        is_anc = tl.load(p_anc + o_j * stride_aj, mask=in_tree, other=0) != 0
        visible = (o_s < length) | (in_tree & is_anc)
        mask_kv = visible[:, None] & mask_d[None, :]
        b_kb = tl.load(p_k + o_s[:, None] * stride_cs + o_d[None, :], mask=mask_kv, other=0.0).to(tl.float32)
        scores = tl.sum(b_q[:, None, :] * b_kb[None, :, :], axis=2) * scale  # [BLOCK_G, BLOCK_S]
        scores = tl.where(visible[None, :], scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        p = tl.exp(scores - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        b_vb = tl.load(p_v + o_s[:, None] * stride_cs + o_d[None, :], mask=mask_kv, other=0.0).to(tl.float32)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * b_vb[None, :, :], axis=1)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        m_i = m_new
    p_o = out_ptr + i_row * stride_o + (i_kvh * GROUP + o_g[:, None]) * D + o_d[None, :]
    tl.store(p_o, _round(acc / l_i[:, None], dtype).to(dtype), mask=mask_q)


def tree_attention(
    q: torch.Tensor,  # [B T, H D]: roped queries (tree_rope_kv_write)
    cache_k: torch.Tensor,  # [B, Hkv, S, D] holding the tree's K/V at slots lengths + j
    cache_v: torch.Tensor,
    lengths: torch.Tensor,  # [B] long: committed tokens per row
    anc: torch.Tensor,  # [B, T, T] bool: ancestor-or-self mask (weaver.ops.tree.ancestor_mask)
    num_heads: int,
    num_kv_heads: int,
    block_s: int | None = None,  # slots per step; None: by head shape (see below)
) -> torch.Tensor:
    """Each node attends to the committed prefix and its ancestors-or-self; o [B T, H D]: one launch."""
    check_device(q, cache_k, cache_v, lengths, anc)
    b, _, s, d = cache_k.shape
    if anc.dim() != 3 or anc.shape[0] != b or anc.shape[1] != anc.shape[2]:
        raise ValueError(f"anc must be [{b}, T, T], got {tuple(anc.shape)}")
    t = anc.shape[1]
    if q.shape != (b * t, num_heads * d) or q.stride(1) != 1:
        raise ValueError(f"q must be [{b * t}, {num_heads * d}] with unit stride, got {tuple(q.shape)}")
    if cache_k.stride() != cache_v.stride() or cache_k.stride(3) != 1 or num_heads % num_kv_heads:
        raise ValueError("cache_k and cache_v need equal strides, unit stride along D, and H % Hkv == 0")
    if anc.dtype == torch.bool:
        anc = anc.view(torch.uint8)  # same bytes; triton reads bytes
    out = torch.empty(b * t, num_heads * d, device=q.device, dtype=q.dtype)
    block_g, block_d = triton.next_power_of_2(num_heads // num_kv_heads), triton.next_power_of_2(d)
    if block_s is None:  # GPU: bound the [G, S, D] product tile to 8K values (64 registers a thread)
        block_s = 128 if interpreting() else max(16, min(128, 8192 // (block_g * block_d)))
    _tree_attention_kernel[(b * t, num_kv_heads)](
        q, cache_k, cache_v, lengths, anc, out,
        t, d**-0.5,
        q.stride(0), anc.stride(0), anc.stride(1), anc.stride(2),
        cache_k.stride(0), cache_k.stride(1), cache_k.stride(2), out.stride(0),
        H=num_heads, HKV=num_kv_heads, D=d, BLOCK_G=block_g, BLOCK_D=block_d, BLOCK_S=block_s, num_warps=4,
    )
    return out
