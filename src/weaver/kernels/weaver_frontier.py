"""The device weaver builder's per-step bookkeeping (pop, node inputs, push) as custom ops on CUDA.

    if frontier_kernels_ready(x): step, node, grow, score = frontier_pop(...)   # etc.

Three Triton launches (`weaver.kernels.triton.weaver_frontier`) replace ~20 small kernels of the tensor-op
path in `weaver.speculative.weaver_builder_device`, which stays the reference (CPU, and CUDA without the
candidate table); the builder's tests run both. The ops mutate the builder's buffers in place
(`mutates_args`), so a torch.compile'd build stage orders them correctly; eager calls launch the kernels
directly. This module imports without triton: the kernels load on first use.
"""

from __future__ import annotations

import torch

from weaver.kernels.dispatch import launch, triton_ready

__all__ = ["frontier_kernels_ready", "frontier_pop", "frontier_pop_inputs", "frontier_push", "node_inputs"]

_MODULE = "weaver.kernels.triton.weaver_frontier"


@torch.library.custom_op("weaver::frontier_pop", mutates_args=("f_score", "count", "nodes", "logps", "valid"))
def frontier_pop_op(
    f_score: torch.Tensor, f_item: torch.Tensor, f_logp: torch.Tensor, count: torch.Tensor, nodes: torch.Tensor,
    logps: torch.Tensor, valid: torch.Tensor, n: int, depth: int, w: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`weaver.kernels.triton.weaver_frontier.frontier_pop` as a custom op."""
    from weaver.kernels.triton.weaver_frontier import frontier_pop as pop

    return pop(f_score, f_item, f_logp, count, nodes, logps, valid, n, depth, w)


@frontier_pop_op.register_fake
def _frontier_pop_fake(f_score, f_item, f_logp, count, nodes, logps, valid, n, depth, w):
    b = f_score.shape[0]
    empty = f_score.new_empty
    return (empty(6, b, w, dtype=torch.int64), empty(b, w, dtype=torch.int64), empty(b, w, dtype=torch.bool),
            empty(b, w, dtype=torch.float64))  # fmt: skip


_POP_INPUTS_MUTATES = ("f_score", "count", "nodes", "logps", "valid", "visible", "k_buf", "v_buf")


@torch.library.custom_op("weaver::frontier_pop_inputs", mutates_args=_POP_INPUTS_MUTATES)
def frontier_pop_inputs_op(
    f_score: torch.Tensor, f_item: torch.Tensor, f_logp: torch.Tensor, count: torch.Tensor, nodes: torch.Tensor,
    logps: torch.Tensor, valid: torch.Tensor, n: int, depth: int, w: int, visible: torch.Tensor,
    prefix_mask: torch.Tensor, cand_x: torch.Tensor, cand_qkv: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor,
    layer: int, prefix_len: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`frontier_pop(..., inputs=(visible, ..., prefix_len))` as a custom op: the pop and the node inputs."""
    from weaver.kernels.triton.weaver_frontier import frontier_pop_inputs as pop_inputs

    return pop_inputs(f_score, f_item, f_logp, count, nodes, logps, valid, n, depth, w, visible, prefix_mask, cand_x,
                      cand_qkv, k_buf, v_buf, layer, prefix_len)  # fmt: skip


@frontier_pop_inputs_op.register_fake
def _frontier_pop_inputs_fake(f_score, f_item, f_logp, count, nodes, logps, valid, n, depth, w, visible,
                              prefix_mask, cand_x, cand_qkv, k_buf, v_buf, layer, prefix_len):  # fmt: skip
    b = f_score.shape[0]
    d = cand_x.shape[2]
    popped = _frontier_pop_fake(f_score, f_item, f_logp, count, nodes, logps, valid, n, depth, w)
    return (*popped, cand_x.new_empty(b, w, d), cand_qkv.new_empty(b, w, d), visible.new_empty(b, w, visible.shape[2]))


@torch.library.custom_op("weaver::frontier_push", mutates_args=("f_score", "f_item", "f_logp"))
def frontier_push_op(
    f_score: torch.Tensor, f_item: torch.Tensor, f_logp: torch.Tensor, node_ids: torch.Tensor, grow: torch.Tensor,
    score: torch.Tensor, step: torch.Tensor, top_lp: torch.Tensor, top_tok: torch.Tensor, top_ix: torch.Tensor,
    pool_size: int,
) -> None:
    """`weaver.kernels.triton.weaver_frontier.frontier_push` as a custom op (no argument may be called `node`:
    inductor's post-grad pass passes its own `node` keyword next to the op's arguments)."""
    from weaver.kernels.triton.weaver_frontier import frontier_push as push

    push(f_score, f_item, f_logp, node_ids, grow, score, step, top_lp, top_tok, top_ix, pool_size)


@frontier_push_op.register_fake
def _frontier_push_fake(f_score, f_item, f_logp, node_ids, grow, score, step, top_lp, top_tok, top_ix, pool_size):
    return None


@torch.library.custom_op("weaver::node_inputs", mutates_args=("visible", "k_buf", "v_buf"))
def node_inputs_op(
    step: torch.Tensor, visible: torch.Tensor, prefix_mask: torch.Tensor, cand_x: torch.Tensor,
    cand_qkv: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor, layer: int, prefix_len: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`weaver.kernels.triton.weaver_frontier.node_inputs` as a custom op."""
    from weaver.kernels.triton.weaver_frontier import node_inputs as inputs

    return inputs(step, visible, prefix_mask, cand_x, cand_qkv, k_buf, v_buf, layer, prefix_len)


@node_inputs_op.register_fake
def _node_inputs_fake(step, visible, prefix_mask, cand_x, cand_qkv, k_buf, v_buf, layer, prefix_len):
    _, b, w = step.shape
    d = cand_x.shape[2]
    return cand_x.new_empty(b, w, d), cand_qkv.new_empty(b, w, d), visible.new_empty(b, w, visible.shape[2])


def frontier_kernels_ready(t: torch.Tensor) -> bool:
    """The Triton bookkeeping applies: t on CUDA and triton importable."""
    return t.is_cuda and triton_ready()


def frontier_pop(*args):
    """See `weaver.kernels.triton.weaver_frontier.frontier_pop` (same arguments)."""
    return launch(frontier_pop_op, _MODULE, "frontier_pop", *args)


def frontier_pop_inputs(*args):
    """`frontier_pop` and `node_inputs` in one launch: frontier_pop's arguments, then node_inputs' without the
    step (see `weaver.kernels.triton.weaver_frontier.frontier_pop`); the pop's four results, then (x, q, mask)."""
    return launch(frontier_pop_inputs_op, _MODULE, "frontier_pop_inputs", *args)


def frontier_push(*args) -> None:
    """See `weaver.kernels.triton.weaver_frontier.frontier_push` (same arguments)."""
    launch(frontier_push_op, _MODULE, "frontier_push", *args)


def node_inputs(*args):
    """See `weaver.kernels.triton.weaver_frontier.node_inputs` (same arguments)."""
    return launch(node_inputs_op, _MODULE, "node_inputs", *args)
