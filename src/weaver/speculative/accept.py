"""Lossless verification rules: which drafted nodes the target accepts, and the bonus token.

Glossary (used across weaver; DESIGN §1, §9):

* **root** - node 0 of the DraftTree: the last committed token, emitted by the previous round but not
  yet processed by the target. The verify pass runs the target over every node, so row i of
  `target_probs` [B, N, V] is the target's processed distribution (sampling.process_logits: temperature,
  top-k, top-p; one-hot on the argmax for greedy) of the token AFTER node i, i.e. conditioned on root..i.
* **accepted path** - the node ids root..last accepted node; always starts with the root, so a round
  accepts >= 1 node. `AcceptResult.path` [B, P] is right-padded with -1, P = max depth + 1.
* **bonus token** (`next_token`) - the token the rule emits after the last accepted node, sampled from
  the target (or from the rule's residual); it becomes the next round's root.
* **emitted tokens** of a round - the tokens of the accepted path without the root, then the bonus
  token: `num_accepted` tokens (`AcceptResult.emitted`).
* **tau** - tokens emitted per verify pass, bonus included = mean of `num_accepted`; a round that accepts
  no draft still emits 1. MAL in reports = tau.
* **lossless** - the emitted tokens, continued by sampling the target, have exactly the target's law
  (for greedy: equal greedy decoding). tests/spec/test_verify.py checks it by exact enumeration.

Rules share one keyword interface, so the engine calls any of them the same way:

    rule(tree, target_probs, generator=None, draft_probs=None, path_len=None) -> AcceptResult

* `greedy`            - follow the child whose token is the target argmax (T = 0).
* `target_only`       - at every node sample y from the target; descend if a child carries y, else y is
                        the bonus. Lossless for any tree built without the target's randomness.
* `traversal`         - Traversal Verification (Weng et al., arXiv 2505.12398, Algorithm 3): leaf to root,
                        sequence level. The proposal at a parent is q = softmax of its children's
                        `draft_logprobs` (so the children are q's whole support) and the sibling visiting
                        order is Plackett-Luce under q (Gumbel keys). Lossless for any draft_logprobs.
* `chain_speculative` - Leviathan et al. (arXiv 2211.17192) on a chain: accept draft x w.p.
                        min(1, p(x) / q(x)), on reject sample norm(max(0, p - q)); all accepted -> bonus
                        from p at the last node. `draft_probs[b, i]` [B, N, V] must be the distribution the
                        token of node i+1 was actually sampled from (one-hot for an argmax chain).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch

from weaver.errors import GenerationConfigError
from weaver.kernels.vocab_top1 import argmax_last
from weaver.options import DEFAULT_OPTIONS, RuntimeOptions
from weaver.speculative.sampling import SamplingParams, sample_from_probs
from weaver.speculative.tree import DraftTree

__all__ = [
    "ACCEPT_RULES",
    "AcceptResult",
    "resolve_rule",
    "accept_chain_speculative",
    "accept_greedy",
    "accept_target_only",
    "accept_traversal",
]


@dataclass(frozen=True)
class AcceptResult:
    path: torch.Tensor  # [B, P] long: node ids root..last accepted, right-padded with -1
    num_accepted: torch.Tensor  # [B] long: accepted nodes incl. the root (>= 1) = tokens emitted this round
    next_token: torch.Tensor  # [B] long: the bonus token, the next round's root

    def emitted(self, tree: DraftTree) -> torch.Tensor:
        """[B, P] tokens emitted this round (path tokens without the root, then the bonus), padded with -1."""
        B, P = self.path.shape
        toks = tree.tokens.gather(1, self.path.clamp(min=0))  # [B, P]
        out = torch.where(self.path >= 0, toks, -1)[:, 1:]  # [B, P-1]
        out = torch.cat([out, out.new_full((B, 1), -1)], dim=1)  # [B, P]
        return out.scatter(1, (self.num_accepted - 1)[:, None], self.next_token[:, None])


def _check(tree: DraftTree, probs: torch.Tensor, name: str) -> None:
    if probs.dim() != 3 or probs.shape[:2] != tree.tokens.shape:
        raise ValueError(
            f"{name} must be [B, N, V] with [B, N] = {tuple(tree.tokens.shape)}, got {tuple(probs.shape)}"
        )


def _result(
    tree: DraftTree, on_path: torch.Tensor, next_token: torch.Tensor, path_len: int | None
) -> AcceptResult:
    """on_path: bool [B, N] marks the accepted nodes (a root..leaf path). Gathers them by depth."""
    B, N = tree.tokens.shape
    P = tree.max_depth() + 1 if path_len is None else path_len
    col = torch.where(on_path, tree.depth, P)  # [B, N]: node's slot in the path, P = discarded
    path = torch.full((B, P + 1), -1, dtype=torch.long, device=tree.device)
    path.scatter_(1, col, torch.arange(N, device=tree.device).expand(B, N))
    return AcceptResult(path=path[:, :P], num_accepted=on_path.sum(-1), next_token=next_token.long())


def _result_from_leaf(
    tree: DraftTree, leaf: torch.Tensor, next_token: torch.Tensor, path_len: int | None
) -> AcceptResult:
    """leaf: [B] last accepted node per row."""
    B, N = tree.tokens.shape
    anc = tree.ancestor_mask()  # [B, N, N]
    on_path = anc.gather(1, leaf[:, None, None].expand(B, 1, N)).squeeze(1)  # [B, N]
    return _result(tree, on_path, next_token, path_len)


def _accept_by_choice(tree: DraftTree, choice: torch.Tensor, path_len: int | None) -> AcceptResult:
    """Walk the tree following, after every node, the token `choice` [B, N] picked there (no node loop).

    Node i is accepted iff every non-root node on root..i carries the choice made at its parent. Siblings
    are distinct, so the accepted nodes form one path; its deepest node's choice is the bonus token.
    """
    kids = tree.parents[:, 1:]  # [B, N-1]: the root is always on the path, so only nodes 1.. are checked
    ok = tree.valid[:, 1:] & (tree.tokens[:, 1:] == choice.gather(1, kids.clamp(min=0)))  # [B, N-1]
    anc = tree.ancestor_mask()[:, :, 1:]  # [B, N, N-1]
    accepted = ~(anc > ok[:, None, :]).any(-1)  # [B, N]: no non-root node on root..i fails
    leaf = torch.where(accepted, tree.depth, -1).argmax(-1)  # [B]: the deepest accepted node
    next_token = choice.gather(1, leaf[:, None]).squeeze(1)  # [B]
    return _result(tree, accepted, next_token, path_len)


def accept_greedy(
    tree: DraftTree,
    target_probs_or_logits: torch.Tensor,
    generator: torch.Generator | None = None,
    draft_probs: torch.Tensor | None = None,
    path_len: int | None = None,
    options: RuntimeOptions | None = None,
) -> AcceptResult:
    """Follow the child equal to the target argmax; the first argmax no child carries is the bonus.

    target_probs_or_logits: [B, N, V] (anything with the target's argmax). generator, draft_probs unused;
    `options` pick the argmax's path (the vocabulary kernel or torch: the same tokens).
    """
    _check(tree, target_probs_or_logits, "target_probs_or_logits")
    return _accept_by_choice(tree, argmax_last(target_probs_or_logits, options or DEFAULT_OPTIONS), path_len)


def accept_target_only(
    tree: DraftTree,
    target_probs: torch.Tensor,
    generator: torch.Generator | None = None,
    draft_probs: torch.Tensor | None = None,
    path_len: int | None = None,
) -> AcceptResult:
    """Sample y ~ target_probs[node] at every node at once, then walk as greedy does with y for the argmax.

    The walk only reads y at the nodes it reaches, each an independent exact target sample, so the emitted
    sequence is a target sample. target_probs: [B, N, V]. draft_probs unused.
    """
    _check(tree, target_probs, "target_probs")
    return _accept_by_choice(tree, sample_from_probs(target_probs, generator), path_len)


# ---------------------------------------------------------------------------------------------------
# Chain speculative sampling (Leviathan et al.)


def _chain_accept_probs(
    tree: DraftTree, target_probs: torch.Tensor, draft_probs: torch.Tensor
) -> torch.Tensor:
    """[B, N]: P(node i+1 accepted | node i accepted) = min(1, p_i(x) / q_i(x)); 0 without a child."""
    B, N, _ = target_probs.shape
    dtype = torch.promote_types(target_probs.dtype, torch.float32)
    child_tok = torch.cat([tree.tokens[:, 1:], tree.tokens.new_zeros(B, 1)], dim=1)  # [B, N]
    has_child = torch.cat([tree.valid[:, 1:], tree.valid.new_zeros(B, 1)], dim=1)  # [B, N]
    p_x = target_probs.to(dtype).gather(-1, child_tok[..., None]).squeeze(-1)  # [B, N]
    q_x = draft_probs.to(dtype).gather(-1, child_tok[..., None]).squeeze(-1)  # [B, N]
    ratio = torch.where(q_x > 0, (p_x / q_x.clamp_min(1e-300)).clamp(max=1.0), (p_x > 0).to(dtype))
    return torch.where(has_child, ratio, 0.0)


def _chain_bonus_probs(
    tree: DraftTree, target_probs: torch.Tensor, draft_probs: torch.Tensor, leaf: torch.Tensor
) -> torch.Tensor:
    """[B, V] bonus distribution when `leaf` [B] is the last accepted node: the residual norm(max(0, p - q))
    if its child was rejected, p if it has no child."""
    B, N, _ = target_probs.shape
    dtype = torch.promote_types(target_probs.dtype, torch.float32)
    rows = torch.arange(B, device=target_probs.device)
    p = target_probs[rows, leaf].to(dtype)  # [B, V]
    q = draft_probs[rows, leaf].to(dtype)  # [B, V]
    nxt = (leaf + 1).clamp(max=N - 1)
    has_child = (leaf + 1 < N) & tree.valid.gather(1, nxt[:, None]).squeeze(1)  # [B]
    resid = (p - q).clamp(min=0.0)
    mass = resid.sum(-1, keepdim=True)  # [B, 1]; 0 only if p == q, when a rejection has probability 0
    use = has_child[:, None] & (mass > 0)
    return torch.where(use, resid / mass.clamp_min(1e-300), p)


def accept_chain_speculative(
    tree: DraftTree,
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    generator: torch.Generator | None = None,
    path_len: int | None = None,
) -> AcceptResult:
    """Speculative sampling on a chain. target_probs, draft_probs: [B, N, V]; draft_probs[b, i] is the
    proposal that node i+1's token was drawn from (the last node's row is unused)."""
    _check(tree, target_probs, "target_probs")
    _check(tree, draft_probs, "draft_probs")
    B, N = tree.tokens.shape
    idx = torch.arange(N, device=tree.device)
    chain_ok = ~tree.valid | (tree.parents == idx - 1)
    if not bool(chain_ok.all()):
        b, i = (int(x) for x in (~chain_ok).nonzero()[0])
        raise ValueError(
            f"chain speculative sampling needs a chain: row {b} node {i} has parent {int(tree.parents[b, i])}"
        )
    accept = _chain_accept_probs(tree, target_probs, draft_probs)  # [B, N]
    u = torch.rand(accept.shape, generator=generator, dtype=accept.dtype, device=accept.device)
    leaf = (u < accept).long().cumprod(-1).sum(-1)  # [B]: leading accepted children = last accepted node
    bonus = _chain_bonus_probs(tree, target_probs, draft_probs, leaf)  # [B, V]
    next_token = sample_from_probs(bonus, generator)
    on_path = tree.valid & (idx <= leaf[:, None])  # [B, N]
    return _result(tree, on_path, next_token, path_len)


# ---------------------------------------------------------------------------------------------------
# Traversal verification (Weng et al., Algorithm 3). Per-row Python for now (a kernel comes later);
# every random draw goes through a TraversalRandomness so a test can enumerate the rule's outcomes.


class TraversalRandomness(Protocol):
    def order(self, node: int, children: list[int]) -> list[int]:
        """The visiting order of `node`'s children: Plackett-Luce under softmax(their draft_logprobs)."""
        ...

    def accept(self, step: int, prob: float) -> bool:
        """True with probability `prob` (one fresh uniform per traversal step)."""
        ...


@dataclass
class _DrawnRandomness:
    keys: list[float]  # [N] draft_logprob + Gumbel noise: sorting siblings by key is Plackett-Luce
    eta: list[float]  # [N] one uniform per traversal step

    def order(self, node: int, children: list[int]) -> list[int]:
        return sorted(children, key=lambda c: -self.keys[c])

    def accept(self, step: int, prob: float) -> bool:
        return self.eta[step] < prob


@dataclass
class TraversalOutcome:
    """One row's result: the accepted path and the bonus distribution at its last node, which is
    `scale * target_probs[leaf]` on every token except the leaf's children's tokens, where it is
    `overrides[token]` (the residual left by rejecting those children)."""

    path: list[int]
    scale: float = 1.0
    overrides: dict[int, float] = field(default_factory=dict)


@dataclass
class TraversalRow:
    """One row of a tree on the host, float64: what `_traversal_row` reads."""

    tokens: list[int]  # [N]
    parents: list[int]  # [N]
    valid: list[bool]  # [N]
    p_child: list[float]  # [N] target_probs[parent(i), token(i)] (root: unused)
    row_mass: list[float]  # [N] target_probs[i].sum()
    draft_logprobs: list[float]  # [N]


def _traversal_rows(
    tree: DraftTree, target_probs: torch.Tensor, draws: torch.Tensor | None = None
) -> tuple[list[TraversalRow], list[list[list[float]]]]:
    """Gather what the traversal needs into host lists in one transfer; `draws` [K, B, N] rides along."""
    B, N, _ = target_probs.shape
    rows = torch.arange(B, device=target_probs.device)[:, None]
    p_child = target_probs[rows, tree.parents.clamp(min=0), tree.tokens].double()  # [B, N]
    row_mass = target_probs.sum(-1, dtype=torch.float64)  # [B, N]
    parts = [tree.tokens, tree.parents, tree.valid, p_child, row_mass, tree.draft_logprobs]
    packed = torch.stack([t.to(torch.float64) for t in parts])  # [6, B, N]
    if draws is not None:
        packed = torch.cat([packed, draws.to(torch.float64)])
    host = packed.cpu().tolist()
    out = []
    for b in range(B):
        tok, par, val, pc, mass, dlp = (x[b] for x in host[:6])
        valid = [v > 0 for v in val]
        bad = [i for i in range(1, N) if valid[i] and not math.isfinite(dlp[i])]
        if bad:
            raise ValueError(
                f"traversal needs finite draft_logprobs: row {b} node {bad[0]} has {dlp[bad[0]]}"
            )
        out.append(TraversalRow([int(t) for t in tok], [int(p) for p in par], valid, pc, mass, dlp))
    return out, host[6:]


def _traversal_row(row: TraversalRow, rand: TraversalRandomness) -> TraversalOutcome:
    """Traversal verification of one tree, float64.

    A node's target distribution is kept as `scale * original` on the tokens that are not its
    children's plus explicit values on its children's tokens: the proposal is supported on the children,
    so a rejection rescales everything else uniformly and no step touches V entries.
    """
    tokens, parents, valid = row.tokens, row.parents, row.valid
    p_child, row_mass, draft_logprobs = row.p_child, row.row_mass, row.draft_logprobs
    n = len(tokens)
    kids: list[list[int]] = [[] for _ in range(n)]
    for i in range(1, n):
        if valid[i]:
            kids[parents[i]].append(i)
    active = list(valid)
    cur_p = list(p_child)  # cur_p[c]: current (residual) target prob of c's token at c's parent
    scale = [1.0] * n  # current target at node = scale * original, off its children's tokens
    off = [max(row_mass[v] - math.fsum(p_child[c] for c in kids[v]), 0.0) for v in range(n)]
    q = [0.0] * n  # q[c]: proposal prob of c's token at c's parent, over the parent's active children

    def set_proposal(v: int) -> None:  # q at v = softmax of its active children's draft_logprobs
        live = [c for c in kids[v] if active[c]]
        if live:
            top = max(draft_logprobs[c] for c in live)
            w = [math.exp(draft_logprobs[c] - top) for c in live]
            z = math.fsum(w)
            for c, wc in zip(live, w):
                q[c] = wc / z

    def acceptance(c: int) -> float:  # min(1, acc[parent] * p_parent(tok c) / q_parent(tok c))
        x = acc[parents[c]] * cur_p[c]
        return 0.0 if x <= 0 else (1.0 if x >= q[c] else x / q[c])

    for v in range(n):
        set_proposal(v)
    acc = [0.0] * n  # acc[root] = 1
    acc[0] = 1.0
    for i in range(1, n):
        if valid[i]:
            acc[i] = acceptance(i)
    order: dict[int, list[int]] = {}

    for step in range(n):
        node = 0  # descend along the highest-ranked active child to a leaf of the remaining tree
        while kids[node]:
            if node not in order:
                order[node] = rand.order(node, list(kids[node]))
            live = [c for c in order[node] if active[c]]
            if not live:
                break
            node = live[0]
        if node == 0 or rand.accept(step, acc[node]):
            path = [node]
            while parents[path[-1]] >= 0:
                path.append(parents[path[-1]])
            over = {tokens[c]: cur_p[c] for c in kids[node]}
            return TraversalOutcome(path[::-1], scale[node], over)
        # Reject `node`: the parent's target becomes the residual norm(max(a * p - q, 0)).
        par = parents[node]
        a = acc[par]
        resid = {c: max(a * cur_p[c] - q[c], 0.0) for c in kids[par]}  # q[c] = 0 for rejected siblings
        mass = a * scale[par] * off[par] + math.fsum(resid.values())
        for c in kids[par]:
            cur_p[c] = resid[c] / mass if mass > 0 else 0.0
        scale[par] = a * scale[par] / mass if mass > 0 else 0.0
        active[node] = False  # q at the parent loses the rejected token and is renormalised
        q[node] = 0.0
        set_proposal(par)
        den = mass + (1.0 - a)  # not (mass + 1) - a: at a = 1 that must give exactly mass
        acc[par] = mass / den if den > 0 else 0.0
        stack = [c for c in kids[par] if active[c]]  # refresh acceptance below the parent
        while stack:
            c = stack.pop()
            acc[c] = acceptance(c)
            stack.extend(d for d in kids[c] if active[d])
    raise AssertionError("traversal verification did not terminate (the root is always accepted)")


def _traversal_bonus_probs(target_rows: torch.Tensor, outcomes: list[TraversalOutcome]) -> torch.Tensor:
    """[B, V] float64 bonus distributions; target_rows [B, V] = target_probs at each row's last node."""
    dev = target_rows.device
    scales = torch.tensor([o.scale for o in outcomes], dtype=torch.float64, device=dev)
    probs = target_rows.to(torch.float64) * scales[:, None]  # [B, V]
    rows = [b for b, o in enumerate(outcomes) for _ in o.overrides]
    if rows:
        toks = [t for o in outcomes for t in o.overrides]
        vals = [v for o in outcomes for v in o.overrides.values()]
        probs[torch.tensor(rows, device=dev), torch.tensor(toks, device=dev)] = torch.tensor(
            vals, dtype=torch.float64, device=dev
        )
    # A residual of zero mass has probability 0 in exact arithmetic; guard against rounding only.
    dead = probs.sum(-1, keepdim=True) <= 0
    return torch.where(dead, target_rows.to(torch.float64), probs)


def accept_traversal(
    tree: DraftTree,
    target_probs: torch.Tensor,
    generator: torch.Generator | None = None,
    draft_probs: torch.Tensor | None = None,
    path_len: int | None = None,
) -> AcceptResult:
    """Traversal verification; the proposal at each parent is softmax(children's draft_logprobs).

    target_probs: [B, N, V]. Randomness: one Gumbel key per node (sibling order), one uniform per step,
    one race for the bonus, all drawn from `generator` on target_probs' device. draft_probs unused.
    """
    _check(tree, target_probs, "target_probs")
    B, N, _ = target_probs.shape
    dev = target_probs.device
    gumbel = -torch.empty(B, N, dtype=torch.float64, device=dev).exponential_(generator=generator).log()
    eta = torch.rand(B, N, dtype=torch.float64, device=dev, generator=generator)
    keys = tree.draft_logprobs.double() + gumbel  # [B, N]; sorting siblings by key = Plackett-Luce
    rows, (keys_h, eta_h) = _traversal_rows(tree, target_probs, torch.stack([keys, eta]))
    outcomes = [_traversal_row(r, _DrawnRandomness(keys_h[b], eta_h[b])) for b, r in enumerate(rows)]
    leaf = torch.tensor([o.path[-1] for o in outcomes], dtype=torch.long, device=dev)  # [B]
    bonus = _traversal_bonus_probs(target_probs[torch.arange(B, device=dev), leaf], outcomes)  # [B, V]
    next_token = sample_from_probs(bonus, generator)
    return _result_from_leaf(tree, leaf, next_token, path_len)


# ---------------------------------------------------------------------------------------------------
# Registry


# Call by keyword: ACCEPT_RULES[name](tree, target_probs, generator=g, draft_probs=dp, path_len=P).
ACCEPT_RULES: dict[str, Callable[..., AcceptResult]] = {
    "greedy": accept_greedy,
    "target_only": accept_target_only,
    "traversal": accept_traversal,
    "chain_speculative": accept_chain_speculative,
}

_CHAIN_METHODS = ("ar", "chain")


def resolve_rule(name: str, params: SamplingParams, method: str) -> str:
    """The ACCEPT_RULES key to use. "auto": greedy at temperature 0, else target_only.

    Call a rule by keyword: `ACCEPT_RULES[key](tree, target_probs, generator=g, draft_probs=dp)`;
    only chain_speculative needs draft_probs (the distribution each draft was sampled from).
    """
    if name == "auto":
        return "greedy" if params.greedy else "target_only"
    if name not in ACCEPT_RULES:
        known = ", ".join(["auto", *ACCEPT_RULES])
        raise GenerationConfigError(f"unknown verification rule {name!r}; known: {known}")
    if name == "greedy" and not params.greedy:
        raise GenerationConfigError(
            f"verify='greedy' is only lossless at temperature 0 (got {params.temperature}); "
            "use 'target_only', 'traversal' or 'auto'"
        )
    if name == "chain_speculative" and method not in _CHAIN_METHODS:
        raise GenerationConfigError(
            f"verify='chain_speculative' needs a chain (method 'chain' or 'ar'), got method {method!r}"
        )
    return name
