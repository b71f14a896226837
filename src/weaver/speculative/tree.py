"""DraftTree: a batch of proposal trees as five [B, N] tensors (DESIGN §1).

Conventions every builder, verifier and cache relies on:

* node 0 is the root: the last committed token the target has not processed yet (the previous
  round's bonus token); `parents[:, 0] = -1`, `depth[:, 0] = 0`, `draft_logprobs[:, 0] = 0`;
* nodes are in topological order: `0 <= parents[b, i] < i` for every valid node i > 0;
* siblings (valid nodes with the same parent) carry distinct tokens;
* rows are padded to a common N with isolated pad nodes: `valid = False`, `parents = -1`,
  `depth = 0`, `tokens = 0`, `draft_logprobs = 0`; a pad node is nobody's ancestor and is never accepted;
* `draft_logprobs[b, i]` is the log-probability of node i's token under the builder's proposal at
  its parent (DDTree: log q_d(token); chain: log q_d(argmax)); traversal verification uses it;
* a tree's budget counts non-root nodes: `num_nodes - 1 <= budget`.

Methods on the hot path (`chain`, `root_only`, `pad_to`, `ancestor_mask`, `with_ancestors`) are
tensor-only, work on any device and do no host sync; `validate`, `children` and `from_parent_lists` read
on the host (tests and tree construction only).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from weaver.kernels.tree_structure import tree_ancestor_mask
from weaver.ops.tree import ancestor_mask as _ancestor_mask
from weaver.options import DEFAULT_OPTIONS, RuntimeOptions

__all__ = ["DraftTree"]


@dataclass(frozen=True)
class DraftTree:
    tokens: torch.Tensor  # [B, N] long: token of each node (root = last committed token)
    parents: torch.Tensor  # [B, N] long: parent node id, -1 for the root and pad nodes
    depth: torch.Tensor  # [B, N] long: 0 for the root (and pads), depth[parent] + 1 otherwise
    valid: torch.Tensor  # [B, N] bool: False on pad nodes
    draft_logprobs: torch.Tensor | None = None  # [B, N] float: log q(token | parent); 0 at root and pads
    ancestors: torch.Tensor | None = None  # [B, N, N] bool: the ancestor mask, when computed once (with_ancestors)

    def __post_init__(self) -> None:
        if self.tokens.dim() != 2 or self.tokens.shape[1] < 1:
            raise ValueError(f"tokens must be [B, N] with N >= 1, got shape {tuple(self.tokens.shape)}")
        shape = self.tokens.shape
        if self.draft_logprobs is None:
            object.__setattr__(
                self, "draft_logprobs", torch.zeros(shape, dtype=torch.float32, device=self.tokens.device)
            )
        for name in ("parents", "depth", "valid", "draft_logprobs"):
            t = getattr(self, name)
            if t.shape != shape:
                raise ValueError(f"{name} has shape {tuple(t.shape)}, tokens has {tuple(shape)}")
        if self.valid.dtype != torch.bool:
            raise ValueError(f"valid must be a bool tensor, got {self.valid.dtype}")
        if self.ancestors is not None and self.ancestors.shape != (*shape, shape[1]):
            raise ValueError(f"ancestors has shape {tuple(self.ancestors.shape)}, need {(*shape, shape[1])}")
        if not self.draft_logprobs.dtype.is_floating_point:
            raise ValueError(f"draft_logprobs must be floating point, got {self.draft_logprobs.dtype}")

    # ------------------------------------------------------------------ shape
    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]

    @property
    def size(self) -> int:
        """N, the padded number of nodes per row (root included)."""
        return self.tokens.shape[1]

    @property
    def device(self) -> torch.device:
        return self.tokens.device

    @property
    def num_nodes(self) -> torch.Tensor:
        """[B] long: valid nodes per row, root included (the budget used is num_nodes - 1)."""
        return self.valid.sum(-1)

    def max_depth(self) -> int:
        """Deepest valid node over the batch (host sync)."""
        return int(torch.where(self.valid, self.depth, 0).max())

    # ----------------------------------------------------------- construction
    @staticmethod
    def chain(
        root: torch.Tensor, drafts: torch.Tensor, draft_logprobs: torch.Tensor | None = None
    ) -> DraftTree:
        """The chain root -> drafts[:, 0] -> ... -> drafts[:, D-1].

        root: [B]; drafts, draft_logprobs: [B, D] (default 0).
        """
        if root.dim() != 1 or drafts.dim() != 2 or drafts.shape[0] != root.shape[0]:
            raise ValueError(
                f"need root [B] and drafts [B, D], got {tuple(root.shape)}, {tuple(drafts.shape)}"
            )
        B, D = drafts.shape
        dev = root.device
        tokens = torch.cat([root[:, None].long(), drafts.long()], dim=1)  # [B, D+1]
        node = torch.arange(D + 1, device=dev)
        parents = (node - 1).expand(B, D + 1).contiguous()  # [B, D+1]; parents[:, 0] = -1
        depth = node.expand(B, D + 1).contiguous()  # [B, D+1]
        valid = torch.ones(B, D + 1, dtype=torch.bool, device=dev)
        if draft_logprobs is None:
            draft_logprobs = torch.zeros(B, D, dtype=torch.float32, device=dev)
        if draft_logprobs.shape != drafts.shape:
            raise ValueError(f"draft_logprobs {tuple(draft_logprobs.shape)} != drafts {tuple(drafts.shape)}")
        lp = torch.cat([draft_logprobs.new_zeros(B, 1), draft_logprobs], dim=1)  # [B, D+1]
        ancestors = torch.ones(D + 1, D + 1, dtype=torch.bool, device=dev).tril().expand(B, D + 1, D + 1)
        return DraftTree(tokens, parents, depth, valid, lp, ancestors)

    @staticmethod
    def root_only(root: torch.Tensor) -> DraftTree:
        """A tree of one node per row (autoregressive decoding). root: [B]."""
        return DraftTree.chain(root, root.new_zeros(root.shape[0], 0))

    @staticmethod
    def from_parent_lists(
        parents: Sequence[Sequence[int]],
        tokens: Sequence[Sequence[int]],
        draft_logprobs: Sequence[Sequence[float]] | None = None,
        device: torch.device | str | None = None,
    ) -> DraftTree:
        """Batch of trees from Python lists (tests, literals); rows are padded to the longest; validated."""
        if len(parents) != len(tokens) or len(parents) == 0:
            raise ValueError(
                f"need as many parent lists as token lists (>= 1), got {len(parents)}, {len(tokens)}"
            )
        rows = []
        for b, (par, tok) in enumerate(zip(parents, tokens)):
            if len(par) != len(tok) or len(par) == 0:
                raise ValueError(f"row {b}: {len(par)} parents but {len(tok)} tokens (need equal, >= 1)")
            depth = []
            for i, p in enumerate(par):
                if i == 0:
                    if p != -1:
                        raise ValueError(f"row {b}: root parent must be -1, got {p}")
                    depth.append(0)
                elif not 0 <= p < i:
                    raise ValueError(f"row {b} node {i}: parent {p} not in [0, {i})")
                else:
                    depth.append(depth[p] + 1)
            lp = [0.0] * len(par) if draft_logprobs is None else [float(x) for x in draft_logprobs[b]]
            if len(lp) != len(par):
                raise ValueError(f"row {b}: {len(lp)} draft_logprobs for {len(par)} nodes")
            lp[0] = 0.0
            rows.append((list(par), list(tok), depth, lp))
        n = max(len(r[0]) for r in rows)
        pad = [
            (
                r[0] + [-1] * (n - len(r[0])),
                r[1] + [0] * (n - len(r[1])),
                r[2] + [0] * (n - len(r[2])),
                r[3] + [0.0] * (n - len(r[3])),
                [True] * len(r[0]) + [False] * (n - len(r[0])),
            )
            for r in rows
        ]
        tree = DraftTree(
            tokens=torch.tensor([r[1] for r in pad], dtype=torch.long, device=device),
            parents=torch.tensor([r[0] for r in pad], dtype=torch.long, device=device),
            depth=torch.tensor([r[2] for r in pad], dtype=torch.long, device=device),
            valid=torch.tensor([r[4] for r in pad], dtype=torch.bool, device=device),
            draft_logprobs=torch.tensor([r[3] for r in pad], dtype=torch.float32, device=device),
        )
        tree.validate()
        return tree

    def pad_to(self, n: int) -> DraftTree:
        """The same trees with N = n (isolated pad nodes appended). No host sync."""
        B, N = self.tokens.shape
        if n < N:
            raise ValueError(f"cannot pad a tree of {N} nodes to {n}")
        if n == N:
            return self
        extra = n - N

        def ext(t: torch.Tensor, value: float | int | bool) -> torch.Tensor:
            return torch.cat([t, t.new_full((B, extra), value)], dim=1)

        return DraftTree(
            tokens=ext(self.tokens, 0),
            parents=ext(self.parents, -1),
            depth=ext(self.depth, 0),
            valid=ext(self.valid, False),
            draft_logprobs=ext(self.draft_logprobs, 0.0),
        )

    @staticmethod
    def stack(trees: Sequence[DraftTree]) -> DraftTree:
        """Concatenate batches of trees along B, padding each to the largest N."""
        if len(trees) == 0:
            raise ValueError("stack needs at least one tree")
        n = max(t.size for t in trees)
        padded = [t.pad_to(n) for t in trees]
        dtype = functools.reduce(torch.promote_types, (t.draft_logprobs.dtype for t in padded))
        return DraftTree(
            tokens=torch.cat([t.tokens for t in padded]),
            parents=torch.cat([t.parents for t in padded]),
            depth=torch.cat([t.depth for t in padded]),
            valid=torch.cat([t.valid for t in padded]),
            draft_logprobs=torch.cat([t.draft_logprobs.to(dtype) for t in padded]),
        )

    def to(self, device: torch.device | str) -> DraftTree:
        return DraftTree(
            self.tokens.to(device),
            self.parents.to(device),
            self.depth.to(device),
            self.valid.to(device),
            self.draft_logprobs.to(device),
        )

    # -------------------------------------------------------------- structure
    def ancestor_mask(self) -> torch.Tensor:
        """Bool [B, N, N]: M[b, i, j] iff j is on the path root..i (diagonal included; pads: only self)."""
        return _ancestor_mask(self.parents) if self.ancestors is None else self.ancestors

    def with_ancestors(self, options: RuntimeOptions | None = None) -> DraftTree:
        """This tree carrying its ancestor mask, computed now (one Triton launch on CUDA where `options` allow):
        the verify pass and the accept rule share it. (None, not a default object: under torch.compile an object
        default has no source and breaks the graph.)"""
        if self.ancestors is not None:
            return self
        return dataclasses.replace(self, ancestors=tree_ancestor_mask(self.parents, options or DEFAULT_OPTIONS))

    def children(self, b: int, i: int) -> list[int]:
        """Valid children of node i in row b, in node order (host sync; for tests)."""
        mask = self.valid[b] & (self.parents[b] == i)
        return [int(x) for x in mask.nonzero().flatten().tolist()]

    def validate(self) -> None:
        """Raise ValueError (with the offending row/node/values) unless every DESIGN §1 rule holds."""
        tok, par, dep = self.tokens.cpu(), self.parents.cpu(), self.depth.cpu()
        val, lp = self.valid.cpu(), self.draft_logprobs.cpu()
        B, N = tok.shape
        idx = torch.arange(N).expand(B, N)

        def first(mask: torch.Tensor) -> tuple[int, int] | None:
            hit = mask.nonzero()
            return None if hit.numel() == 0 else (int(hit[0, 0]), int(hit[0, 1]))

        bad = first((idx == 0) & (~val | (par != -1) | (dep != 0)))
        if bad:
            b, _ = bad
            raise ValueError(
                f"row {b}: root must be valid with parent -1 and depth 0, got valid={bool(val[b, 0])}, "
                f"parent={int(par[b, 0])}, depth={int(dep[b, 0])}"
            )
        bad = first(val & (idx > 0) & ((par < 0) | (par >= idx)))
        if bad:
            b, i = bad
            raise ValueError(
                f"row {b} node {i}: parent {int(par[b, i])} breaks topological order (need 0 <= p < {i})"
            )
        bad = first(~val & (par != -1))
        if bad:
            b, i = bad
            raise ValueError(f"row {b} pad node {i}: parent must be -1, got {int(par[b, i])}")
        safe_par = par.clamp(min=0)
        par_valid = val.gather(1, safe_par)
        bad = first(val & (idx > 0) & ~par_valid)
        if bad:
            b, i = bad
            raise ValueError(f"row {b} node {i}: parent {int(par[b, i])} is a pad node")
        want = torch.where(idx > 0, dep.gather(1, safe_par) + 1, 0)
        bad = first(val & (dep != want))
        if bad:
            b, i = bad
            raise ValueError(
                f"row {b} node {i}: depth {int(dep[b, i])} != depth of parent + 1 = {int(want[b, i])}"
            )
        real = val & (idx > 0)  # [B, N] non-root valid nodes
        same = (par[:, :, None] == par[:, None, :]) & (tok[:, :, None] == tok[:, None, :])  # [B, N, N]
        same &= real[:, :, None] & real[:, None, :] & (idx[:, :, None] < idx[:, None, :])
        hit = same.nonzero()
        if hit.numel():
            b, i, j = (int(x) for x in hit[0])
            raise ValueError(
                f"row {b}: sibling nodes {i} and {j} (parent {int(par[b, i])}) "
                f"both carry token {int(tok[b, i])}"
            )
        bad = first(val & (idx > 0) & torch.isnan(lp))
        if bad:
            b, i = bad
            raise ValueError(f"row {b} node {i}: draft_logprob is NaN")
