"""Masked attention of a few query rows (the Weaver drafter's w new tree nodes) in one Triton program per
(batch row, head).

    out = node_attention(q, k, v, mask)   # = SDPA(q, k, v, attn_mask=mask[:, None]), scale D**-0.5

Each Weaver step attends w = 4..8 new nodes per head (H = 8, hd = 64) to S = prefix + node slots (~20..300)
under a boolean visibility mask. cuDNN's SDPA takes ~9 us for that; here one program holds the W rows
(padded to BLOCK_W >= 16 rows for tl.dot) and walks S in BLOCK_S tiles with an online softmax: fp32 scores
and accumulation, hidden entries at -inf, the probabilities rounded to the input dtype before they meet V
(as flash attention does). A row that has seen nothing visible yet keeps m = -inf and is shifted by 0, so a
fully hidden tile adds exactly nothing (no NaN); pad rows (>= W) are never stored.

Launch configuration is fixed (no autotune, `node_attention_config`): BLOCK_W = next pow2 >= max(W, 16),
BLOCK_D = next pow2 >= max(D, 16); at the Weaver step's shapes BLOCK_S = 64, 4 warps, 2 stages (sm_90, bf16,
W = 4 or 8, D = 64: 90 registers, no spills); the launcher's keywords override BLOCK_S, warps and stages.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from weaver.kernels.triton._utils import check_device, interpreting, next_pow2, pdl_launch, pdl_wait
from weaver.kernels.triton.decode import _round

__all__ = ["NODE_ATTENTION_MAX_D", "node_attention", "node_attention_config", "node_attention_kernel"]

NODE_ATTENTION_MAX_D = 256
_LOG2E = 1.4426950408889634


@triton.jit
def _dot(a, b, DTYPE: tl.constexpr, INTERPRET: tl.constexpr):
    """a @ b with an fp32 result: 16-bit operands on the tensor cores; fp32 inputs (and every dot in the
    interpreter, which would multiply bf16 bit patterns) as exact fp32 FMAs."""
    if INTERPRET or DTYPE == tl.float32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        return tl.dot(a.to(DTYPE), b.to(DTYPE))


@triton.jit
def node_attention_kernel(
    q_ptr, k_ptr, v_ptr, mask_ptr, out_ptr,
    W, S, qk_scale,
    stride_qb, stride_qh, stride_qw,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_mb, stride_mw, stride_ms,
    H: tl.constexpr, D: tl.constexpr, INTERPRET: tl.constexpr,
    BLOCK_W: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr, GROUP: tl.constexpr = 1,
    PDL: tl.constexpr = False,
):  # fmt: skip
    """Program (b, h): rows q[b, h, :W] against k/v[b, h, :S] where mask[b, w, s] != 0; out [B, W, H, D]
    contiguous (token-major: the output projection reads each node's heads as one row).
    qk_scale = D**-0.5 * log2(e) (the softmax runs in base 2)."""
    if PDL:  # programmatic dependent launch: nothing is read before the wait
        pdl_wait()
    i_bh = tl.program_id(0)
    i_b = (i_bh // H).to(tl.int64)
    i_h = (i_bh % H).to(tl.int64)
    dtype = q_ptr.dtype.element_ty
    o_w = tl.arange(0, BLOCK_W)
    o_d = tl.arange(0, BLOCK_D)
    o_s0 = tl.arange(0, BLOCK_S)
    mask_w = o_w < W
    mask_d = o_d < D
    p_q = q_ptr + i_b * stride_qb + i_h * stride_qh + o_w[:, None] * stride_qw + o_d[None, :]
    b_q = tl.load(p_q, mask=mask_w[:, None] & mask_d[None, :], other=0.0)  # [BLOCK_W, BLOCK_D]
    p_k = k_ptr + i_b * stride_kb + (i_h // GROUP) * stride_kh  # GQA: GROUP query heads share a kv head
    p_v = v_ptr + i_b * stride_vb + (i_h // GROUP) * stride_vh
    p_m = mask_ptr + i_b * stride_mb + o_w[:, None] * stride_mw
    m_i = tl.full([BLOCK_W], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_W], dtype=tl.float32)
    acc = tl.zeros([BLOCK_W, BLOCK_D], dtype=tl.float32)
    for start in range(0, S, BLOCK_S):
        o_s = start + o_s0
        mask_s = o_s < S
        b_kt = tl.load(p_k + o_s[None, :] * stride_ks + o_d[:, None], mask=mask_d[:, None] & mask_s[None, :], other=0.0)
        visible = tl.load(p_m + o_s[None, :] * stride_ms, mask=mask_w[:, None] & mask_s[None, :], other=0) != 0
        scores = tl.where(visible, _dot(b_q, b_kt, dtype, INTERPRET) * qk_scale, float("-inf"))  # [BLOCK_W, BLOCK_S]
        b_v = tl.load(p_v + o_s[:, None] * stride_vs + o_d[None, :], mask=mask_s[:, None] & mask_d[None, :], other=0.0)
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # nothing visible yet: exp2(-inf - 0) = 0
        p = tl.exp2(scores - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        acc = acc * alpha[:, None] + _dot(_round(p, dtype), b_v, dtype, INTERPRET)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        m_i = m_new
    l_i = tl.where(l_i > 0, l_i, 1.0)  # pad rows (every real row has a visible entry)
    p_o = out_ptr + ((i_b * W + o_w[:, None]) * H + i_h) * D + o_d[None, :]  # token-major [B, W, H, D]
    tl.store(p_o, _round(acc / l_i[:, None], dtype).to(dtype), mask=mask_w[:, None] & mask_d[None, :])


def node_attention_config(w: int, d: int, dtype: torch.dtype) -> tuple[int, int, int, int, int]:
    """(BLOCK_W, BLOCK_D, BLOCK_S, num_warps, num_stages) of the default launch (the interpreter too).

    The Weaver step (W <= 16, D = 64) gets BLOCK_S = 64, 4 warps. Bigger row blocks take smaller S tiles and
    more warps so that nothing spills on sm_90 up to W = 64, D = 256 (scripts/triton_compile_check.py
    --node-attention); fp32's exact-FMA dot needs the smaller tiles sooner."""
    block_w, block_d = next_pow2(w), next_pow2(d)
    elems = block_w * block_d
    if dtype == torch.float32:
        block_s, warps = (64, 4) if elems <= 1024 else (32, 4) if elems <= 2048 else (16, 8 if elems <= 8192 else 16)
    else:
        block_s, warps = (64, 4) if elems <= 2048 else (32, 8)
    return block_w, block_d, block_s, warps, 2


def node_attention(
    q: torch.Tensor,  # [B, H, W, D]
    k: torch.Tensor,  # [B, Hkv, S, D], H a multiple of Hkv (grouped-query attention)
    v: torch.Tensor,  # [B, Hkv, S, D]
    mask: torch.Tensor,  # [B, W, S] bool: True = attend
    block_s: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Masked softmax attention, scale D**-0.5: `SDPA(q, k, v, attn_mask=mask[:, None], enable_gqa=True)`
    -> [B, H, W, D] (query head h reads kv head h // (H / Hkv)).

    q, k, v: bfloat16, float16 or float32 (one dtype), any strides (a last dim of stride > 1 is copied);
    k and v may have different strides (e.g. `k_buf[layer]` of a [L, B, H, S, D] buffer). mask: bool, any
    strides (an expanded view is read in place); every row needs at least one True (a row with none comes
    out as zeros, where SDPA gives NaN). Returns [B, H, W, D] in q's dtype: the transposed view of a new
    contiguous [B, W, H, D] tensor, so that `out.transpose(1, 2).reshape(B, W, H * D)` is free.
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be 4-D, got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    B, H, W, D = q.shape
    S, HKV = k.shape[2], k.shape[1]
    if k.shape != (B, HKV, S, D) or v.shape != k.shape or HKV < 1 or H % HKV:
        raise ValueError(f"k and v must be [{B}, Hkv, S, {D}] with {H} % Hkv == 0, got {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")  # fmt: skip
    if mask.shape != (B, W, S) or mask.dtype != torch.bool:
        raise ValueError(f"mask must be bool [{B}, {W}, {S}], got {mask.dtype} {tuple(mask.shape)}")
    if q.dtype not in (torch.bfloat16, torch.float16, torch.float32) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k, v must share one of bf16/fp16/fp32, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not 1 <= D <= NODE_ATTENTION_MAX_D:
        raise ValueError(f"head dim must be in 1..{NODE_ATTENTION_MAX_D}, got {D}")
    check_device(q, k, v, mask)
    q, k, v = (t if t.stride(3) == 1 or t.shape[3] == 1 else t.contiguous() for t in (q, k, v))
    out = torch.empty(B, W, H, D, dtype=q.dtype, device=q.device).transpose(1, 2)
    if out.numel() == 0:
        return out
    if S == 0:
        raise ValueError("S must be >= 1 (every row needs a visible entry)")
    mask8 = mask.view(torch.uint8)  # same bytes; triton reads bytes
    block_w, block_d, bs, nw, ns = node_attention_config(W, D, q.dtype)
    block_s, num_warps, num_stages = block_s or bs, num_warps or nw, num_stages or ns
    if block_s < 16 or block_s & (block_s - 1):
        raise ValueError(f"block_s must be a power of two >= 16 (tl.dot), got {block_s}")
    node_attention_kernel[(B * H,)](
        q, k, v, mask8, out,
        W, S, D**-0.5 * _LOG2E,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        mask8.stride(0), mask8.stride(1), mask8.stride(2),
        H=H, D=D, INTERPRET=interpreting(),
        BLOCK_W=block_w, BLOCK_D=block_d, BLOCK_S=block_s, GROUP=H // HKV,
        num_warps=num_warps, num_stages=num_stages, **pdl_launch(q.device),
    )  # fmt: skip
    return out
