"""The fused tree-verify attention kernel: one launch between the qkv and o projections of a layer.

    rope = rope_table(lengths, depth, inv_freq, dtype)      # once per verify: cos / sin of every node
    o = tree_attention(qkv, cache_k, cache_v, lengths, anc, rope, H, Hkv, q_norm, k_norm)   # per layer

A batch row b holds a draft tree of T nodes after L_b = lengths[b] committed tokens. Node j sits at
position L_b + depth[b, j] and writes its K/V at slot L_b + j (the committed length does not move;
`Decoder.commit` compacts the accepted path later). Node i attends to

    slots s < L_b                     (the committed prefix)
    slots L_b + j, anc[b, i, j]       (its ancestors-or-self: `weaver.ops.tree.ancestor_mask`)

so a pad node (parent -1 past the root) sees the prefix and itself and changes nobody.

A program takes BLOCK_R (node, query head) rows that share one kv head: it applies qk-norm + RoPE to
their queries straight from the fused projection (cos / sin from `weaver.ops.decode.rope_table`, built
once per verify), streams the committed prefix from the cache, and builds the tree's K/V tiles itself
(qk-norm + RoPE of the T nodes' keys, their values), so no program waits for another's cache write and
the layer needs one launch, not two. The first program of each (row, kv head) also stores those tiles
into the cache slots for the commit. Flash-attention tiles: each K/V tile is read once for the whole
group and both products run on the tensor cores; the probabilities meet V rounded to the model dtype (as
in SDPA's fused kernels). Torch references: `weaver.ops.decode.tree_verify_attention_ref` (the K/V
write, then attention), same rounding points. """

from __future__ import annotations

import torch
import triton
import triton.language as tl

from weaver.ops.triton import tuning
from weaver.ops.triton._utils import check_device, interpreting
from weaver.ops.triton.decode import _round


@triton.jit
def _rope_rows(
    p_rows, mask_r, o_d, D: tl.constexpr, ROT: tl.constexpr, p_cos, p_sin, norm_ptr, eps,
    QK_NORM: tl.constexpr, DTYPE: tl.constexpr,
):
    """Head vectors [R, BLOCK_D] in fp32 (values of DTYPE): row r starts at pointer p_rows[r], its node's
    cos / sin rows (`rope_table`) at p_cos[r], p_sin[r]; [RMSNorm ->] RoPE on the first ROT dims, with
    decode's `_head_vector` rounding points."""
    HALF: tl.constexpr = ROT // 2
    mask = mask_r[:, None] & (o_d < D)[None, :]
    partner = tl.where(o_d < HALF, o_d + HALF, o_d - HALF)
    in_rot = o_d < ROT
    mask_p = mask & in_rot[None, :]
    x = tl.load(p_rows[:, None] + o_d[None, :], mask=mask, other=0.0).to(tl.float32)
    xp = tl.load(p_rows[:, None] + partner[None, :], mask=mask_p, other=0.0).to(tl.float32)
    if QK_NORM:
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / D + eps)
        w = tl.load(norm_ptr + o_d, mask=o_d < D, other=0.0).to(tl.float32)
        wp = tl.load(norm_ptr + partner, mask=in_rot & (o_d < D), other=0.0).to(tl.float32)
        x = _round(_round(x * rstd[:, None], DTYPE) * w[None, :], DTYPE)
        xp = _round(_round(xp * rstd[:, None], DTYPE) * wp[None, :], DTYPE)
    mask_cs = mask_r[:, None] & in_rot[None, :]
    cos = tl.load(p_cos[:, None] + (o_d % HALF)[None, :], mask=mask_cs, other=0.0).to(tl.float32)
    sin = tl.load(p_sin[:, None] + (o_d % HALF)[None, :], mask=mask_cs, other=0.0).to(tl.float32)
    signed = tl.where((o_d < HALF)[None, :], -xp, xp)
    rotated = _round(_round(x * cos, DTYPE) + _round(signed * sin, DTYPE), DTYPE)
    return _round(tl.where(in_rot[None, :], rotated, x), DTYPE)


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
def _tree_attention_kernel(
    qkv_ptr, k_ptr, v_ptr, len_ptr, anc_ptr, cos_ptr, sin_ptr, qn_ptr, kn_ptr, out_ptr,
    T, S, scale, eps,
    stride_qkv, stride_cos, stride_ab, stride_ai, stride_aj, stride_cb, stride_ch, stride_cs, stride_o,
    H: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, ROT: tl.constexpr, QK_NORM: tl.constexpr,
    INTERPRET: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr,
):
    i_r = tl.program_id(0)  # a block of (node, query head) rows ...
    i_bh = tl.program_id(1)  # ... of one batch row and kv head: K/V tiles are read once for all of them
    GROUP: tl.constexpr = H // HKV
    i_b = i_bh // HKV
    i_kvh = i_bh % HKV
    dtype = qkv_ptr.dtype.element_ty
    length = tl.load(len_ptr + i_b)
    o_r = i_r * BLOCK_R + tl.arange(0, BLOCK_R)
    o_i = o_r // GROUP  # query node
    o_h = i_kvh * GROUP + o_r % GROUP  # query head
    mask_r = o_i < T
    o_d = tl.arange(0, BLOCK_D)
    mask_d = o_d < D
    mask_q = mask_r[:, None] & mask_d[None, :]
    p_node = qkv_ptr + (i_b * T + o_i) * stride_qkv  # [BLOCK_R] each row's node in the fused projection
    o_cs = (i_b * T + o_i) * stride_cos  # [BLOCK_R] each row's node in the RoPE table
    b_q = _rope_rows(p_node + o_h * D, mask_r, o_d, D, ROT, cos_ptr + o_cs, sin_ptr + o_cs, qn_ptr, eps, QK_NORM,
                     dtype)
    p_k = k_ptr + i_b * stride_cb + i_kvh * stride_ch
    p_v = v_ptr + i_b * stride_cb + i_kvh * stride_ch
    m_i = tl.full([BLOCK_R], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_R], dtype=tl.float32)
    acc = tl.zeros([BLOCK_R, BLOCK_D], dtype=tl.float32)
    o_s0 = tl.arange(0, BLOCK_S)
    for start in range(0, length, BLOCK_S):  # the committed prefix: visible to every row
        o_s = start + o_s0
        mask_s = o_s < length
        b_kt = tl.load(p_k + o_s[None, :] * stride_cs + o_d[:, None], mask=mask_d[:, None] & mask_s[None, :], other=0.0)
        scores = _dot_lp(b_q, b_kt, dtype, INTERPRET) * scale  # [BLOCK_R, BLOCK_S]
        scores = tl.where(mask_s[None, :], scores, float("-inf"))
        b_v = tl.load(p_v + o_s[:, None] * stride_cs + o_d[None, :], mask=mask_s[:, None] & mask_d[None, :], other=0.0)
        m_i, l_i, acc = _softmax_step(scores, b_v, m_i, l_i, acc, dtype, INTERPRET)
    for start in range(0, T, BLOCK_S):  # the tree: node j (slot length + j) is visible to its descendants-or-self
        o_j = start + o_s0
        mask_j = o_j < T
        p_anc = anc_ptr + i_b * stride_ab + o_i[:, None] * stride_ai + o_j[None, :] * stride_aj
        visible = tl.load(p_anc, mask=mask_r[:, None] & mask_j[None, :], other=0) != 0  # [BLOCK_R, BLOCK_S]
        p_src = qkv_ptr + (i_b * T + o_j) * stride_qkv  # this tile's nodes in the fused projection
        o_cs = (i_b * T + o_j) * stride_cos
        b_k = _rope_rows(p_src + (H + i_kvh) * D, mask_j, o_d, D, ROT, cos_ptr + o_cs, sin_ptr + o_cs, kn_ptr, eps,
                         QK_NORM, dtype)
        mask_kv = mask_j[:, None] & mask_d[None, :]
        b_v = tl.load(p_src[:, None] + (H + HKV + i_kvh) * D + o_d[None, :], mask=mask_kv, other=0.0)
        if i_r == 0:  # one program per (row, kv head) keeps the tree's K/V for the commit
            o_slot = length + o_j
            mask_w = mask_kv & (o_slot < S)[:, None]  # a tree past the capacity is dropped, never written out of bounds
            offset = o_slot[:, None] * stride_cs + o_d[None, :]
            tl.store(p_k + offset, b_k.to(k_ptr.dtype.element_ty), mask=mask_w)
            tl.store(p_v + offset, b_v.to(v_ptr.dtype.element_ty), mask=mask_w)
        scores = tl.where(visible, _dot_lp(b_q, tl.trans(b_k), dtype, INTERPRET) * scale, float("-inf"))
        m_i, l_i, acc = _softmax_step(scores, b_v, m_i, l_i, acc, dtype, INTERPRET)
    l_i = tl.where(l_i > 0, l_i, 1.0)  # pad rows of the block (every real row sees at least itself)
    p_o = out_ptr + (i_b * T + o_i)[:, None] * stride_o + o_h[:, None] * D + o_d[None, :]
    tl.store(p_o, _round(acc / l_i[:, None], dtype).to(dtype), mask=mask_q)


def tree_attention(
    qkv: torch.Tensor,  # [B T, (H + 2 Hkv) D]: the fused q | k | v projection, node-major per row
    cache_k: torch.Tensor,  # [B, Hkv, S, D], unit stride along D; receives the tree's K at slots lengths + j
    cache_v: torch.Tensor,
    lengths: torch.Tensor,  # [B] long: committed tokens per row
    anc: torch.Tensor,  # [B, T, T] bool: ancestor-or-self mask (weaver.ops.tree.ancestor_mask)
    rope: tuple[torch.Tensor, torch.Tensor],  # rope_table(lengths, depth, inv_freq, dtype): cos, sin [B T, rot/2]
    num_heads: int,
    num_kv_heads: int,
    q_norm: torch.Tensor | None = None,  # [D] per-head RMSNorm weights (qwen3)
    k_norm: torch.Tensor | None = None,
    eps: float = 1e-6,
    block_r: int | None = None,  # (node, head) rows per program; None: 32 on GPU, all rows interpreted
    block_s: int | None = None,  # slots per step; None: 64 on GPU, 128 interpreted
    num_warps: int | None = None,  # None: 4
    num_stages: int | None = None,  # None: 3 (Triton's default on NVIDIA GPUs)
) -> torch.Tensor:
    """qk-norm + RoPE at lengths + depth, K/V of node j to slot lengths + j, and each node's attention over
    the committed prefix and its ancestors-or-self; o [B T, H D]: one launch.

    With no launch parameter given, a WEAVER_TRITON_TUNING entry for this shape (`tuning`) sets all four."""
    cos, sin = rope
    check_device(qkv, cache_k, cache_v, lengths, anc, cos, sin)
    b, _, s, d = cache_k.shape
    if lengths.shape != (b,) or anc.dim() != 3 or anc.shape[0] != b or anc.shape[1] != anc.shape[2]:
        raise ValueError(f"anc must be [{b}, T, T] and lengths [{b}], got {tuple(anc.shape)}, {tuple(lengths.shape)}")
    t = anc.shape[1]
    width = (num_heads + 2 * num_kv_heads) * d
    if qkv.shape != (b * t, width) or qkv.stride(1) != 1:
        raise ValueError(f"qkv must be [{b * t}, {width}] with unit stride, got {tuple(qkv.shape)}")
    half = cos.shape[-1] if cos.dim() == 2 else 0
    if cos.shape != sin.shape or cos.shape[0] != b * t or not 1 <= half <= d // 2 or cos.stride() != sin.stride():
        raise ValueError(f"rope must be (cos, sin) [{b * t}, rot/2] (rope_table), got {tuple(cos.shape)}")
    if cache_k.stride() != cache_v.stride() or cache_k.stride(3) != 1 or num_heads % num_kv_heads:
        raise ValueError("cache_k and cache_v need equal strides, unit stride along D, and H % Hkv == 0")
    if (q_norm is None) != (k_norm is None):
        raise ValueError("q_norm and k_norm come together (qk-norm) or not at all")
    if anc.dtype == torch.bool:
        anc = anc.view(torch.uint8)  # same bytes; triton reads bytes
    out = torch.empty(b * t, num_heads * d, device=qkv.device, dtype=qkv.dtype)
    rows = t * (num_heads // num_kv_heads)
    interpret = interpreting()
    if block_r is None and block_s is None and num_warps is None and num_stages is None:
        found = tuning.tuned("tree_attention", tuning.attention_key(b * t, num_heads, num_kv_heads, d, qkv.dtype))
        if found is not None:
            block_r, block_s, num_warps, num_stages = found
    if block_r is None:
        block_r = max(16, min(128, triton.next_power_of_2(rows))) if interpret else 32
    block_s = block_s or (128 if interpret else 64)
    num_warps, num_stages = num_warps or 4, num_stages or 3
    if min(block_r, block_s) < 16 or block_r & (block_r - 1) or block_s & (block_s - 1):
        raise ValueError(f"block_r and block_s must be powers of two >= 16 (tl.dot), got {block_r}, {block_s}")
    _tree_attention_kernel[(triton.cdiv(rows, block_r), b * num_kv_heads)](
        qkv, cache_k, cache_v, lengths, anc, cos, sin,
        q_norm if q_norm is not None else cos, k_norm if k_norm is not None else cos, out,
        t, s, d**-0.5, eps,
        qkv.stride(0), cos.stride(0), anc.stride(0), anc.stride(1), anc.stride(2),
        cache_k.stride(0), cache_k.stride(1), cache_k.stride(2), out.stride(0),
        H=num_heads, HKV=num_kv_heads, D=d, ROT=2 * half, QK_NORM=q_norm is not None,
        INTERPRET=interpret, BLOCK_R=block_r, BLOCK_D=max(16, triton.next_power_of_2(d)), BLOCK_S=block_s,
        num_warps=num_warps, num_stages=num_stages,
    )
    return out
