"""The device weaver builder's pop and its nodes' inputs in one Triton launch a step, instead of ~20 kernels.

    step, node, grow, score, x, q, mask = frontier_pop_inputs(f_score, f_item, f_logp, count, nodes, logps,
                                                              valid, n, depth, w, visible, cand_x,
                                                              cand_qkv, k_buf, v_buf, 0, prefix_len)
    ... attention, MLP (weaver.kernels.node_attention / adapter_finish) ...
    ... scoring tail and push (weaver.kernels.triton.pool_top.pool_top(..., push=), which calls push_children) ...

The results are those of the torch reference, `weaver.ops.weaver_frontier` (`frontier_pop`, then `node_inputs`
on the step's slots; `frontier_push` for `push_children`); the tests compare them on the same buffers. One
program per batch row:

- pop: the best w of the F frontier scores (`select_top`: ties to the lowest column), take the first
  min(w, n - 1 - count) finite ones, empty their columns, append them as nodes count + 1, ...; untaken lanes
  go to scratch columns n + lane; count grows; the step's inputs [6, B, w] (slot, token, parent, depth,
  candidate row, children's pool row min(depth, D' - 1)) are padded where a node does not grow (scratch
  slot, token 0, no parent, depth 0, row 0, pool 0).
- node inputs (the w lanes in one 2-D block): each node's visibility row (its parent's row, or the prefix,
  plus itself), its input row and first-block q from the candidate table, its first-block k / v into its K/V
  column. With ROPE the table is the vocabulary's (rows by token, q / k unrotated) and q / k are rotated at
  the node's position depth + 1 on the way (`weaver.ops.weaver_frontier.rotate_qk`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from weaver.kernels.triton._utils import check_device, next_pow2, pdl_launch, pdl_wait
from weaver.kernels.triton.topk import select_top

__all__ = ["frontier_pop_inputs", "push_children"]

COLUMNS_PER_PASS = 512  # node-input columns a pass: a 27B adapter's 2,048 in one block spilled registers
POP_WARPS = 4  # warps of the one program per batch row (scripts/gpu/pop_ab.py times the alternatives)


@triton.jit
def _pop_kernel(
    f_score, f_item, f_logp, count, nodes, logps, valid, step, node_out, grow_out, score_out,
    F, N, DEPTH, W, B,
    stride_fs, stride_fi, stride_fl, stride_nb, stride_lb, stride_vb,
    visible, cand_x, cand_qkv, k_buf, v_buf, x_out, q_out, mask_out, rope_cos, rope_sin,
    P, S_TOT, D, HD,
    stride_visb, stride_viss, stride_cxb, stride_cxr, stride_cqb, stride_cqr,
    stride_kb, stride_kh, stride_ks, stride_vvb, stride_vvh, stride_vvs,
    BLOCK_F: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
    ROPE: tl.constexpr, PDL: tl.constexpr = False,
):  # fmt: skip
    if PDL:  # programmatic dependent launch: nothing is read before the wait
        pdl_wait()
    b = tl.program_id(0).to(tl.int64)
    o_f = tl.arange(0, BLOCK_F)
    m_f = o_f < F
    b_score = tl.load(f_score + b * stride_fs + o_f, mask=m_f, other=0.0)
    val, col = select_top(b_score, m_f, W, BLOCK_F, BLOCK_W, True)  # [BLOCK_W], descending
    col = col.to(tl.int64)
    o_w = tl.arange(0, BLOCK_W)
    m_w = o_w < W
    cnt = tl.load(count + b)
    take = m_w & (val > float("-inf")) & (o_w < (N - 1) - cnt)
    tl.store(f_score + b * stride_fs + col, tl.full([BLOCK_W], float("-inf"), tl.float64), mask=take)
    p_item = f_item + b * stride_fi + col * 4
    parent = tl.load(p_item, mask=m_w, other=0)
    token = tl.load(p_item + 1, mask=m_w, other=0)
    depth = tl.load(p_item + 2, mask=m_w, other=0)
    cand = tl.load(p_item + 3, mask=m_w, other=0)
    lp = tl.load(f_logp + b * stride_fl + col, mask=m_w, other=0.0)
    node = cnt + 1 + o_w
    scratch = N + o_w
    dst = tl.where(take, node, scratch)
    p_node = nodes + b * stride_nb + dst * 4
    tl.store(p_node, parent, mask=m_w)
    tl.store(p_node + 1, token, mask=m_w)
    tl.store(p_node + 2, depth, mask=m_w)
    tl.store(p_node + 3, cand, mask=m_w)
    tl.store(logps + b * stride_lb + dst, lp, mask=m_w)
    tl.store(valid + b * stride_vb + dst, take.to(tl.uint8), mask=m_w)
    cnt = cnt + tl.sum(take.to(tl.int64), axis=0)
    tl.store(count + b, cnt)
    grow = take & (depth < DEPTH) & (cnt < N - 1)
    p_step = step + b * W + o_w  # [6, B, W]
    tl.store(p_step, tl.where(grow, node, scratch), mask=m_w)
    tl.store(p_step + B * W, tl.where(grow, token, 0), mask=m_w)
    tl.store(p_step + 2 * B * W, tl.where(grow, parent, -1), mask=m_w)
    tl.store(p_step + 3 * B * W, tl.where(grow, depth, 0), mask=m_w)
    tl.store(p_step + 4 * B * W, tl.where(grow, cand, 0), mask=m_w)
    tl.store(p_step + 5 * B * W, tl.minimum(tl.where(grow, depth, 0), DEPTH - 1), mask=m_w)  # children's pool
    tl.store(node_out + b * W + o_w, node, mask=m_w)
    tl.store(grow_out + b * W + o_w, grow.to(tl.uint8), mask=m_w)
    tl.store(score_out + b * W + o_w, val, mask=m_w)
    # the table's row: the candidate's, or (ROPE: the vocabulary's unrotated rows) the token's, rotated at the
    # node's position min(depth, D' - 1) + 1 (a grown node sits above D'; a padded lane at depth 0)
    row = tl.where(grow, token, 0) if ROPE else tl.where(grow, cand, 0)
    _node_inputs_lanes(  # the popped lanes' node inputs, all lanes at once in this program
        b * W + o_w, b, tl.where(grow, node, scratch), tl.where(grow, parent, -1), row, tl.where(grow, depth, 0) + 1,
        m_w, visible, cand_x, cand_qkv, k_buf, v_buf, x_out, q_out, mask_out, rope_cos, rope_sin,
        P, S_TOT, D, HD, stride_visb, stride_viss, stride_cxb, stride_cxr, stride_cqb, stride_cqr,
        stride_kb, stride_kh, stride_ks, stride_vvb, stride_vvh, stride_vvs, BLOCK_S, BLOCK_D, ROPE,
    )  # fmt: skip


def frontier_pop_inputs(
    f_score: torch.Tensor,  # [B, F + 1] float64 (column F: the push sink, never read here)
    f_item: torch.Tensor,  # [B, F + 1, 4] int64: parent node, token, depth, candidate row
    f_logp: torch.Tensor,  # [B, F + 1] float32
    count: torch.Tensor,  # [B] int64: non-root nodes so far (updated)
    nodes: torch.Tensor,  # [B, N + w, 4] int64 (written: the taken nodes, and scratch columns N..)
    logps: torch.Tensor,  # [B, N + w] float32 (written)
    valid: torch.Tensor,  # [B, N + w] bool (written)
    n: int,  # N: nodes per row, root included
    depth: int,  # D': nodes at this depth are not grown
    w: int,  # entries popped a step
    visible: torch.Tensor,  # [B, S, P + S] bool (rows of the step's slots written)
    cand_x: torch.Tensor,  # [B, R, d]
    cand_qkv: torch.Tensor,  # [B, R, 3 d]
    k_buf: torch.Tensor,  # [L, B, H, P + S, hd]: the blocks' K (layer `layer`, column P + slot written)
    v_buf: torch.Tensor,  # [L, B, H, P + S, hd]
    layer: int,  # the block whose q/k/v the candidate table holds (the first)
    prefix_len: int,  # P
    rope_cos: torch.Tensor | None = None,  # [>= D' + 1, hd]: the table is the vocabulary's, rows by token, q / k
    rope_sin: torch.Tensor | None = None,  # unrotated (rotated here at the node's position)
) -> tuple[torch.Tensor, ...]:
    """One pop round and its nodes' inputs: step inputs [6, B, w] (slot, token, parent, depth, candidate row,
    children's pool row min(depth, D' - 1); padded), node ids [B, w], grow [B, w] bool, the popped scores [B, w]
    float64, then the nodes' input rows x [B, w, d], block-`layer` q [B, w, d] (heads concatenated) and
    visibility rows [B, w, P + S] bool. The whole [L, ...] buffers are arguments so that the custom op
    (`weaver.kernels.weaver_frontier`) mutates its inputs, not views of them."""
    check_device(f_score, f_item, f_logp, count, nodes, logps, valid, visible, cand_x, cand_qkv, k_buf,
                 v_buf)  # fmt: skip
    b, f1 = f_score.shape
    for t, shape in ((f_item, (b, f1, 4)), (f_logp, (b, f1)), (count, (b,)), (nodes, (b, n + w, 4)),
                     (logps, (b, n + w)), (valid, (b, n + w))):  # fmt: skip
        if t.shape != shape or t.stride(-1) != 1:
            raise ValueError(f"frontier_pop_inputs: expected shape {shape} (unit last stride), got {tuple(t.shape)}")
    if f_item.stride(1) != 4 or nodes.stride(1) != 4 or not 1 <= w <= f1 - 1:
        raise ValueError("frontier_pop_inputs: item rows must be packed (stride 4) and 1 <= w <= F")
    step = torch.empty(6, b, w, dtype=torch.int64, device=f_score.device)
    node = torch.empty(b, w, dtype=torch.int64, device=f_score.device)
    grow = torch.empty(b, w, dtype=torch.bool, device=f_score.device)
    score = torch.empty(b, w, dtype=torch.float64, device=f_score.device)
    outs, (ptrs, ints, strides), blocks = _inputs_args(b, w, visible, cand_x, cand_qkv, k_buf, v_buf,
                                                       layer, prefix_len, rope_cos, rope_sin, depth)  # fmt: skip
    if b:
        _pop_kernel[(b,)](
            f_score, f_item, f_logp, count, nodes, logps, valid.view(torch.uint8), step, node,
            grow.view(torch.uint8), score,
            f1 - 1, n, depth, w, b,
            f_score.stride(0), f_item.stride(0), f_logp.stride(0), nodes.stride(0), logps.stride(0), valid.stride(0),
            *ptrs, *ints, *strides,
            BLOCK_F=next_pow2(f1 - 1, 32), BLOCK_W=next_pow2(w, 2), **blocks, ROPE=rope_cos is not None,
            # no fused multiply-adds: the RoPE rotation rounds x * cos and pair * sin apart, as `rotate_qk` does
            # (with them the compiled RoPE pop differed from its reference: scale/h100_session53_build; without,
            # it equals it: scale/h100_session54_build)
            num_warps=POP_WARPS, enable_fp_fusion=False, **pdl_launch(f_score.device),
        )  # fmt: skip
    return (step, node, grow, score, *outs)


@triton.jit
def push_children(
    f_score, f_item, f_logp, b, node, score, grow, depth, first, o_c, lp, tok, ix, m, C, stride_fs, stride_fi,
    stride_fl,
):  # fmt: skip
    """Batch row b's frontier columns node * C + o_c get a grown node's children (where m): score + log p
    (float64; -inf dropped), log p, item (node, token, children's depth, candidate row first + pool index).
    Node-wise values broadcast against the child-wise ones (lp, tok, ix, m); grow is a bool tensor."""
    s = score + lp.to(tl.float64)
    keep = m & grow & (s > float("-inf"))
    col = node * C + o_c
    tl.store(f_score + b * stride_fs + col, s, mask=keep)
    tl.store(f_logp + b * stride_fl + col, lp, mask=keep)
    p_item = f_item + b * stride_fi + col * 4
    tl.store(p_item, node + 0 * col, mask=keep)
    tl.store(p_item + 1, tok, mask=keep)
    tl.store(p_item + 2, depth + 0 * col, mask=keep)
    tl.store(p_item + 3, first + ix, mask=keep)


@triton.jit
def _node_inputs_lanes(
    i, b, slot, parent, cand, pos, ok,
    visible, cand_x, cand_qkv, k_buf, v_buf, x_out, q_out, mask_out, rope_cos, rope_sin,
    P, S_TOT, D, HD,
    stride_vb, stride_vs, stride_cxb, stride_cxr, stride_cqb, stride_cqr,
    stride_kb, stride_kh, stride_ks, stride_vvb, stride_vvh, stride_vvs,
    BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, ROPE: tl.constexpr,
):  # fmt: skip
    """The lanes' nodes (vectors: step index i, slot, parent or -1, table row, RoPE position; a lane where ok is
    False does nothing) of batch row b: their visibility rows, input rows, first-block q and K/V columns. All
    lanes in one 2-D block, so their loads go out together (a lane's parent is never a lane of the same step).
    ROPE: the table's q and k are unrotated; they are rotated here (float32, `weaver.ops.weaver_frontier.rotate_qk`)."""
    # visibility: the parent's row (prefix + its ancestors-or-self), or the prefix alone; plus itself
    o_s = tl.arange(0, BLOCK_S)[None, :]
    m_s = (o_s < S_TOT) & ok[:, None]
    row = tl.load(visible + b * stride_vb + tl.maximum(parent, 0)[:, None] * stride_vs + o_s, mask=m_s, other=0)
    row = tl.where(parent[:, None] >= 0, row, (o_s < P).to(row.dtype))  # a root: the prefix columns alone
    row = tl.where(o_s == P + slot[:, None], 1, row)
    tl.store(visible + b * stride_vb + slot[:, None] * stride_vs + o_s, row, mask=m_s)
    tl.store(mask_out + i[:, None] * S_TOT + o_s, row, mask=m_s)  # what the node's attention sees
    # the input row and the first block's q / k / v from the candidate table, BLOCK_D columns a pass
    # (COLUMNS_PER_PASS); a column's RoPE partner is loaded from memory, in whichever pass it falls
    base_x = cand_x + b * stride_cxb + cand[:, None] * stride_cxr
    base_qkv = cand_qkv + b * stride_cqb + cand[:, None] * stride_cqr
    col = (P + slot)[:, None]
    for c0 in range(0, D, BLOCK_D):
        o_d = c0 + tl.arange(0, BLOCK_D)[None, :]
        m_d = (o_d < D) & ok[:, None]
        tl.store(x_out + i[:, None] * D + o_d, tl.load(base_x + o_d, mask=m_d), mask=m_d)
        q = tl.load(base_qkv + o_d, mask=m_d)
        k = tl.load(base_qkv + D + o_d, mask=m_d)
        head, j = o_d // HD, o_d % HD
        if ROPE:  # rotate-half: x * cos + [-x2, x1] * sin, column j's partner being j +- HD / 2 in its head
            half = HD // 2
            p_pair = base_qkv + head * HD + (j + half) % HD
            sign = tl.where(j < half, -1.0, 1.0)
            cos = tl.load(rope_cos + pos[:, None] * HD + j, mask=m_d, other=0.0).to(tl.float32)
            sin = tl.load(rope_sin + pos[:, None] * HD + j, mask=m_d, other=0.0).to(tl.float32)
            q_pair = sign * tl.load(p_pair, mask=m_d, other=0.0).to(tl.float32)
            k_pair = sign * tl.load(p_pair + D, mask=m_d, other=0.0).to(tl.float32)
            q = (q.to(tl.float32) * cos + q_pair * sin).to(q.dtype)
            k = (k.to(tl.float32) * cos + k_pair * sin).to(k.dtype)
        tl.store(q_out + i[:, None] * D + o_d, q, mask=m_d)
        tl.store(k_buf + b * stride_kb + head * stride_kh + col * stride_ks + j, k, mask=m_d)
        v = tl.load(base_qkv + 2 * D + o_d, mask=m_d)
        tl.store(v_buf + b * stride_vvb + head * stride_vvh + col * stride_vvs + j, v, mask=m_d)


def _inputs_args(b, w, visible, cand_x, cand_qkv, k_buf, v_buf, layer, prefix_len, rope_cos, rope_sin,
                 depth) -> tuple:  # fmt: skip
    """Checked node-input arguments of the pop: the outputs (x, q, mask), the kernel's (pointers, sizes, strides) and
    its block sizes."""
    k_buf, v_buf = k_buf[layer], v_buf[layer]
    d = cand_x.shape[2]
    h, s_tot, hd = k_buf.shape[1], k_buf.shape[2], k_buf.shape[3]
    if cand_qkv.shape[2] != 3 * d or h * hd != d or v_buf.shape != k_buf.shape or visible.shape[2] != s_tot:
        raise ValueError(
            "frontier_pop_inputs: cand_x [B, R, d], cand_qkv [B, R, 3d], k/v [B, H, P+S, d/H], visible [B, S, P+S]"
        )
    if any(t.stride(-1) != 1 for t in (visible, cand_x, cand_qkv, k_buf, v_buf)):
        raise ValueError("frontier_pop_inputs: unit stride along the last dim")
    if (rope_cos is None) != (rope_sin is None):
        raise ValueError("frontier_pop_inputs: rope_cos and rope_sin come together")
    if rope_cos is not None:
        if rope_cos.shape != rope_sin.shape or rope_cos.shape[0] < depth + 1 or rope_cos.shape[1] != hd or hd % 2:
            raise ValueError(f"frontier_pop_inputs: rope_cos / rope_sin [>= {depth + 1}, {hd}], even head_dim")
        rope_cos, rope_sin = rope_cos.contiguous(), rope_sin.contiguous()
    else:
        rope_cos = rope_sin = cand_x  # never read
    x = torch.empty(b, w, d, dtype=cand_x.dtype, device=cand_x.device)
    q = torch.empty(b, w, d, dtype=cand_qkv.dtype, device=cand_x.device)
    mask = torch.empty(b, w, s_tot, dtype=torch.bool, device=cand_x.device)
    ptrs = (visible.view(torch.uint8), cand_x, cand_qkv, k_buf, v_buf, x, q,
            mask.view(torch.uint8), rope_cos, rope_sin)  # fmt: skip
    strides = (visible.stride(0), visible.stride(1), cand_x.stride(0), cand_x.stride(1), cand_qkv.stride(0),
               cand_qkv.stride(1), k_buf.stride(0), k_buf.stride(1), k_buf.stride(2), v_buf.stride(0),
               v_buf.stride(1), v_buf.stride(2))  # fmt: skip
    blocks = dict(BLOCK_S=next_pow2(s_tot, 16), BLOCK_D=min(next_pow2(d, 16), COLUMNS_PER_PASS))
    return (x, q, mask), (ptrs, (prefix_len, s_tot, d, hd), strides), blocks
