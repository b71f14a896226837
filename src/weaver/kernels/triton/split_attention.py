r"""Tree attention split along the committed prefix (flash-decoding): every program reads a part of the K/V cache.

`tree_attention` gives each (row block, kv head) one program that walks the whole prefix. At one token and four kv
heads (the Qwen3.6-27B decode step) that is four programs, so the step's cost grows with the prefix at the pace of
four SMs. Here the prefix of row b (slots 0 .. L_b - 1) is cut into at most SPLITS chunks of >= min_chunk slots,
sized from L_b at run time, plus one more item for the tree slots L_b + j (the ancestor mask, as `tree_attention`):

    launch 1, grid (row blocks, B Hkv, SPLITS + 1): partial (m, l, acc) of each item's slots, fp32
    launch 2, one program per (node, head): o = sum_c e^(m_c - m) acc_c / sum_c e^(m_c - m) l_c  [* sigmoid(gate)]

Items past the used chunks exit at once, so the grid (static: capturable) is sized for the longest prefix
while a short one reads only its own slots. The second launch applies the Qwen3.5 attention's output gate. A cache
of at most 2 MIN_CHUNK slots, or rows that fill the GPU alone, take one launch (SPLITS = 0: prefix, tree and gate in
one item). With a window (the DFlash drafter's sliding layers) node i sees the prefix slots > length + i - window.
The torch reference is `weaver.ops.decode.tree_attention_ref` (the gate: `out * sigmoid(gate)`).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from weaver.kernels.triton._utils import check_device, interpreting, pdl_launch, pdl_wait
from weaver.kernels.triton.decode import _round
from weaver.kernels.triton.tree_attention import _attend_slots, _attend_tree_slots, _check_caches, _program_rows

MAX_SPLITS = 32  # prefix chunks of one (row block, kv head) at most
MIN_CHUNK = 256  # slots a chunk holds at least on a GPU (a short prefix stays in one program)


@triton.jit
def _first_slot(length, WINDOW: tl.constexpr):
    """The first prefix slot any node may see: 0, or with a window the first node's (position length)."""
    if WINDOW > 0:
        return tl.maximum(length - WINDOW + 1, 0)
    else:
        return length * 0


@triton.jit
def _chunk_slots(length, SPLITS: tl.constexpr, MIN_CHUNK: tl.constexpr, BLOCK_S: tl.constexpr):
    """Slots per prefix chunk: the prefix over SPLITS chunks, whole BLOCK_S tiles, at least MIN_CHUNK."""
    per = tl.cdiv(tl.cdiv(length, SPLITS), BLOCK_S) * BLOCK_S
    return tl.maximum(per, MIN_CHUNK)


@triton.jit
def _gated_store(o, p_gate, p_out, mask, GATE: tl.constexpr, DTYPE: tl.constexpr):
    """o (fp32) rounded to DTYPE [times sigmoid(gate), as torch rounds `out * sigmoid(gate)`], stored."""
    o = _round(o, DTYPE)
    if GATE:
        g = tl.load(p_gate, mask=mask, other=0.0).to(tl.float32)
        o = _round(o * _round(tl.sigmoid(g), DTYPE), DTYPE)
    tl.store(p_out, o.to(DTYPE), mask=mask)


@triton.jit
def _split_attention_kernel(
    q_ptr, k_ptr, v_ptr, len_ptr, anc_ptr, m_ptr, l_ptr, acc_ptr, gate_ptr, out_ptr,
    T, scale,
    stride_q, stride_ab, stride_ai, stride_aj, stride_cb, stride_ch, stride_cs, stride_g, stride_gh, stride_o,
    H: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, INTERPRET: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr,
    SPLITS: tl.constexpr, MIN_CHUNK: tl.constexpr, GATE: tl.constexpr, WINDOW: tl.constexpr, PDL: tl.constexpr = False,
):
    """SPLITS > 0: item i_c < SPLITS is prefix chunk i_c, item SPLITS the tree; each stores its partial (m, l, acc).
    SPLITS = 0 (a short cache): one item reads the whole prefix and the tree and stores the (gated) output.
    WINDOW > 0 (the drafter's sliding layers): node i sits at position length + i and sees the prefix slots less
    than WINDOW positions back."""
    if PDL:  # programmatic dependent launch: nothing is read before the wait
        pdl_wait()
    i_r, i_b, i_kvh, o_i, o_h, mask_r = _program_rows(T, H, HKV, BLOCK_R)
    i_c = tl.program_id(2)  # prefix chunk; SPLITS: the tree
    dtype = q_ptr.dtype.element_ty
    length = tl.load(len_ptr + i_b)
    first = _first_slot(length, WINDOW)
    lo = first
    hi = length
    if SPLITS > 0:
        chunk = _chunk_slots(length - first, SPLITS, MIN_CHUNK, BLOCK_S)
        lo = tl.minimum(first + i_c * chunk, length)
        hi = tl.minimum(lo + chunk, length)
    row_lo = length + o_i - WINDOW + 1  # [BLOCK_R]: each node's first visible slot (WINDOW > 0)
    if (i_c == SPLITS) | (lo < hi):
        o_d = tl.arange(0, BLOCK_D)
        mask_d = o_d < D
        mask_rd = mask_r[:, None] & mask_d[None, :]
        p_q = q_ptr + (i_b * T + o_i)[:, None] * stride_q + o_h[:, None] * D + o_d[None, :]
        b_q = tl.load(p_q, mask=mask_rd, other=0.0)  # [BLOCK_R, BLOCK_D]
        p_k = k_ptr + i_b * stride_cb + i_kvh * stride_ch
        p_v = v_ptr + i_b * stride_cb + i_kvh * stride_ch
        p_anc = anc_ptr + i_b * stride_ab + o_i[:, None] * stride_ai
        m_i = tl.full([BLOCK_R], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_R], dtype=tl.float32)
        acc = tl.zeros([BLOCK_R, BLOCK_D], dtype=tl.float32)
        if SPLITS == 0:  # the whole prefix, then the tree; every node sees itself, so l > 0 on every valid row
            m_i, l_i, acc = _attend_slots(b_q, p_k, p_v, lo, hi, stride_cs, o_d, mask_d, scale, dtype, INTERPRET,
                                          BLOCK_R, BLOCK_D, BLOCK_S, row_lo, WINDOW > 0)  # fmt: skip
            m_i, l_i, acc = _attend_tree_slots(b_q, p_k, p_v, p_anc, mask_r, length, T, stride_aj, stride_cs, o_d,
                                               mask_d, scale, m_i, l_i, acc, dtype, INTERPRET, BLOCK_S)  # fmt: skip
            p_g = gate_ptr + (i_b * T + o_i)[:, None] * stride_g + o_h[:, None] * stride_gh + o_d[None, :]
            p_o = out_ptr + (i_b * T + o_i)[:, None] * stride_o + o_h[:, None] * D + o_d[None, :]
            _gated_store(acc / tl.where(mask_r, l_i, 1.0)[:, None], p_g, p_o, mask_rd, GATE, dtype)
        else:
            if i_c < SPLITS:
                m_i, l_i, acc = _attend_slots(b_q, p_k, p_v, lo, hi, stride_cs, o_d, mask_d, scale, dtype, INTERPRET,
                                              BLOCK_R, BLOCK_D, BLOCK_S, row_lo, WINDOW > 0)  # fmt: skip
            else:
                m_i, l_i, acc = _attend_tree_slots(b_q, p_k, p_v, p_anc, mask_r, length, T, stride_aj, stride_cs,
                                                   o_d, mask_d, scale, m_i, l_i, acc, dtype, INTERPRET,
                                                   BLOCK_S)  # fmt: skip
            row = ((i_b * T + o_i) * H + o_h) * (SPLITS + 1) + i_c  # [BLOCK_R]: this item's partial of each row
            tl.store(m_ptr + row, m_i, mask=mask_r)
            tl.store(l_ptr + row, l_i, mask=mask_r)
            tl.store(acc_ptr + row[:, None] * D + o_d[None, :], acc, mask=mask_rd)


@triton.jit
def _combine_kernel(
    m_ptr, l_ptr, acc_ptr, len_ptr, gate_ptr, out_ptr,
    T, stride_g, stride_gh, stride_o,
    H: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_S: tl.constexpr,
    SPLITS: tl.constexpr, MIN_CHUNK: tl.constexpr, GATE: tl.constexpr, WINDOW: tl.constexpr, PDL: tl.constexpr = False,
):
    if PDL:
        pdl_wait()
    row = tl.program_id(0)  # (node, head) of B T H
    i_bt = row // H
    i_h = row % H
    i_b = i_bt // T
    dtype = out_ptr.dtype.element_ty
    length = tl.load(len_ptr + i_b)
    span = length - _first_slot(length, WINDOW)
    used = tl.cdiv(span, _chunk_slots(span, SPLITS, MIN_CHUNK, BLOCK_S))
    o_c = tl.arange(0, BLOCK_C)
    valid = (o_c < used) | (o_c == SPLITS)  # the tree item always ran: every node sees itself
    o_d = tl.arange(0, BLOCK_D)
    mask_d = o_d < D
    part = row * (SPLITS + 1) + o_c
    m_c = tl.load(m_ptr + part, mask=valid, other=float("-inf"))
    l_c = tl.load(l_ptr + part, mask=valid, other=0.0)
    acc_c = tl.load(acc_ptr + part[:, None] * D + o_d[None, :], mask=valid[:, None] & mask_d[None, :], other=0.0)
    w = tl.where(valid, tl.exp(m_c - tl.max(m_c, axis=0)), 0.0)
    o = tl.sum(w[:, None] * acc_c, axis=0) / tl.sum(w * l_c, axis=0)
    p_g = gate_ptr + i_bt * stride_g + i_h * stride_gh + o_d
    _gated_store(o, p_g, out_ptr + i_bt * stride_o + i_h * D + o_d, mask_d, GATE, dtype)


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


class SplitLaunch(NamedTuple):
    block_r: int  # (node, head) rows a program
    block_s: int  # slots a step
    num_warps: int
    num_stages: int
    splits: int  # prefix chunks; 0: one launch that reads the whole prefix, no partials


def split_launch(
    rows: int, batch_kv: int, capacity: int, device: torch.device, d: int, dtype: torch.dtype
) -> SplitLaunch:
    """A launch with enough chunks for ~2 programs an SM at the longest prefix; splits 0 where the cache holds at
    most two minimal chunks or the rows alone fill the GPU. fp32 tiles take one stage (three overflow the shared
    memory at D = 128). Interpreted: two chunks of 16 slots, so the tests cross a chunk border."""
    block_r = 16 if rows <= 16 else 32
    block_s = 64 if d <= 128 else 32
    stages = 1 if dtype == torch.float32 else 3
    if device.type != "cuda":
        return SplitLaunch(max(16, triton.next_power_of_2(rows)), 16, 4, 1, 2)
    programs = triton.cdiv(rows, block_r) * batch_kv
    splits = min(MAX_SPLITS, 2 * _sm_count(device.index or 0) // programs)
    warps = 4 if d <= 128 else 8
    return SplitLaunch(block_r, block_s, warps, stages, 0 if splits < 2 or capacity <= 2 * MIN_CHUNK else splits)


def split_tree_attention(
    q: torch.Tensor,  # [B T, H D]: roped queries, unit stride along H D
    cache_k: torch.Tensor,  # [B, Hkv, S, D] holding the tree's K/V at slots lengths + j
    cache_v: torch.Tensor,
    lengths: torch.Tensor,  # [B] long: committed tokens per row
    anc: torch.Tensor,  # [B, T, T] bool: ancestor-or-self mask
    num_heads: int,
    num_kv_heads: int,
    gate: torch.Tensor | None = None,  # [B T, H, D] view, unit stride along D: o * sigmoid(gate)
    window: int = 0,  # > 0: node i at position lengths + i sees prefix slots > its position - window (needs T <= it)
    min_chunk: int | None = None,  # slots a chunk holds at least; None: MIN_CHUNK (GPU), 16 (interpreter)
    splits: int | None = None,  # prefix chunks at most (0: one launch, no split); None: `split_launch`
) -> torch.Tensor:
    """Each node attends to the committed prefix and its ancestors-or-self, the prefix read in parallel chunks;
    o [B T, H D] (times sigmoid(gate) when given): two launches (one with splits = 0)."""
    check_device(q, cache_k, cache_v, lengths, anc)
    b, _, capacity, d = cache_k.shape
    if anc.dim() != 3 or anc.shape[0] != b or anc.shape[1] != anc.shape[2] or lengths.shape != (b,):
        raise ValueError(f"need anc [{b}, T, T] and lengths [{b}], got {tuple(anc.shape)}, {tuple(lengths.shape)}")
    t = anc.shape[1]
    if q.shape != (b * t, num_heads * d) or q.stride(1) != 1:
        raise ValueError(f"q must be [{b * t}, {num_heads * d}] with unit stride, got {tuple(q.shape)}")
    _check_caches(cache_k, cache_v, num_heads, num_kv_heads)
    if gate is not None and (gate.shape != (b * t, num_heads, d) or gate.stride(2) != 1):
        raise ValueError(f"gate must be [{b * t}, {num_heads}, {d}] with unit stride along D, got {tuple(gate.shape)}")
    if window < 0 or 0 < window < t:
        raise ValueError(f"window must be 0 (none) or at least the {t} nodes, got {window}")
    if anc.dtype == torch.bool:
        anc = anc.view(torch.uint8)  # same bytes; triton reads bytes
    rows = t * (num_heads // num_kv_heads)
    block_r, block_s, warps, stages, auto_splits = split_launch(rows, b * num_kv_heads, capacity, q.device, d, q.dtype)
    splits = auto_splits if splits is None else splits
    min_chunk = min_chunk or (16 if interpreting() else MIN_CHUNK)
    n = b * t * num_heads
    parts = max(1, n * (splits + 1)) if splits else 1  # (one unused element each without a split)
    m_part = torch.empty(parts, device=q.device, dtype=torch.float32)
    l_part = torch.empty_like(m_part)
    acc_part = torch.empty(parts, d if splits else 1, device=q.device, dtype=torch.float32)
    out = torch.empty(b * t, num_heads * d, device=q.device, dtype=q.dtype)
    g = gate if gate is not None else q.view(b * t, num_heads, d)
    block_d = max(16, triton.next_power_of_2(d))
    _split_attention_kernel[(triton.cdiv(rows, block_r), b * num_kv_heads, splits + 1)](
        q, cache_k, cache_v, lengths, anc, m_part, l_part, acc_part, g, out,
        t, d**-0.5,
        q.stride(0), anc.stride(0), anc.stride(1), anc.stride(2),
        cache_k.stride(0), cache_k.stride(1), cache_k.stride(2), g.stride(0), g.stride(1), out.stride(0),
        H=num_heads, HKV=num_kv_heads, D=d, INTERPRET=interpreting(),
        BLOCK_R=block_r, BLOCK_D=block_d, BLOCK_S=block_s, SPLITS=splits, MIN_CHUNK=min_chunk,
        GATE=gate is not None, WINDOW=window, num_warps=warps, num_stages=stages, **pdl_launch(q.device),
    )  # fmt: skip
    if splits == 0:
        return out
    _combine_kernel[(n,)](
        m_part, l_part, acc_part, lengths, g, out,
        t, g.stride(0), g.stride(1), out.stride(0),
        H=num_heads, D=d, BLOCK_D=block_d, BLOCK_C=max(2, triton.next_power_of_2(splits + 1)), BLOCK_S=block_s,
        SPLITS=splits, MIN_CHUNK=min_chunk, GATE=gate is not None, WINDOW=window, num_warps=4 if d <= 128 else 8,
        **pdl_launch(q.device),
    )  # fmt: skip
    return out
