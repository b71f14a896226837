"""The device weaver builder's bookkeeping per adapter step in three Triton launches instead of ~20 kernels.

    step, node, grow, score = frontier_pop(f_score, f_item, f_logp, count, nodes, logps, valid, n, depth, w)
    x, q, mask = node_inputs(step, visible, prefix_mask, cand_x, cand_qkv, k_buf, v_buf, 0, prefix_len)
    ... attention, MLP, scoring (weaver.kernels.node_attention / adapter_finish / pool_top) ...
    frontier_push(f_score, f_item, f_logp, node, grow, score, step, top_lp, top_tok, top_ix, K)

They do what `weaver.speculative.weaver_builder_device` (`_Frontier.pop`, the node writes, `_children`'s padding,
`WeaverAdapter._grow`'s visibility / candidate-table gathers / K/V writes of the first block, `_Frontier.push`)
does with tensor ops, with the same results (the builder's tests run both on the same inputs):

- pop (one program per batch row): the best w of the F frontier scores (`select_top`: ties to the lowest
  column, as the builder's Triton top-k), take the first min(w, n - 1 - count) finite ones, empty their
  columns, append them as nodes count + 1, ...; untaken lanes go to scratch columns n + lane; count grows;
  the step's inputs [6, B, w] (slot, token, parent, depth, candidate row, pool row) are padded where a node
  does not grow (scratch slot, token 0, no parent, depth 0, row 0, pool 0).
- node_inputs (one program per batch row, its w nodes in one 2-D block): each node's visibility row (its
  parent's row, or the prefix, plus itself), its input row and first-block q from the candidate table, its
  first-block k / v into its K/V column.
  The pop also hands out each node's pool row (min(depth, D' - 1)) and the push turns a child's pool index
  into its candidate-table row, so no small kernels remain between the launches.
- push (one program per batch row): each grown node's c children into frontier columns node * c + j,
  score = the node's score + log p (float64), children with a -inf score dropped.

Fused forms (the builder's default; one launch less each per step): `frontier_pop(..., inputs=)` runs the
node inputs of the popped lanes inside the pop's program, and `weaver.kernels.triton.pool_top.pool_top(...,
push=)` does the push inside the scoring tail.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from weaver.kernels.triton._utils import check_device, next_pow2, pdl_launch, pdl_wait
from weaver.kernels.triton.topk import select_top

__all__ = ["frontier_pop", "frontier_pop_inputs", "frontier_push", "node_inputs"]


@triton.jit
def _pop_kernel(
    f_score, f_item, f_logp, count, nodes, logps, valid, step, node_out, grow_out, score_out,
    F, N, DEPTH, W, B,
    stride_fs, stride_fi, stride_fl, stride_nb, stride_lb, stride_vb,
    visible, prefix, cand_x, cand_qkv, k_buf, v_buf, x_out, q_out, mask_out,
    P, S_TOT, D, HD,
    stride_visb, stride_viss, stride_cxb, stride_cxr, stride_cqb, stride_cqr,
    stride_kb, stride_kh, stride_ks, stride_vvb, stride_vvh, stride_vvs,
    BLOCK_F: tl.constexpr, BLOCK_W: tl.constexpr, INPUTS: tl.constexpr = False, BLOCK_S: tl.constexpr = 16,
    BLOCK_D: tl.constexpr = 16, PDL: tl.constexpr = False,
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
    if INPUTS:  # node_inputs for the popped lanes, all lanes at once in this program (one launch less a step)
        _node_inputs_lanes(
            b * W + o_w, b, tl.where(grow, node, scratch), tl.where(grow, parent, -1), tl.where(grow, cand, 0), m_w,
            visible, prefix, cand_x, cand_qkv, k_buf, v_buf, x_out, q_out, mask_out, P, S_TOT, D, HD,
            stride_visb, stride_viss, stride_cxb, stride_cxr, stride_cqb, stride_cqr,
            stride_kb, stride_kh, stride_ks, stride_vvb, stride_vvh, stride_vvs, BLOCK_S, BLOCK_D,
        )  # fmt: skip


def frontier_pop(
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
    inputs: tuple | None = None,  # node_inputs' (visible, prefix_mask, cand_x, cand_qkv, k_buf, v_buf, layer, P)
) -> tuple[torch.Tensor, ...]:
    """One pop round: step inputs [6, B, w] (slot, token, parent, depth, candidate row, children's pool row
    min(depth, D' - 1); padded), node ids [B, w], grow [B, w] bool and the popped scores [B, w] float64.

    With `inputs`, the same launch also does `node_inputs(step, *inputs)` for the popped lanes, and its
    (x, q, mask) follow the four results: one launch less per adapter step."""
    check_device(f_score, f_item, f_logp, count, nodes, logps, valid)
    b, f1 = f_score.shape
    for t, shape in ((f_item, (b, f1, 4)), (f_logp, (b, f1)), (count, (b,)), (nodes, (b, n + w, 4)),
                     (logps, (b, n + w)), (valid, (b, n + w))):  # fmt: skip
        if t.shape != shape or t.stride(-1) != 1:
            raise ValueError(f"frontier_pop: expected shape {shape} (unit last stride), got {tuple(t.shape)}")
    if f_item.stride(1) != 4 or nodes.stride(1) != 4 or not 1 <= w <= f1 - 1:
        raise ValueError("frontier_pop: item rows must be packed (stride 4) and 1 <= w <= F")
    step = torch.empty(6, b, w, dtype=torch.int64, device=f_score.device)
    node = torch.empty(b, w, dtype=torch.int64, device=f_score.device)
    grow = torch.empty(b, w, dtype=torch.bool, device=f_score.device)
    score = torch.empty(b, w, dtype=torch.float64, device=f_score.device)
    if inputs is None:
        outs, (ptrs, ints, strides), blocks = (), ((step,) * 9, (0,) * 4, (0,) * 12), {}
    else:
        check_device(*inputs[:6])
        outs, (ptrs, ints, strides), blocks = _inputs_args(b, w, *inputs)
    if b:
        _pop_kernel[(b,)](
            f_score, f_item, f_logp, count, nodes, logps, valid.view(torch.uint8), step, node,
            grow.view(torch.uint8), score,
            f1 - 1, n, depth, w, b,
            f_score.stride(0), f_item.stride(0), f_logp.stride(0), nodes.stride(0), logps.stride(0), valid.stride(0),
            *ptrs, *ints, *strides,
            BLOCK_F=next_pow2(f1 - 1, 32), BLOCK_W=next_pow2(w, 2), INPUTS=inputs is not None, **blocks,
            num_warps=4, **pdl_launch(f_score.device),
        )  # fmt: skip
    return (step, node, grow, score, *outs)


def frontier_pop_inputs(*args) -> tuple[torch.Tensor, ...]:
    """`frontier_pop(*args[:10], inputs=args[10:])`: frontier_pop's arguments, then node_inputs' without the step,
    flat as the custom op `weaver::frontier_pop_inputs` passes them."""
    return frontier_pop(*args[:10], tuple(args[10:]))


@triton.jit
def _push_kernel(
    f_score, f_item, f_logp, node, grow, score, step, top_lp, top_tok, top_ix,
    W, C, B, K, stride_fs, stride_fi, stride_fl,
    BLOCK_W: tl.constexpr, BLOCK_C: tl.constexpr, PDL: tl.constexpr = False,
):  # fmt: skip
    if PDL:  # programmatic dependent launch: nothing is read before the wait
        pdl_wait()
    b = tl.program_id(0).to(tl.int64)
    o_w = tl.arange(0, BLOCK_W)
    o_c = tl.arange(0, BLOCK_C)
    m_w = o_w < W
    m = m_w[:, None] & (o_c < C)[None, :]
    b_node = tl.load(node + b * W + o_w, mask=m_w, other=0)
    b_grow = tl.load(grow + b * W + o_w, mask=m_w, other=0) != 0
    b_score = tl.load(score + b * W + o_w, mask=m_w, other=0.0)
    b_depth = tl.load(step + 3 * B * W + b * W + o_w, mask=m_w, other=0) + 1  # the children's depth
    b_first = 1 + tl.load(step + 5 * B * W + b * W + o_w, mask=m_w, other=0) * K  # table row of pool entry 0
    o_wc = (b * W + o_w)[:, None] * C + o_c[None, :]
    push_children(
        f_score, f_item, f_logp, b, b_node[:, None], b_score[:, None], b_grow[:, None], b_depth[:, None],
        b_first[:, None], o_c[None, :], tl.load(top_lp + o_wc, mask=m, other=float("-inf")),
        tl.load(top_tok + o_wc, mask=m, other=0), tl.load(top_ix + o_wc, mask=m, other=0), m, C,
        stride_fs, stride_fi, stride_fl,
    )  # fmt: skip


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


def frontier_push(
    f_score: torch.Tensor, f_item: torch.Tensor, f_logp: torch.Tensor,  # the frontier (written)
    node: torch.Tensor,  # [B, w] int64: the expanded nodes
    grow: torch.Tensor,  # [B, w] bool: those whose children are pushed
    score: torch.Tensor,  # [B, w] float64: their cumulative scores
    step: torch.Tensor,  # [6, B, w]: the step's inputs (row 3: the nodes' depths, row 5: their pool rows)
    top_lp: torch.Tensor,  # [B, w, c] float32: children's log-probs
    top_tok: torch.Tensor,  # [B, w, c] int64
    top_ix: torch.Tensor,  # [B, w, c] int64: children's indices in their pool (row 1 + pool * K + ix of the table)
    pool_size: int,  # K
) -> None:
    """Push each grown node's c children into its frontier columns node * c .. node * c + c - 1."""
    check_device(f_score, f_item, f_logp, node, grow, score, step, top_lp, top_tok, top_ix)
    b, w, c = top_lp.shape
    if node.shape != (b, w) or grow.shape != (b, w) or score.shape != (b, w) or step.shape != (6, b, w):
        raise ValueError(f"frontier_push: node/grow/score [B, w] and step [6, B, w] for B, w = {b}, {w}")
    if top_tok.shape != (b, w, c) or top_ix.shape != (b, w, c):
        raise ValueError(f"frontier_push: top_tok / top_ix must be [{b}, {w}, {c}]")
    node, grow, score, step, top_lp, top_tok, top_ix = (
        t.contiguous() for t in (node, grow, score, step, top_lp, top_tok, top_ix)
    )
    if b:
        _push_kernel[(b,)](
            f_score, f_item, f_logp, node, grow.view(torch.uint8), score, step, top_lp, top_tok, top_ix,
            w, c, b, pool_size, f_score.stride(0), f_item.stride(0), f_logp.stride(0),
            BLOCK_W=next_pow2(w, 2), BLOCK_C=next_pow2(c, 2), num_warps=4, **pdl_launch(f_score.device),
        )  # fmt: skip


@triton.jit
def _node_inputs_lanes(
    i, b, slot, parent, cand, ok,
    visible, prefix, cand_x, cand_qkv, k_buf, v_buf, x_out, q_out, mask_out,
    P, S_TOT, D, HD,
    stride_vb, stride_vs, stride_cxb, stride_cxr, stride_cqb, stride_cqr,
    stride_kb, stride_kh, stride_ks, stride_vvb, stride_vvh, stride_vvs,
    BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """The lanes' nodes (vectors: step index i, slot, parent or -1, candidate row; a lane where ok is False does
    nothing) of batch row b: their visibility rows, input rows, first-block q and K/V columns. All lanes in
    one 2-D block, so their loads go out together (a lane's parent is never a lane of the same step)."""
    # visibility: the parent's row (prefix + its ancestors-or-self), or the prefix alone; plus itself
    o_s = tl.arange(0, BLOCK_S)[None, :]
    m_s = (o_s < S_TOT) & ok[:, None]
    row = tl.load(visible + b * stride_vb + tl.maximum(parent, 0)[:, None] * stride_vs + o_s, mask=m_s, other=0)
    pre = tl.load(prefix + o_s, mask=m_s, other=0)
    row = tl.where(parent[:, None] >= 0, row, pre)
    row = tl.where(o_s == P + slot[:, None], 1, row)
    tl.store(visible + b * stride_vb + slot[:, None] * stride_vs + o_s, row, mask=m_s)
    tl.store(mask_out + i[:, None] * S_TOT + o_s, row, mask=m_s)  # what the node's attention sees
    # the input row and the first block's q / k / v from the candidate table
    o_d = tl.arange(0, BLOCK_D)[None, :]
    m_d = (o_d < D) & ok[:, None]
    x = tl.load(cand_x + b * stride_cxb + cand[:, None] * stride_cxr + o_d, mask=m_d)
    tl.store(x_out + i[:, None] * D + o_d, x, mask=m_d)
    p_qkv = cand_qkv + b * stride_cqb + cand[:, None] * stride_cqr + o_d
    tl.store(q_out + i[:, None] * D + o_d, tl.load(p_qkv, mask=m_d), mask=m_d)
    head, j = o_d // HD, o_d % HD
    col = (P + slot)[:, None]
    tl.store(k_buf + b * stride_kb + head * stride_kh + col * stride_ks + j, tl.load(p_qkv + D, mask=m_d), mask=m_d)
    tl.store(v_buf + b * stride_vvb + head * stride_vvh + col * stride_vvs + j, tl.load(p_qkv + 2 * D, mask=m_d),
             mask=m_d)  # fmt: skip


@triton.jit
def _node_inputs_kernel(
    step, visible, prefix, cand_x, cand_qkv, k_buf, v_buf, x_out, q_out, mask_out,
    W, B, P, S_TOT, D, HD,
    stride_vb, stride_vs, stride_cxb, stride_cxr, stride_cqb, stride_cqr,
    stride_kb, stride_kh, stride_ks, stride_vvb, stride_vvh, stride_vvs,
    BLOCK_W: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, PDL: tl.constexpr = False,
):  # fmt: skip
    if PDL:  # programmatic dependent launch: nothing is read before the wait
        pdl_wait()
    b = tl.program_id(0).to(tl.int64)  # batch row b: its w nodes of the step
    o_w = tl.arange(0, BLOCK_W)
    m_w = o_w < W
    i = b * W + o_w
    _node_inputs_lanes(
        i, b, tl.load(step + i, mask=m_w, other=0), tl.load(step + 2 * B * W + i, mask=m_w, other=-1),
        tl.load(step + 4 * B * W + i, mask=m_w, other=0), m_w,
        visible, prefix, cand_x, cand_qkv, k_buf, v_buf, x_out, q_out, mask_out, P, S_TOT, D, HD,
        stride_vb, stride_vs, stride_cxb, stride_cxr, stride_cqb, stride_cqr,
        stride_kb, stride_kh, stride_ks, stride_vvb, stride_vvh, stride_vvs, BLOCK_S, BLOCK_D,
    )  # fmt: skip


def node_inputs(
    step: torch.Tensor,  # [6, B, w] int64: slot, token, parent, depth, candidate row, pool row
    visible: torch.Tensor,  # [B, S, P + S] bool (row `slot` written)
    prefix_mask: torch.Tensor,  # [P + S] bool
    cand_x: torch.Tensor,  # [B, R, d]
    cand_qkv: torch.Tensor,  # [B, R, 3 d]
    k_buf: torch.Tensor,  # [L, B, H, P + S, hd]: the blocks' K (layer `layer`, column P + slot written)
    v_buf: torch.Tensor,  # [L, B, H, P + S, hd]
    layer: int,  # the block whose q/k/v the candidate table holds (the first)
    prefix_len: int,  # P
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The step's nodes' visibility rows and K/V of block `layer` written; their input rows x [B, w, d],
    block-`layer` q [B, w, d] (heads concatenated) and visibility rows [B, w, P + S] bool returned. The whole
    [L, ...] buffers are arguments so that the custom op (`weaver.kernels.weaver_frontier`) mutates its inputs,
    not views of them."""
    check_device(step, visible, prefix_mask, cand_x, cand_qkv, k_buf, v_buf)
    _, b, w = step.shape
    outs, args, blocks = _inputs_args(b, w, visible, prefix_mask, cand_x, cand_qkv, k_buf, v_buf, layer, prefix_len)
    if b * w:
        ptrs, ints, strides = args
        _node_inputs_kernel[(b,)](
            step.contiguous(), *ptrs, w, b, *ints, *strides, BLOCK_W=next_pow2(w, 2), **blocks, num_warps=4,
            **pdl_launch(step.device),
        )  # fmt: skip
    return outs


def _inputs_args(b, w, visible, prefix_mask, cand_x, cand_qkv, k_buf, v_buf, layer, prefix_len) -> tuple:
    """Checked node-inputs arguments: the outputs (x, q, mask), the kernel's (pointers, sizes, strides) and
    its block sizes."""
    k_buf, v_buf = k_buf[layer], v_buf[layer]
    d = cand_x.shape[2]
    h, s_tot, hd = k_buf.shape[1], k_buf.shape[2], k_buf.shape[3]
    if cand_qkv.shape[2] != 3 * d or h * hd != d or v_buf.shape != k_buf.shape or visible.shape[2] != s_tot:
        raise ValueError(
            "node_inputs: cand_x [B, R, d], cand_qkv [B, R, 3d], k/v [B, H, P+S, d/H], visible [B, S, P+S]"
        )
    if any(t.stride(-1) != 1 for t in (visible, cand_x, cand_qkv, k_buf, v_buf)):
        raise ValueError("node_inputs: unit stride along the last dim")
    x = torch.empty(b, w, d, dtype=cand_x.dtype, device=cand_x.device)
    q = torch.empty(b, w, d, dtype=cand_qkv.dtype, device=cand_x.device)
    mask = torch.empty(b, w, s_tot, dtype=torch.bool, device=cand_x.device)
    ptrs = (visible.view(torch.uint8), prefix_mask.view(torch.uint8), cand_x, cand_qkv, k_buf, v_buf, x, q,
            mask.view(torch.uint8))  # fmt: skip
    strides = (visible.stride(0), visible.stride(1), cand_x.stride(0), cand_x.stride(1), cand_qkv.stride(0),
               cand_qkv.stride(1), k_buf.stride(0), k_buf.stride(1), k_buf.stride(2), v_buf.stride(0),
               v_buf.stride(1), v_buf.stride(2))  # fmt: skip
    blocks = dict(BLOCK_S=next_pow2(s_tot, 16), BLOCK_D=next_pow2(d, 16))
    return (x, q, mask), (ptrs, (prefix_len, s_tot, d, hd), strides), blocks
