"""Tree verify and commit, checked by the branch property on every family.

For random trees over a random prefix, the verify logits at each node must equal a fresh prefill of
prefix + that node's root path; after committing a random root-to-node path, decoding must continue
exactly as a fresh prefill of the whole committed sequence.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from weaver.models.config import ModelConfig
from weaver.models.loading import build_model, init_random_weights
from weaver.models.presets import preset_config
from weaver.ops.tree import node_depth
from weaver.testing import root_path

FAMILIES = ["tiny-llama", "tiny-qwen3", "tiny-qwen3_5"]
_MODELS: dict[str, torch.nn.Module] = {}


def _model(name: str):
    if name not in _MODELS:
        cfg = ModelConfig.from_hf(preset_config(name, num_hidden_layers=4))
        _MODELS[name] = init_random_weights(build_model(cfg), seed=11)
    return _MODELS[name]




@torch.no_grad()
def _fresh_logits(model, tokens: list[int]) -> torch.Tensor:
    cache = model.allocate_cache(1, len(tokens) + 4)
    return model(torch.tensor([tokens]), cache).logits[0]


@st.composite
def tree_batches(draw):
    """Two rows with different random trees (row 1 padded with isolated pad nodes)."""
    rows = []
    for _ in range(2):
        n = draw(st.integers(1, 12))
        parents = [-1] + [draw(st.integers(0, i - 1)) for i in range(1, n)]
        rows.append(parents)
    width = max(len(r) for r in rows) + draw(st.integers(0, 2))
    rows = [r + [-1] * (width - len(r)) for r in rows]
    prefix_lens = [draw(st.integers(1, 9)) for _ in rows]
    return rows, prefix_lens, draw(st.integers(0, 2**31 - 1))


@pytest.mark.parametrize("family", FAMILIES)
@settings(max_examples=6, deadline=None)
@given(batch=tree_batches())
@torch.no_grad()
def test_tree_verify_equals_path_prefill_and_commit_continues(family, batch):
    rows, prefix_lens, seed = batch
    model = _model(family)
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(seed)
    width = len(rows[0])
    parents = torch.tensor(rows)
    depth = node_depth(parents)
    tokens = torch.randint(0, vocab, (2, width), generator=gen)
    prefixes = [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in prefix_lens]

    # Rows have different committed lengths: prefill each row on its own, then stack the caches.
    cache = model.allocate_cache(2, 40)
    for b, prefix in enumerate(prefixes):
        single = model.allocate_cache(1, 40)
        model(torch.tensor([prefix]), single)
        _copy_row(cache, single, b)
    before = [(c.state.clone() if hasattr(c, "state") else None) for c in cache.layers]

    out = model(tokens, cache, parents=parents, depth=depth)
    for b in range(2):
        for i in range(width):
            if i > 0 and rows[b][i] < 0:
                continue  # pad node
            seq = prefixes[b] + tokens[b, root_path(rows[b], i)].tolist()
            ref = _fresh_logits(model, seq)[-1]
            diff = (out.logits[b, i] - ref).abs().max().item()
            assert diff <= 1e-4, f"{family} row {b} node {i}: verify vs path prefill diff {diff:.2e}"
    for c, old in zip(cache.layers, before):
        if old is not None:
            assert torch.equal(c.state, old), "tree verify wrote the committed GDN state"

    # Commit a random root-to-node path per row, then decode one more token.
    leaves = [int(torch.randint(0, len([p for j, p in enumerate(r) if j == 0 or p >= 0]), (1,), generator=gen))
              for r in rows]
    paths = [root_path(rows[b], leaves[b]) for b in range(2)]
    longest = max(len(p) for p in paths)
    path_t = torch.tensor([p + [-1] * (longest - len(p)) for p in paths])
    model.commit(cache, path_t, torch.tensor([len(p) for p in paths]))
    nxt = torch.randint(0, vocab, (2, 1), generator=gen)
    step = model(nxt, cache).logits[:, 0]
    for b in range(2):
        seq = prefixes[b] + tokens[b, paths[b]].tolist() + [int(nxt[b, 0])]
        ref = _fresh_logits(model, seq)[-1]
        diff = (step[b] - ref).abs().max().item()
        assert diff <= 1e-4, f"{family} row {b}: decode after commit vs fresh prefill diff {diff:.2e}"
        assert int(cache.lengths[b]) == len(prefixes[b]) + len(paths[b]) + 1


def _copy_row(dst, src, row: int) -> None:
    dst.lengths[row] = src.lengths[0]
    for d, s in zip(dst.layers, src.layers):
        for name in ("k", "v", "state", "conv"):
            if hasattr(d, name):
                getattr(d, name)[row].copy_(getattr(s, name)[0])
