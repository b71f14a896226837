"""The device weaver builder's pop and its nodes' inputs as one custom op (one Triton launch a step).

    step, node, grow, score, x, q, mask = frontier_pop_inputs(f_score, ..., w, visible, ..., prefix_len, options)

The launch (`weaver.kernels.triton.weaver_frontier`) replaces the ~20 small kernels of the torch reference,
`weaver.ops.weaver_frontier.frontier_pop` followed by `node_inputs` on the popped lanes, which runs where
`use_kernel(options, f_score)` says no; the tests compare the two. The push of the step's children happens in
the scoring tail (`weaver.kernels.pool_top.fused_pool_top_push`). The op mutates the builder's buffers in
place (`mutates_args`), so a torch.compile'd build stage orders it correctly; eager calls launch the kernel
directly. This module imports without triton: the kernel loads on first use.
"""

from __future__ import annotations

import torch

from weaver.kernels.dispatch import launch, use_kernel
from weaver.ops.weaver_frontier import frontier_pop, node_inputs
from weaver.options import RuntimeOptions

__all__ = ["frontier_pop_inputs", "frontier_pop_inputs_op"]

_MUTATES = ("f_score", "count", "nodes", "logps", "valid", "visible", "k_buf", "v_buf")
_Popped = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


@torch.library.custom_op("weaver::frontier_pop_inputs", mutates_args=_MUTATES)
def frontier_pop_inputs_op(
    f_score: torch.Tensor, f_item: torch.Tensor, f_logp: torch.Tensor, count: torch.Tensor, nodes: torch.Tensor,
    logps: torch.Tensor, valid: torch.Tensor, n: int, depth: int, w: int, visible: torch.Tensor, cand_x: torch.Tensor,
    cand_qkv: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor,
    layer: int, prefix_len: int, rope_cos: torch.Tensor | None, rope_sin: torch.Tensor | None,
) -> _Popped:
    """`weaver.kernels.triton.weaver_frontier.frontier_pop_inputs` as a custom op."""
    from weaver.kernels.triton.weaver_frontier import frontier_pop_inputs as kernel

    return kernel(f_score, f_item, f_logp, count, nodes, logps, valid, n, depth, w, visible, cand_x,
                  cand_qkv, k_buf, v_buf, layer, prefix_len, rope_cos, rope_sin)  # fmt: skip


@frontier_pop_inputs_op.register_fake
def _frontier_pop_inputs_fake(f_score, f_item, f_logp, count, nodes, logps, valid, n, depth, w, visible,
                              cand_x, cand_qkv, k_buf, v_buf, layer, prefix_len, rope_cos,
                              rope_sin):  # fmt: skip
    b, d = f_score.shape[0], cand_x.shape[2]
    empty = f_score.new_empty
    return (empty(6, b, w, dtype=torch.int64), empty(b, w, dtype=torch.int64), empty(b, w, dtype=torch.bool),
            empty(b, w, dtype=torch.float64), cand_x.new_empty(b, w, d), cand_qkv.new_empty(b, w, d),
            visible.new_empty(b, w, visible.shape[2]))  # fmt: skip


def frontier_pop_inputs(
    f_score: torch.Tensor,  # [B, F + 1] float64: the frontier (module docstring of weaver.ops.weaver_frontier)
    f_item: torch.Tensor,  # [B, F + 1, 4] int64
    f_logp: torch.Tensor,  # [B, F + 1] float32
    count: torch.Tensor,  # [B] int64 (updated)
    nodes: torch.Tensor,  # [B, N + w, 4] int64 (written)
    logps: torch.Tensor,  # [B, N + w] float32 (written)
    valid: torch.Tensor,  # [B, N + w] bool (written)
    n: int,  # N
    depth: int,  # D'
    w: int,
    visible: torch.Tensor,  # [B, S, P + S] bool: the adapter round's visibility (rows of the step's slots written)
    cand_x: torch.Tensor,  # [B, R, d] the candidate table's input rows
    cand_qkv: torch.Tensor,  # [B, R, 3 d] and first-block q | k | v
    k_buf: torch.Tensor,  # [L, B, H, P + S, hd] (layer `layer` written)
    v_buf: torch.Tensor,
    layer: int,
    prefix_len: int,  # P
    options: RuntimeOptions,
    rope: tuple[torch.Tensor, torch.Tensor] | None = None,  # cos, sin [>= D' + 1, hd]: a vocabulary table
) -> _Popped:
    """`frontier_pop`'s (step [6, B, w], node [B, w], grow [B, w], score [B, w]), then `node_inputs`' (x [B, w, d],
    q [B, w, d], visibility rows [B, w, P + S]) for the step's slots, parents and candidate rows. With `rope`
    the tables are the vocabulary's (rows by token, q / k unrotated) and the nodes' q / k are rotated at
    their positions depth + 1 (`WeaverAdapter.node_positions`; a grown node sits above D')."""
    pop = (f_score, f_item, f_logp, count, nodes, logps, valid, n, depth, w)
    inputs = (visible, cand_x, cand_qkv, k_buf, v_buf)
    cos, sin = rope if rope is not None else (None, None)
    if use_kernel(options, f_score):
        return launch(frontier_pop_inputs_op, "weaver.kernels.triton.weaver_frontier", "frontier_pop_inputs", *pop,
                      *inputs, layer, prefix_len, cos, sin)  # fmt: skip
    step, node, grow, score = frontier_pop(*pop)
    if rope is None:
        return (step, node, grow, score, *node_inputs(*inputs, step[0], step[2], step[4], layer, prefix_len))
    slot, token, parent, node_depth = step[:4]
    return (step, node, grow, score, *node_inputs(*inputs, slot, parent, token, layer, prefix_len, rope,
                                                  node_depth + 1))  # fmt: skip
