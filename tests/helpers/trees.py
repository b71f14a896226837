"""Random trees for tests: topological parent lists, hypothesis strategies, and a tree equality check."""

from __future__ import annotations

import random

import torch
from hypothesis import strategies as st

from weaver.speculative.tree import DraftTree

KINDS = ("chain", "star", "random", "proposal")


def random_parents(T: int, seed: int, kind: str = "random", pads: int = 0) -> list[int]:
    """One topological tree of T - pads nodes followed by `pads` isolated pad nodes (parent -1)."""
    gen = torch.Generator().manual_seed(seed)
    n = T - pads
    par = [-1]
    for i in range(1, n):
        if kind == "chain":
            par.append(i - 1)
        elif kind == "star":
            par.append(0)
        elif kind == "proposal":  # mostly extend a recent node, sometimes branch near the root
            r = float(torch.rand(1, generator=gen))
            lo = 0 if r < 0.3 else max(0, i - 3)
            par.append(int(torch.randint(lo, i, (1,), generator=gen)))
        else:
            par.append(int(torch.randint(0, i, (1,), generator=gen)))
    return par + [-1] * pads


def random_batch(B: int, T: int, seed: int, kinds=KINDS, max_pads: int = 3, device: str = "cpu") -> torch.Tensor:
    """[B, T] parents, a different tree per row (kinds cycle), some rows padded."""
    rows = []
    for b in range(B):
        pads = (seed + b) % (min(max_pads, T - 1) + 1) if T > 1 else 0
        rows.append(random_parents(T, seed * 131 + b, kinds[(seed + b) % len(kinds)], pads))
    return torch.tensor(rows, dtype=torch.long, device=device)


@st.composite
def tree_batches(draw, max_b: int = 2, max_t: int = 20) -> list[list[int]]:
    """B rows of T nodes: a random topological tree per row (chain, star or random), pad nodes mixed in."""
    b = draw(st.integers(1, max_b))
    t = draw(st.integers(1, max_t))
    rows = []
    for _ in range(b):
        kind = draw(st.sampled_from(["chain", "star", "random"]))
        row = [-1]
        for i in range(1, t):
            if draw(st.integers(0, 9)) == 0:
                row.append(-1)  # isolated pad node
            else:
                row.append(i - 1 if kind == "chain" else 0 if kind == "star" else draw(st.integers(0, i - 1)))
        rows.append(row)
    return rows


def random_tree(
    rng: random.Random, vocab: int, max_depth: int, max_nodes: int, min_nodes: int = 1
) -> tuple[list[int], list[int]]:
    """Random topological tree of min_nodes..max_nodes nodes (fewer if full) with distinct sibling tokens."""
    parents, tokens, depth = [-1], [rng.randrange(vocab)], [0]
    used: dict[int, set[int]] = {0: set()}
    for _ in range(rng.randint(min_nodes, max_nodes) - 1):
        open_nodes = [i for i in range(len(parents)) if depth[i] < max_depth and len(used[i]) < vocab]
        if not open_nodes:
            break
        p = rng.choice(open_nodes)
        tok = rng.choice([t for t in range(vocab) if t not in used[p]])
        used[p].add(tok)
        used[len(parents)] = set()
        parents.append(p)
        tokens.append(tok)
        depth.append(depth[p] + 1)
    return parents, tokens


FIELDS = ("tokens", "parents", "depth", "valid")


def assert_same_tree(host: DraftTree, dev: DraftTree, what: str, rtol: float = 0.0) -> None:
    """Identical node order and structure; draft_logprobs equal to float32 rounding (1e-6, plus rtol of their size
    where the two sides round differently: a log p's error scales with the logits it comes from)."""
    dev.validate()
    assert dev.tokens.shape == host.tokens.shape, f"{what}: N {dev.size} != host {host.size}"
    for name in FIELDS:
        h, d = getattr(host, name), getattr(dev, name)
        bad = (h != d).nonzero()
        if bad.numel():
            at = tuple(bad[0].tolist())
            raise AssertionError(f"{what}: {name} differs first at row/node {at}: host {h[at]} device {d[at]}")
    assert torch.allclose(dev.draft_logprobs, host.draft_logprobs, rtol=rtol, atol=1e-6), what

