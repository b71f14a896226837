"""The device weaver builder's bookkeeping per adapter step, in tensor ops: pop, node inputs, push (DESIGN §8).

    step, node, grow, score = frontier_pop(f_score, f_item, f_logp, count, nodes, logps, valid, n, depth, w)
    x, q, seen = node_inputs(visible, cand_x, cand_qkv, k_buf, v_buf, slot, parent, cand, 0, P)
    ... the adapter's block(s) and scoring tail: each node's top-c children (log p, token, candidate row) ...
    frontier_push(f_score, f_item, f_logp, node, grow, score, depth, top_lp, top_tok, top_cand)

The frontier of a batch row is a fixed set of F columns plus a sink column F (what a dropped child is written
to; never read): score [B, F + 1] float64 (-inf = empty), item [B, F + 1, 4] long (parent node, token, depth,
candidate-table row), logp [B, F + 1] float32. The children of node i own columns i*c .. i*c + c - 1, so a
push never collides with an entry still waiting. The tree so far is nodes [B, N + w, 4] (same four fields),
logps and valid [B, N + w], node i in column i; columns N .. N + w - 1 are scratch for popped entries that
are not taken; count [B] is the number of non-root nodes.

Plain torch, no host sync (CUDA-graph capturable). `weaver.kernels.triton.weaver_frontier` does the pop and
the node inputs in one launch, and `weaver.kernels.triton.pool_top` the push inside the scoring tail, with
these results (ties in the pop go to the lowest column, as `top_columns` does).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["frontier_pop", "frontier_push", "node_inputs", "node_visibility", "rotate_qk", "top_columns"]

TopK = Callable[[torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]]
_NEG_INF = float("-inf")


def top_columns(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k largest entries of each row of x [R, F], descending, ties to the lowest column (what the Triton
    pop selects): values [R, k] and columns [R, k]."""
    values, columns = torch.sort(x, dim=-1, descending=True, stable=True)
    return values[:, :k], columns[:, :k]


def frontier_pop(
    f_score: torch.Tensor,  # [B, F + 1] float64 (the taken entries emptied)
    f_item: torch.Tensor,  # [B, F + 1, 4] long
    f_logp: torch.Tensor,  # [B, F + 1] float32
    count: torch.Tensor,  # [B] long: non-root nodes so far (updated)
    nodes: torch.Tensor,  # [B, N + w, 4] long (written: the taken entries, and scratch columns N..)
    logps: torch.Tensor,  # [B, N + w] float32 (written)
    valid: torch.Tensor,  # [B, N + w] bool (written)
    n: int,  # N: nodes per row, root included
    depth: int,  # D': nodes at this depth are not grown
    w: int,  # entries popped a step
    topk: TopK = top_columns,  # the row selection (the builder passes its top-k dispatch)
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One pop round: the best w entries of each row, of which the first min(w, N - 1 - count) finite ones
    become nodes count + 1, count + 2, ... (in score order).

    Returns the step's inputs [6, B, w] (slot, token, parent, depth, candidate row, children's pool row
    min(depth, D' - 1)), padded where a node does not grow (scratch slot N + lane, token 0, no parent, depth
    0, row 0, pool 0); node ids [B, w]; grow [B, w] bool (taken, above depth D', and the row not full after
    the pop); the popped scores [B, w] float64.
    """
    b, dev = f_score.shape[0], f_score.device
    lane = torch.arange(w, device=dev)  # [w]
    rows = torch.arange(b, device=dev)[:, None]  # [B, 1]
    score, col = topk(f_score[:, :-1], w)  # [B, w], descending; the sink column is never a candidate
    take = (score > _NEG_INF) & (lane < (n - 1) - count[:, None])  # [B, w]: a prefix of each row
    f_score.scatter_(1, col, torch.where(take, _NEG_INF, score))
    item = f_item.gather(1, col[..., None].expand(-1, -1, 4))  # [B, w, 4]
    node = count[:, None] + 1 + lane  # [B, w]
    scratch = n + lane
    dst = torch.where(take, node, scratch)
    nodes[rows, dst] = item
    logps[rows, dst] = f_logp.gather(1, col)
    valid[rows, dst] = take
    count += take.sum(1)
    parent, token, node_depth, cand = item.unbind(-1)
    grow = take & (node_depth < depth) & (count < n - 1)[:, None]  # a full row's children are never needed
    pad_depth = torch.where(grow, node_depth, 0)
    step = torch.stack([
        torch.where(grow, node, scratch), torch.where(grow, token, 0), torch.where(grow, parent, -1), pad_depth,
        torch.where(grow, cand, 0), pad_depth.clamp(max=depth - 1),
    ])  # fmt: skip
    return step, node, grow, score


def node_visibility(
    visible: torch.Tensor,  # [B, S, P + S] bool (rows `slot` written)
    slot: torch.Tensor,  # [B, w] long: the nodes' slots
    parent: torch.Tensor,  # [B, w] long: their parents' slots, -1 for a root
    prefix_len: int,  # P
) -> torch.Tensor:
    """Each node's visibility row: its parent's (prefix + the parent's ancestors-or-self) or the prefix alone,
    plus itself; written into `visible` and returned [B, w, P + S]. The prefix alone is columns < P, computed
    where it is read: a stored mask, recomputed by inductor before each custom op that read it, cost the
    compiled build a launch a step."""
    b, w = slot.shape
    rows = torch.arange(b, device=slot.device)[:, None].expand(b, w)
    prefix = torch.arange(visible.shape[2], device=visible.device) < prefix_len
    seen = torch.where(parent[..., None] >= 0, visible[rows, parent.clamp(min=0)], prefix)
    seen = seen.scatter(2, (prefix_len + slot)[..., None], True)
    visible[rows, slot] = seen
    return seen


def node_inputs(
    visible: torch.Tensor,  # [B, S, P + S] bool
    cand_x: torch.Tensor,  # [B, R, d]: input rows of the root (row 0) and every pool candidate
    cand_qkv: torch.Tensor,  # [B, R, 3 d]: their q | k | v in block `layer`
    k_buf: torch.Tensor,  # [L, B, H, P + S, hd] (layer `layer`, columns P + slot written)
    v_buf: torch.Tensor,  # [L, B, H, P + S, hd]
    slot: torch.Tensor,  # [B, w] long
    parent: torch.Tensor,  # [B, w] long, -1 for a root
    cand: torch.Tensor,  # [B, w] long: the nodes' rows in the table
    layer: int,  # the block whose q/k/v the table holds (the first)
    prefix_len: int,  # P
    rope: tuple[torch.Tensor, torch.Tensor] | None = None,  # cos, sin [positions, hd]: rotate q, k here
    position: torch.Tensor | None = None,  # [B, w] long: the nodes' RoPE positions (with `rope`)
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A step's nodes from the candidate table: visibility rows written (`node_visibility`), block-`layer` K/V
    written into columns P + slot; returns input rows x [B, w, d], q [B, w, d] (heads concatenated) and the
    visibility rows [B, w, P + S]. With `rope` the table holds unrotated rows (the vocabulary's, by token) and
    q, k are rotated here at `position`, in float32."""
    b, w = slot.shape
    d = cand_x.shape[2]
    heads, head_dim = k_buf.shape[2], k_buf.shape[4]
    seen = node_visibility(visible, slot, parent, prefix_len)
    rows = torch.arange(b, device=slot.device)[:, None].expand(b, w)
    x = cand_x[rows, cand]  # [B, w, d]
    qkv = cand_qkv[rows, cand]  # [B, w, 3 d]
    if rope is not None:
        qkv = rotate_qk(qkv, heads, rope[0][position], rope[1][position])
    col = prefix_len + slot
    k_buf[layer][rows, :, col] = qkv[..., d : 2 * d].view(b, w, heads, head_dim)
    v_buf[layer][rows, :, col] = qkv[..., 2 * d :].view(b, w, heads, head_dim)
    return x, qkv[..., :d], seen


def rotate_qk(qkv: torch.Tensor, heads: int, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rows q | k | v [B, w, 3 d] with q and k rotate-half rotated (cos, sin [B, w, hd]) in float32, v as is: the
    node-input kernel's arithmetic, so that the two agree bit for bit on float32 inputs."""
    b, w, _ = qkv.shape
    parts = qkv.view(b, w, 3, heads, -1)
    qk = parts[:, :, :2].float()
    half = qk.shape[-1] // 2
    pair = torch.cat((-qk[..., half:], qk[..., :half]), dim=-1)  # rotate_half: [-x2, x1]
    cos, sin = (t.float()[:, :, None, None] for t in (cos, sin))
    qk = (qk * cos + pair * sin).to(qkv.dtype)
    return torch.cat((qk, parts[:, :, 2:]), dim=2).view(b, w, -1)


def frontier_push(
    f_score: torch.Tensor,  # [B, F + 1] float64 (written)
    f_item: torch.Tensor,  # [B, F + 1, 4] long (written)
    f_logp: torch.Tensor,  # [B, F + 1] float32 (written)
    node: torch.Tensor,  # [B, w] long: the expanded nodes' ids
    grow: torch.Tensor,  # [B, w] bool: those whose children are pushed
    score: torch.Tensor,  # [B, w] float64: their cumulative scores
    depth: torch.Tensor,  # [B, w] long: their depths (the children sit one deeper)
    top_lp: torch.Tensor,  # [B, w, c] float32: the children's log-probs
    top_tok: torch.Tensor,  # [B, w, c] long: their tokens
    top_cand: torch.Tensor,  # [B, w, c] long: their candidate-table rows
) -> None:
    """Each grown node's c children into its columns node * c + j: score + log p (float64), log p and the
    item; children with a -inf score are dropped (into the sink column)."""
    b, w, c = top_lp.shape
    child_score = score[..., None] + top_lp.double()  # [B, w, c]
    keep = grow[..., None] & (child_score > _NEG_INF)
    own = node[..., None] * c + torch.arange(c, device=node.device)
    col = torch.where(keep, own, f_score.shape[1] - 1).view(b, w * c)
    item = torch.stack([node[..., None].expand(b, w, c), top_tok, (depth + 1)[..., None].expand(b, w, c), top_cand],
                       dim=-1)  # fmt: skip
    f_score.scatter_(1, col, child_score.view(b, w * c))
    f_item.scatter_(1, col[..., None].expand(b, w * c, 4), item.view(b, w * c, 4))
    f_logp.scatter_(1, col, top_lp.reshape(b, w * c))
