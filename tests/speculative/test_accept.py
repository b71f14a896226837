"""Verification rules: greedy literals, exact losslessness by enumeration, Monte-Carlo ties.

Exact criterion. One verify round emits a variable-length sequence s = (accepted draft tokens, bonus),
1 <= |s| <= m with m = max depth + 1. Decoding continues after s with further (lossless) rounds, i.e.
with exact target samples conditioned on s. So a round is lossless iff

    for every x in V^m:  sum over emitted s that are prefixes of x of
                         Prob(round emits s) * prod_{t > |s|} p(x_t | x_<t)   ==   prod_t p(x_t | x_<t),

i.e. the round's output, extended to length m by sampling the target, has the target's law on V^m.
(Necessity: it is the law of the first m tokens of the whole decoding. Sufficiency: by induction over
rounds, since every round only depends on the tree, which the target's randomness does not touch.)
The conditionals p(. | prefix) are arbitrary tables over every token tuple after the root (hand-made
ones with zeros, random ones); `target_probs[b, i]` is the table at node i's path.

Each randomised rule's outcome law is computed exactly by driving the rule's OWN code with enumerable
randomness, in float64:
* target_only: its walk `_accept_by_choice` is run on a batch holding every assignment of one target
  sample per node (V^N rows), weighted by prod_i p_i(y_i);
* traversal: `_traversal_row` is replayed with scripted randomness that branches over every sibling order
  (Plackett-Luce probabilities of softmax(draft_logprobs), computed here) and every accept/reject event;
* chain speculative: drafts are enumerated with their proposal probabilities and the rule's
  `_chain_accept_probs` / `_chain_bonus_probs` give the law of the stopping node and the bonus.
Seeded Monte-Carlo runs of the public functions then tie their sampling to these exact laws (TV bound).
"""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter, defaultdict

import pytest
import torch
from helpers.trees import random_tree

from weaver.errors import GenerationConfigError
from weaver.speculative import accept as vr
from weaver.speculative.accept import (
    ACCEPT_RULES,
    accept_chain_speculative,
    accept_greedy,
    accept_target_only,
    accept_traversal,
    resolve_rule,
)
from weaver.speculative.sampling import SamplingParams
from weaver.speculative.tree import DraftTree

Cond = dict[tuple[int, ...], list[float]]


# ---------------------------------------------------------------------------------------------------
# target conditionals, trees, laws


def random_cond(vocab: int, max_len: int, rng: random.Random, zero_frac: float = 0.25) -> Cond:
    """p(. | prefix) for every prefix of length <= max_len: random, with some exact zeros."""
    cond = {}
    for n in range(max_len + 1):
        for prefix in itertools.product(range(vocab), repeat=n):
            w = [rng.expovariate(1.0) ** 2 if rng.random() > zero_frac else 0.0 for _ in range(vocab)]
            if sum(w) == 0:
                w[rng.randrange(vocab)] = 1.0
            z = math.fsum(w)
            cond[prefix] = [x / z for x in w]
    return cond


def node_prefix(tree: DraftTree, b: int, i: int) -> tuple[int, ...]:
    """Tokens after the root on the path root..i."""
    out = []
    while i > 0:
        out.append(int(tree.tokens[b, i]))
        i = int(tree.parents[b, i])
    return tuple(reversed(out))


def probs_for(tree: DraftTree, cond: Cond) -> torch.Tensor:
    """[B, N, V] float64: row i = p(. | path of node i); pad rows uniform (never read)."""
    B, N = tree.tokens.shape
    vocab = len(cond[()])
    out = torch.full((B, N, vocab), 1.0 / vocab, dtype=torch.float64)
    for b in range(B):
        for i in range(N):
            if tree.valid[b, i]:
                out[b, i] = torch.tensor(cond[node_prefix(tree, b, i)], dtype=torch.float64)
    return out


def round_law(emit: dict[tuple[int, ...], list[float]], cond: Cond, m: int) -> dict[tuple[int, ...], float]:
    """Law on V^m of (round output, then target samples). emit[prefix][y] = Prob(emit prefix + (y,))."""
    law: dict[tuple[int, ...], float] = defaultdict(float)

    def extend(seq: tuple[int, ...], w: float) -> None:
        if len(seq) == m:
            law[seq] += w
            return
        for v, pv in enumerate(cond[seq]):
            if pv > 0:
                extend(seq + (v,), w * pv)

    for prefix, dist in emit.items():
        for y, py in enumerate(dist):
            if py > 0:
                extend(prefix + (y,), py)
    return law


def assert_lossless(emit: dict[tuple[int, ...], list[float]], cond: Cond, m: int, atol: float = 1e-9) -> None:
    vocab = len(cond[()])
    law = round_law(emit, cond, m)
    worst = 0.0
    for x in itertools.product(range(vocab), repeat=m):
        want = math.prod(cond[x[:t]][x[t]] for t in range(m))
        worst = max(worst, abs(law.get(x, 0.0) - want))
    total = math.fsum(math.fsum(d) for d in emit.values())
    assert abs(total - 1.0) < atol, f"outcome probabilities sum to {total}"
    assert worst < atol, f"round law differs from the target law by {worst:.3e}"


def add(emit: dict, prefix: tuple[int, ...], dist: list[float], w: float) -> None:
    if prefix not in emit:
        emit[prefix] = [0.0] * len(dist)
    for y, py in enumerate(dist):
        emit[prefix][y] += w * py


# ---------------------------------------------------------------------------------------------------
# exact outcome laws, driven through the rules' own code


def target_only_law(tree: DraftTree, target_probs: torch.Tensor) -> dict:
    """Row 0 of `tree`: every assignment y in V^N of one target sample per node, via `_accept_by_choice`."""
    N, vocab = tree.size, target_probs.shape[-1]
    choice = torch.tensor(list(itertools.product(range(vocab), repeat=N)), dtype=torch.long)  # [M, N]
    M = choice.shape[0]
    rep = DraftTree(
        *(
            getattr(tree, f)[:1].expand(M, N)
            for f in ("tokens", "parents", "depth", "valid", "draft_logprobs")
        )
    )
    res = vr._accept_by_choice(rep, choice, None)
    weight = target_probs[0][torch.arange(N), choice].prod(-1)  # [M]
    emitted = res.emitted(rep).tolist()
    emit: dict = {}
    for row, w in zip(emitted, weight.tolist()):
        if w > 0:
            seq = tuple(t for t in row if t >= 0)
            add(emit, seq[:-1], [float(y == seq[-1]) for y in range(vocab)], w)
    return emit


class _Branch(Exception):
    def __init__(self, options: list) -> None:
        self.options = options


class Scripted:
    """TraversalRandomness replaying a script of choices; raises _Branch at the first unscripted draw."""

    def __init__(self, script: tuple, logprobs: list[float]) -> None:
        self.script, self.pos, self.logprobs = script, 0, logprobs

    def _next(self, options: list):
        options = [(c, p) for c, p in options if p > 0]
        if len(options) == 1:  # a certain event needs no script entry (replays identically)
            return options[0][0]
        if self.pos < len(self.script):
            self.pos += 1
            return self.script[self.pos - 1]
        raise _Branch(options)

    def order(self, node: int, children: list[int]) -> list[int]:
        w = {c: math.exp(self.logprobs[c]) for c in children}
        options = []
        for perm in itertools.permutations(children):
            pr = 1.0
            for k, c in enumerate(perm):  # Plackett-Luce: pick c among the ones left, prob w_c / sum(left)
                pr *= w[c] / math.fsum(w[d] for d in perm[k:])
            options.append((list(perm), pr))
        return self._next(options)

    def accept(self, step: int, prob: float) -> bool:
        return self._next([(True, prob), (False, 1.0 - prob)])


def enumerate_traversal(row: vr.TraversalRow) -> list[tuple[vr.TraversalOutcome, float]]:
    done, stack = [], [((), 1.0)]
    while stack:
        script, pr = stack.pop()
        try:
            out = vr._traversal_row(row, Scripted(script, row.draft_logprobs))
        except _Branch as br:
            stack.extend((script + (c,), pr * p) for c, p in br.options)
            continue
        done.append((out, pr))
    return done


def traversal_law(tree: DraftTree, target_probs: torch.Tensor, b: int = 0) -> dict:
    rows, _ = vr._traversal_rows(tree, target_probs)
    emit: dict = {}
    for out, pr in enumerate_traversal(rows[b]):
        leaf = out.path[-1]
        bonus = vr._traversal_bonus_probs(target_probs[b, leaf][None], [out])[0]
        assert abs(float(bonus.sum()) - 1.0) < 1e-9, f"residual at node {leaf} has mass {float(bonus.sum())}"
        add(emit, tuple(int(tree.tokens[b, i]) for i in out.path[1:]), bonus.tolist(), pr)
    return emit


def chain_spec_law(root: int, depth: int, cond: Cond, draft_cond: Cond) -> tuple[dict, dict]:
    """Drafts x_1..x_D ~ prod q(x_d | x_<d) enumerated; the rule's law of (stopping node k, bonus) per chain.

    P(last accepted node = k | chain) = prod_{i<k} a_i * (1 - a_k) with a = `_chain_accept_probs` (0 at the
    last node), bonus ~ `_chain_bonus_probs` at k. Returns (law mixed over the drafts, {chain: its law}).
    """
    vocab = len(cond[()])
    chains = list(itertools.product(range(vocab), repeat=depth))
    M = len(chains)
    tree = DraftTree.chain(torch.full((M,), root), torch.tensor(chains, dtype=torch.long).reshape(M, depth))
    tp, dp = probs_for(tree, cond), probs_for(tree, draft_cond)
    accept = vr._chain_accept_probs(tree, tp, dp).tolist()  # [M, N]
    bonus = [vr._chain_bonus_probs(tree, tp, dp, torch.full((M,), k)).tolist() for k in range(depth + 1)]
    mixed: dict = {}
    per_chain: dict = {}
    for j, c in enumerate(chains):
        chain_w = math.prod(draft_cond[c[:d]][c[d]] for d in range(depth))
        per_chain[c] = {}
        for k in range(depth + 1):  # k = last accepted node
            w = math.prod(accept[j][:k]) * (1.0 - accept[j][k])
            add(per_chain[c], c[:k], bonus[k][j], w)
            add(mixed, c[:k], bonus[k][j], chain_w * w)
    return mixed, per_chain


# ---------------------------------------------------------------------------------------------------
# hand-made cases

HAND_TREES = {
    # root 0 -> {1, 2}; 1 -> {0, 2}; 2 -> {1}
    "branchy": ([-1, 0, 0, 1, 1, 2], [0, 1, 2, 0, 2, 1]),
    "chain3": ([-1, 0, 1, 2], [0, 1, 1, 2]),
    "star": ([-1, 0, 0, 0], [0, 0, 1, 2]),
    "root_only": ([-1], [0]),
    "deep_left": ([-1, 0, 1, 2, 0], [2, 2, 0, 1, 1]),
}


def hand_cond() -> Cond:
    """V = 3 conditionals with exact zeros, one-hots and near-ties; anything unlisted is a fixed rule."""
    cond = {
        (): [0.5, 0.3, 0.2],
        (1,): [0.0, 0.6, 0.4],
        (2,): [1.0, 0.0, 0.0],
        (0,): [0.2, 0.0, 0.8],
        (1, 0): [0.34, 0.33, 0.33],
        (1, 2): [0.0, 0.0, 1.0],
        (1, 1): [0.1, 0.1, 0.8],
    }
    for n in range(4):
        for prefix in itertools.product(range(3), repeat=n):
            if prefix not in cond:
                s = sum(prefix) % 3
                cond[prefix] = [0.7 if v == s else 0.15 for v in range(3)]
    return cond


HAND_LOGPROBS = {
    "uniform": lambda n: [0.0] * n,
    "peaked": lambda n: [0.0] + [(-8.0 if i % 2 else 0.0) for i in range(1, n)],
    "matched": lambda n: [0.0] + [math.log(0.1 + 0.2 * i) for i in range(1, n)],
    "extreme": lambda n: [0.0] + [-40.0 * (i % 3) for i in range(1, n)],  # q underflows to ~1e-35
}


@pytest.mark.parametrize("tree_name", HAND_TREES)
def test_target_only_exact_hand(tree_name):
    par, tok = HAND_TREES[tree_name]
    tree = DraftTree.from_parent_lists([par], [tok])
    cond = hand_cond()
    assert_lossless(target_only_law(tree, probs_for(tree, cond)), cond, tree.max_depth() + 1)


@pytest.mark.parametrize("lp_name", HAND_LOGPROBS)
@pytest.mark.parametrize("tree_name", HAND_TREES)
def test_traversal_exact_hand(tree_name, lp_name):
    par, tok = HAND_TREES[tree_name]
    tree = DraftTree.from_parent_lists([par], [tok], [HAND_LOGPROBS[lp_name](len(par))])
    cond = hand_cond()
    assert_lossless(traversal_law(tree, probs_for(tree, cond)), cond, tree.max_depth() + 1)


@pytest.mark.parametrize("seed", range(10))
def test_target_only_exact_random(seed):
    rng = random.Random(seed)
    vocab = 3 + seed % 3
    max_nodes = {3: 7, 4: 6, 5: 5}[vocab]
    par, tok = random_tree(rng, vocab, max_depth=3, max_nodes=max_nodes)
    tree = DraftTree.from_parent_lists([par], [tok])
    cond = random_cond(vocab, tree.max_depth() + 1, rng)
    assert_lossless(target_only_law(tree, probs_for(tree, cond)), cond, tree.max_depth() + 1)


@pytest.mark.parametrize("seed", range(24))
def test_traversal_exact_random(seed):
    """Lossless for random trees (distinct siblings), random draft_logprobs and random targets with zeros."""
    rng = random.Random(1000 + seed)
    vocab = 3 + seed % 3
    trees = [random_tree(rng, vocab, max_depth=3, max_nodes=10, min_nodes=1 + 5 * b) for b in range(2)]
    lps = [[rng.gauss(0.0, 2.0) for _ in par] for par, _ in trees]
    tree = DraftTree.from_parent_lists([p for p, _ in trees], [t for _, t in trees], lps)  # padded batch
    for b in range(2):
        cond = random_cond(vocab, 4, rng, zero_frac=0.3 if seed % 2 else 0.0)
        m = int(tree.depth[b][tree.valid[b]].max()) + 1
        assert_lossless(traversal_law(tree, probs_for(tree, cond), b), cond, m)


def chain_cases():
    rng = random.Random(7)
    cond3 = random_cond(3, 3, rng)
    cases = {"random_q": (3, 2, cond3, random_cond(3, 3, rng, zero_frac=0.3))}
    cases["q_equals_p"] = (3, 2, cond3, cond3)
    marginal = [0.1, 0.6, 0.3]  # a factorized drafter: q does not depend on the drafted prefix
    cases["marginal_q"] = (3, 3, random_cond(3, 3, rng), {k: marginal for k in random_cond(3, 3, rng)})
    onehot = {k: [float(v == (len(k) + 1) % 3) for v in range(3)] for k in cond3}  # a deterministic chain
    cases["argmax_chain"] = (3, 2, cond3, onehot)
    disjoint = {k: [0.0, 0.0, 0.0, 1.0] for k in random_cond(4, 3, rng)}
    cond4 = random_cond(4, 3, rng)
    for k in cond4:
        cond4[k] = [*(x * 0.9 for x in cond4[k][:3]), 0.1 * (len(k) % 2)]
        cond4[k] = [x / sum(cond4[k]) for x in cond4[k]]
    cases["q_mostly_disjoint"] = (4, 2, cond4, disjoint)
    cases["v5_random"] = (5, 2, random_cond(5, 3, rng), random_cond(5, 3, rng, zero_frac=0.5))
    return cases


@pytest.mark.parametrize("name", list(chain_cases()))
def test_chain_speculative_exact(name):
    vocab, depth, cond, draft_cond = chain_cases()[name]
    assert_lossless(chain_spec_law(0, depth, cond, draft_cond)[0], cond, depth + 1)


def test_one_hot_targets_reduce_to_greedy():
    """Under a one-hot (greedy) target, target_only and traversal emit exactly greedy's tokens."""
    rng = random.Random(5)
    for _ in range(6):
        par, tok = random_tree(rng, 4, max_depth=3, max_nodes=7)
        lp = [rng.gauss(0, 1) for _ in par]
        tree = DraftTree.from_parent_lists([par], [tok], [lp])
        logits = torch.randn(1, tree.size, 4, generator=torch.Generator().manual_seed(rng.randrange(99)))
        onehot = torch.nn.functional.one_hot(logits.argmax(-1), 4).double()
        greedy = tuple(t for t in accept_greedy(tree, logits).emitted(tree)[0].tolist() if t >= 0)
        for law in (target_only_law(tree, onehot), traversal_law(tree, onehot)):
            assert set(law) == {greedy[:-1]}
            assert law[greedy[:-1]] == pytest.approx([float(y == greedy[-1]) for y in range(4)], abs=1e-12)
        for seed in range(3):
            for rule in (accept_target_only, accept_traversal):
                out = rule(tree, onehot, generator=torch.Generator().manual_seed(seed)).emitted(tree)[0]
                assert tuple(t for t in out.tolist() if t >= 0) == greedy


# ---------------------------------------------------------------------------------------------------
# Monte-Carlo: the public (sampling) functions follow the exact laws


def tv_to_exact(samples: list[tuple[int, ...]], emit: dict) -> float:
    exact = {prefix + (y,): p for prefix, dist in emit.items() for y, p in enumerate(dist) if p > 0}
    counts = Counter(samples)
    n = len(samples)
    return 0.5 * sum(abs(counts.get(s, 0) / n - exact.get(s, 0.0)) for s in set(exact) | set(counts))


def emitted_tuples(res: vr.AcceptResult, tree: DraftTree) -> list[tuple[int, ...]]:
    return [tuple(t for t in row if t >= 0) for row in res.emitted(tree).tolist()]


def replicate(tree: DraftTree, n: int) -> DraftTree:
    return DraftTree(
        *(getattr(tree, f).expand(n, -1) for f in ("tokens", "parents", "depth", "valid", "draft_logprobs"))
    )


@pytest.mark.parametrize("rule", ["target_only", "traversal"])
def test_monte_carlo_matches_exact(rule):
    n = 40000 if rule == "target_only" else 25000
    par, tok = HAND_TREES["branchy"]
    tree = DraftTree.from_parent_lists([par], [tok], [[0.0, -0.3, -1.2, 0.5, -0.5, 0.0]])
    cond = hand_cond()
    tp = probs_for(tree, cond)
    exact = target_only_law(tree, tp) if rule == "target_only" else traversal_law(tree, tp)
    res = ACCEPT_RULES[rule](
        replicate(tree, n), tp.float().expand(n, -1, -1), generator=torch.Generator().manual_seed(0)
    )
    tv = tv_to_exact(emitted_tuples(res, replicate(tree, n)), exact)
    assert tv < 0.02, f"{rule}: TV {tv:.4f} between {n} samples and the exact law"


def test_monte_carlo_chain_speculative():
    n = 50000
    rng = random.Random(11)
    cond, draft_cond = random_cond(4, 3, rng), random_cond(4, 3, rng, zero_frac=0.3)
    chain = (2, 1)  # a fixed drafted chain: compare with its conditional law
    while math.prod(draft_cond[chain[:d]][chain[d]] for d in range(2)) == 0:
        chain = (rng.randrange(4), rng.randrange(4))
    exact = chain_spec_law(0, 2, cond, draft_cond)[1][chain]
    tree = DraftTree.chain(torch.zeros(1, dtype=torch.long), torch.tensor([chain]))
    tp, dp = probs_for(tree, cond), probs_for(tree, draft_cond)
    res = accept_chain_speculative(
        replicate(tree, n),
        tp.expand(n, -1, -1),
        dp.expand(n, -1, -1),
        generator=torch.Generator().manual_seed(1),
    )
    tv = tv_to_exact(emitted_tuples(res, replicate(tree, n)), exact)
    assert tv < 0.02, f"chain speculative: TV {tv:.4f}"


def test_sampling_rules_are_seeded():
    par, tok = HAND_TREES["branchy"]
    tree = replicate(DraftTree.from_parent_lists([par], [tok]), 64)
    tp = probs_for(tree, hand_cond()).float()
    for name in ("target_only", "traversal"):
        a = ACCEPT_RULES[name](tree, tp, generator=torch.Generator().manual_seed(3))
        b = ACCEPT_RULES[name](tree, tp, generator=torch.Generator().manual_seed(3))
        assert torch.equal(a.path, b.path) and torch.equal(a.next_token, b.next_token)


# ---------------------------------------------------------------------------------------------------
# greedy literals (forged logits)


def forged(tree: DraftTree, argmax: list[list[int]], vocab: int = 8) -> torch.Tensor:
    """Logits [B, N, V] whose argmax at node i of row b is argmax[b][i]."""
    logits = torch.randn(tree.batch_size, tree.size, vocab, generator=torch.Generator().manual_seed(0))
    for b, row in enumerate(argmax):
        for i, t in enumerate(row):
            logits[b, i, t] = 10.0
    return logits


def test_greedy_all_accepted():
    tree = DraftTree.chain(torch.tensor([5]), torch.tensor([[1, 2, 3]]))
    res = accept_greedy(tree, forged(tree, [[1, 2, 3, 4]]))
    assert res.path.tolist() == [[0, 1, 2, 3]]
    assert res.num_accepted.tolist() == [4] and res.next_token.tolist() == [4]
    assert res.emitted(tree).tolist() == [[1, 2, 3, 4]]


def test_greedy_first_rejected():
    tree = DraftTree.chain(torch.tensor([5]), torch.tensor([[1, 2, 3]]))
    res = accept_greedy(tree, forged(tree, [[7, 2, 3, 4]]))
    assert res.path.tolist() == [[0, -1, -1, -1]]
    assert res.num_accepted.tolist() == [1] and res.next_token.tolist() == [7]
    assert res.emitted(tree).tolist() == [[7, -1, -1, -1]]


def test_greedy_root_only():
    tree = DraftTree.root_only(torch.tensor([5, 6]))
    res = accept_greedy(tree, forged(tree, [[3], [0]]))
    assert res.path.tolist() == [[0], [0]] and res.num_accepted.tolist() == [1, 1]
    assert res.next_token.tolist() == [3, 0]


def test_greedy_second_child_branch():
    # root 5 -> {1 (node 1), 2 (node 2)}; node 2 -> 4 (node 3); node 1 -> 3 (node 4)
    tree = DraftTree.from_parent_lists([[-1, 0, 0, 2, 1]], [[5, 1, 2, 4, 3]])
    res = accept_greedy(tree, forged(tree, [[2, 3, 4, 6, 0]]))
    assert res.path.tolist() == [[0, 2, 3]]
    assert res.num_accepted.tolist() == [3] and res.next_token.tolist() == [6]
    assert res.emitted(tree).tolist() == [[2, 4, 6]]


def test_greedy_batched_rows_with_different_trees():
    trees = [
        DraftTree.from_parent_lists([[-1, 0, 0, 2, 1]], [[5, 1, 2, 4, 3]]),
        DraftTree.chain(torch.tensor([5]), torch.tensor([[1, 2]])),
        DraftTree.root_only(torch.tensor([9])),
        DraftTree.from_parent_lists([[-1, 0, 1, 0]], [[0, 7, 7, 6]]),
    ]
    argmax = [[2, 3, 4, 6, 0], [1, 5, 0, 0, 0], [4, 0, 0, 0, 0], [7, 7, 1, 0, 0]]
    batch = DraftTree.stack(trees)
    logits = forged(batch, argmax)
    res = accept_greedy(batch, logits)
    assert res.path.tolist() == [[0, 2, 3], [0, 1, -1], [0, -1, -1], [0, 1, 2]]
    assert res.num_accepted.tolist() == [3, 2, 1, 3] and res.next_token.tolist() == [6, 5, 4, 1]
    for b, t in enumerate(trees):  # each row equals the row verified alone
        alone = accept_greedy(t, logits[b : b + 1, : t.size])
        assert alone.next_token.item() == res.next_token[b].item()
        assert alone.path[0].tolist() == res.path[b, : alone.path.shape[1]].tolist()
    fixed = accept_greedy(batch, logits, path_len=5)  # static path length for captured graphs
    assert fixed.path.shape == (4, 5) and fixed.path[:, :3].tolist() == res.path.tolist()


def test_traversal_and_target_only_batched_padding():
    """Pad nodes never get accepted and row outputs keep their own trees."""
    trees = [DraftTree.from_parent_lists([p], [t]) for p, t in HAND_TREES.values()]
    batch = DraftTree.stack(trees)
    onehot = torch.nn.functional.one_hot(
        torch.randint(0, 3, batch.tokens.shape, generator=torch.Generator().manual_seed(2)), 3
    )
    want = accept_greedy(batch, onehot.float())
    for rule in ("target_only", "traversal"):
        got = ACCEPT_RULES[rule](batch, onehot.float(), generator=torch.Generator().manual_seed(0))
        assert torch.equal(got.path, want.path) and torch.equal(got.next_token, want.next_token), rule
        assert bool(batch.valid.gather(1, got.path.clamp(min=0)).all())


# ---------------------------------------------------------------------------------------------------
# registry, errors


def test_resolve_rule():
    greedy, hot = SamplingParams(temperature=0.0), SamplingParams(temperature=0.8)
    assert resolve_rule("auto", greedy, "weaver") == "greedy"
    assert resolve_rule("auto", hot, "ddtree") == "target_only"
    assert resolve_rule("traversal", hot, "weaver") == "traversal"
    assert resolve_rule("target_only", greedy, "chain") == "target_only"
    assert resolve_rule("chain_speculative", hot, "chain") == "chain_speculative"
    assert set(ACCEPT_RULES) == {"greedy", "target_only", "traversal", "chain_speculative"}
    with pytest.raises(GenerationConfigError, match="unknown verification rule 'nope'; known: auto, greedy"):
        resolve_rule("nope", hot, "chain")
    with pytest.raises(GenerationConfigError, match="only lossless at temperature 0"):
        resolve_rule("greedy", hot, "chain")
    with pytest.raises(GenerationConfigError, match="needs a chain"):
        resolve_rule("chain_speculative", hot, "ddtree")


def test_input_errors():
    tree = DraftTree.from_parent_lists([[-1, 0, 0]], [[0, 1, 2]], [[0.0, float("-inf"), 0.0]])
    probs = torch.full((1, 3, 3), 1 / 3)
    with pytest.raises(ValueError, match="finite draft_logprobs: row 0 node 1"):
        accept_traversal(tree, probs)
    with pytest.raises(ValueError, match="needs a chain: row 0 node 2 has parent 0"):
        accept_chain_speculative(tree, probs, probs)
    with pytest.raises(ValueError, match=r"target_probs must be \[B, N, V\]"):
        accept_target_only(tree, probs[:, :2])


def test_every_rule_takes_the_keyword_call():
    tree = DraftTree.chain(
        torch.tensor([0, 1]), torch.tensor([[1, 2], [2, 0]]), torch.tensor([[-0.1] * 2] * 2)
    )
    tp = torch.softmax(torch.randn(2, 3, 3, generator=torch.Generator().manual_seed(0)), -1)
    for name, rule in ACCEPT_RULES.items():
        g = torch.Generator().manual_seed(0)
        res = rule(tree, tp, generator=g, draft_probs=torch.full_like(tp, 1 / 3), path_len=4)
        assert res.path.shape == (2, 4) and (res.num_accepted >= 1).all(), name
        assert (res.path[:, 0] == 0).all() and res.next_token.dtype == torch.long, name
