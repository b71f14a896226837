"""GDN caches stacked across layers, and the commit of every GDN layer at once.

The layers' states and conv windows are views of `ModelCache.stacked_gdn`; a tree verify leaves every layer's
commit inputs in one `GDNTreeScratch`, which `Decoder.commit` folds in two launches (kernels="triton", the
interpreter on CPU) or layer by layer (kernels="torch"). Both must give the per-layer commit's caches and keep
greedy speculative decoding token for token equal to greedy `ar`.
"""

from __future__ import annotations

import pytest
import torch
from helpers.drafters import oracle_generate
from helpers.triton_env import DEVICE  # sets TRITON_INTERPRET before triton loads

import weaver
from weaver.models.cache import GDNCache, ModelCache
from weaver.models.config import ModelConfig
from weaver.models.loading import build_model, init_random_weights
from weaver.models.presets import preset_config
from weaver.ops.tree import node_depth
from weaver.options import RuntimeOptions
from weaver.testing import assert_close, root_path

TORCH, TRITON = RuntimeOptions(kernels="torch"), RuntimeOptions(kernels="triton")
OPTIONS = {"torch": TORCH, "triton": TRITON}
_MODEL: list[torch.nn.Module] = []


def _model() -> torch.nn.Module:
    """tiny-qwen3_5 with six layers: three GDN layers, so the stacks hold several."""
    if not _MODEL:
        cfg = ModelConfig.from_hf(preset_config("tiny-qwen3_5", num_hidden_layers=6))
        _MODEL.append(init_random_weights(build_model(cfg, DEVICE), seed=3).eval())
    return _MODEL[0]


def _copy(cache: ModelCache) -> ModelCache:
    """A cache with the same committed contents in new memory."""
    model = _model()
    new = model.allocate_cache(cache.batch_size, cache.capacity)
    new.lengths.copy_(cache.lengths)
    for dst, src in zip((*new.stacked_kv, *new.stacked_gdn), (*cache.stacked_kv, *cache.stacked_gdn), strict=True):
        dst.copy_(src)
    return new


def test_gdn_layers_are_views_of_the_stacks() -> None:
    model = _model()
    cache = model.allocate_cache(2, 16)
    states, convs = cache.stacked_gdn
    gdn = [layer for layer in cache.layers if isinstance(layer, GDNCache)]
    assert len(gdn) == states.shape[0] == convs.shape[0] == 3
    for i, layer in enumerate(gdn):
        assert layer.index == i
        assert layer.state.data_ptr() == states[i].data_ptr() and layer.conv.data_ptr() == convs[i].data_ptr()
        layer.state.fill_(1.0)
        layer.conv.fill_(2.0)
    assert bool((states == 1).all()) and bool((convs == 2).all())
    cache.reset()
    assert not states.any() and not convs.any() and cache.gdn_tree is None


@pytest.mark.parametrize("kernels", ["triton", "torch"])
@torch.no_grad()
def test_stacked_commit_equals_the_per_layer_commit(kernels) -> None:
    """Two rows with different trees and paths (one -1 padded): the stacked commit gives the caches of each
    layer's own commit (`GatedDeltaNet.commit`), and the next decode step the same logits."""
    model = _model()
    model.options = OPTIONS[kernels]
    try:
        gen = torch.Generator().manual_seed(0)
        vocab = model.config.vocab_size
        rows = [[-1, 0, 1, 1, 3, 2, 5, -1], [-1, 0, 0, 2, 3, 4, 1, 6]]  # row 0 ends with a pad node
        parents = torch.tensor(rows, device=DEVICE)
        tokens = torch.randint(0, vocab, (2, 8), generator=gen).to(DEVICE)
        cache = model.allocate_cache(2, 32)
        model(torch.randint(0, vocab, (2, 5), generator=gen).to(DEVICE), cache)
        paths = [root_path(rows[0], 6), root_path(rows[1], 3)]
        width = max(len(p) for p in paths)
        path = torch.tensor([p + [-1] * (width - len(p)) for p in paths], device=DEVICE)
        counts = torch.tensor([len(p) for p in paths], device=DEVICE)
        caches = [cache, _copy(cache)]
        for c in caches:
            model(tokens, c, parents=parents, depth=node_depth(parents))
            assert c.gdn_tree is not None and c.gdn_tree.k.shape[:3] == (3, 2, 8)
            first = next(layer for layer in c.layers if isinstance(layer, GDNCache))
            assert first.aux.k.data_ptr() == c.gdn_tree.k[0].data_ptr()  # the layer wrote its slot
        stacked, per_layer = caches
        model.commit(stacked, path, counts)  # every layer at once
        per_layer.gdn_tree = None  # the per-layer loop
        model.commit(per_layer, path, counts)
        for name, a, b in zip(("states", "convs"), stacked.stacked_gdn, per_layer.stacked_gdn, strict=True):
            assert_close(name, b, a, 1e-5)
        nxt = torch.randint(0, vocab, (2, 1), generator=gen).to(DEVICE)
        assert_close("logits after commit", model(nxt, per_layer).logits, model(nxt, stacked).logits, 1e-5)
    finally:
        model.options = TORCH


@pytest.fixture(scope="module", params=["triton", "torch"])
def llm(request):
    return weaver.LLM.from_config("tiny-qwen3_5", random_weights=True, seed=7, drafter="random", adapter=None,
                                  device=DEVICE, dtype="fp32", options=OPTIONS[request.param])  # fmt: skip


@pytest.mark.parametrize("method", ["chain", "ddtree"])
def test_random_drafter_greedy_equals_ar(llm, method) -> None:
    prompt = [60, 61, 62, 63, 64, 65, 66, 67, 68]
    ref = llm.generate(prompt, max_new_tokens=10, ignore_eos=True).token_ids
    out = llm.generate(prompt, method=method, budget=8, max_new_tokens=10, ignore_eos=True)
    assert out.token_ids == ref


def test_long_accepted_paths_stay_lossless(llm, monkeypatch) -> None:
    """An oracle drafter gets long paths accepted: every round commits several nodes through the stacked commit
    (with kernels="triton": the two launches for all layers, counted)."""
    from weaver.kernels.triton import gdn_commit

    folds: list[int] = []
    kernel = gdn_commit.gdn_tree_commit_stacked
    monkeypatch.setattr(gdn_commit, "gdn_tree_commit_stacked", lambda *a: folds.append(a[0].shape[0]) or kernel(*a))
    ref, got, stats = oracle_generate(llm, [5, 17, 42, 8], "chain", 8, 24, depth=8, seed=1)
    assert got == ref
    assert stats.tau > 2.0, f"oracle drafts were not accepted (tau {stats.tau:.2f})"
    if llm.options.force_triton:
        assert len(folds) == stats.rounds and set(folds) == {2}  # one launch a round for both GDN layers
    else:
        assert not folds
