"""The device weaver builder's search state and its two step loops (DESIGN §8).

Per row the frontier is a fixed tensor of F = max(N * c, w) candidate children plus a sink column: the
children of node i live in columns i*c .. i*c + c - 1 (a node is expanded at most once, so a column is
written once); the tree so far sits in fixed node buffers (`weaver.ops.weaver_frontier` has the layout). A
pop round takes each row's best min(w, budget' - count) entries as the next nodes, runs ONE batched adapter
step for those that grow (the others go to scratch slots N .. N + w - 1, as the reference pads its calls)
and pushes each grown node's top-c children. The last round pops only: no round after it would read its
children.

Two loops do that, with the same results:

- `grow_reference`: the torch reference of the bookkeeping (`weaver.ops.weaver_frontier`) around
  `WeaverAdapter.step_top`; it runs with kernels="torch", on a CPU, and wherever the round has no
  candidate table.
- `grow_kernels`: where the kernels run and the round has the candidate table, each step is one launch for
  the pop and the nodes' inputs (`frontier_pop_inputs`), the block(s), and the scoring tail with the push
  inside its second launch (`WeaverAdapter.step_top_prepared`): ~20 small kernels a step fewer.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from weaver.kernels.topk import topk_last
from weaver.kernels.weaver_frontier import frontier_pop_inputs
from weaver.ops.weaver_frontier import frontier_pop, frontier_push
from weaver.options import RuntimeOptions
from weaver.speculative.tree import DraftTree
from weaver.speculative.weaver import WeaverAdapter, WeaverRound

__all__ = ["Frontier", "expand_root", "grow_kernels", "grow_reference"]

_NEG_INF = float("-inf")


@dataclass
class Frontier:
    """One build's search state: the frontier of candidate children and the tree so far (all per batch row)."""

    score: torch.Tensor  # [B, F + 1] float64: entries' cumulative scores, -inf = empty; column F: the push sink
    item: torch.Tensor  # [B, F + 1, 4] long: parent node, token, depth, candidate-table row
    logp: torch.Tensor  # [B, F + 1] float32: log p of the entry under its parent
    nodes: torch.Tensor  # [B, N + w, 4] long: the tree's nodes (same four fields), node i in column i
    logps: torch.Tensor  # [B, N + w] float32: their log p
    valid: torch.Tensor  # [B, N + w] bool
    count: torch.Tensor  # [B] long: non-root nodes so far
    n: int  # N: nodes per row, root included
    depth: int  # D': the deepest node (not grown)
    width: int  # w: entries popped a step

    @classmethod
    def empty(cls, root: torch.Tensor, n: int, width: int, c: int, depth: int) -> Frontier:
        """No entries yet; the tree holds the root (node 0)."""
        b, dev = root.shape[0], root.device
        size = max(n * c, width)
        nodes = torch.zeros(b, n + width, 4, dtype=torch.long, device=dev)
        nodes[:, :, 0] = -1
        nodes[:, 0, 1] = root
        valid = torch.zeros(b, n + width, dtype=torch.bool, device=dev)
        valid[:, 0] = True
        return cls(
            score=torch.full((b, size + 1), _NEG_INF, dtype=torch.float64, device=dev),
            item=torch.zeros(b, size + 1, 4, dtype=torch.long, device=dev),
            logp=torch.zeros(b, size + 1, dtype=torch.float32, device=dev),
            nodes=nodes,
            logps=torch.zeros(b, n + width, dtype=torch.float32, device=dev),
            valid=valid,
            count=torch.zeros(b, dtype=torch.long, device=dev),
            n=n,
            depth=depth,
            width=width,
        )

    def pop_args(self) -> tuple:
        """The pop's leading arguments, in the order of `weaver.ops.weaver_frontier.frontier_pop` and its kernel."""
        return (self.score, self.item, self.logp, self.count, self.nodes, self.logps, self.valid, self.n, self.depth,
                self.width)  # fmt: skip

    def push_args(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The push's leading arguments: the frontier's three buffers."""
        return self.score, self.item, self.logp

    def tree(self) -> DraftTree:
        """The tree built so far: [B, N] (nodes in pop order; rows that ran dry padded), each field packed (the
        verify's kernels take strides, but every later reader of a packed field is simpler and no slower)."""
        parents, tokens, depths, _ = self.nodes[:, : self.n].permute(2, 0, 1).contiguous().unbind(0)
        return DraftTree(tokens, parents, depths, self.valid[:, : self.n], self.logps[:, : self.n])


def expand_root(adapter: WeaverAdapter, state: WeaverRound, frontier: Frontier, c: int) -> None:
    """The first adapter step: the root (lane 0; the other lanes pad to scratch slots) and its top-c children."""
    b, w = frontier.count.shape[0], frontier.width
    dev = frontier.score.device
    lane = torch.arange(w, device=dev)
    first = (lane == 0).expand(b, w)
    zeros = torch.zeros(b, w, dtype=torch.long, device=dev)
    slot = torch.where(first, 0, frontier.n + lane)
    token = torch.where(first, frontier.nodes[:, :w, 1], 0)
    top_lp, top_tok, top_cand = adapter.step_top(state, slot, token, zeros - 1, zeros, c, zeros)
    score = torch.zeros(b, w, dtype=torch.float64, device=dev)
    frontier_push(*frontier.push_args(), zeros, first, score, zeros, top_lp, top_tok, top_cand)


def grow_reference(
    adapter: WeaverAdapter, state: WeaverRound, frontier: Frontier, rounds: int, c: int, options: RuntimeOptions
) -> None:
    """`rounds` pop rounds with the torch bookkeeping (the row selection through `topk_last`)."""
    topk = functools.partial(topk_last, options=options)
    for i in range(rounds):
        # 1) pop: the best min(w, budget' - count) entries, appended at count+1, count+2, ...
        step, node, grow, score = frontier_pop(*frontier.pop_args(), topk=topk)
        if i == rounds - 1:  # no later round pops this one's children: its adapter step would be dead work
            break
        # 2) grow: one adapter step for the popped nodes above depth D' of rows that still have room
        slot, token, parent, depth, cand, _ = step
        top_lp, top_tok, top_cand = adapter.step_top(state, slot, token, parent, depth, c, cand)
        frontier_push(*frontier.push_args(), node, grow, score, depth, top_lp, top_tok, top_cand)


def grow_kernels(
    adapter: WeaverAdapter, state: WeaverRound, frontier: Frontier, rounds: int, c: int, options: RuntimeOptions
) -> None:
    """`rounds` pop rounds as two fused launches around the adapter's block(s) (module docstring); the last
    round pops alone, as in `grow_reference`."""
    for i in range(rounds):
        step, node, grow, score, *inputs = frontier_pop_inputs(
            *frontier.pop_args(), state.visible, state.cand_x, state.cand_qkv, state.k, state.v,
            0, state.prefix_len, options, state.cand_rope,
        )  # fmt: skip
        if i == rounds - 1:
            break
        adapter.step_top_prepared(state, step, c, inputs, push=(*frontier.push_args(), node, grow, score))
