"""The fused Triton tree verify (models.fast_verify) against Decoder.forward, run under Triton's interpreter.

Two caches start equal (rows of different committed lengths, stale K/V past them); the reference verifies
on one, FastVerifier on the other. Logits, final-norm hidden, captured layers and every K/V slot must
agree, neither may move `cache.lengths`, and after committing the same random path in both, one more
decode step must give the same logits.
"""

from __future__ import annotations

import os

import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # compiled on a GPU (fp32 models either way)
if DEVICE == "cpu":  # before triton loads: the kernels run in its interpreter on CPU
    os.environ.setdefault("TRITON_INTERPRET", "1")

import weaver  # noqa: E402
from weaver.models.fast_verify import FastVerifier  # noqa: E402
from weaver.models.fused_layer import ROPE_ATTENTION_MAX_NODES  # noqa: E402
from weaver.ops.tree import node_depth  # noqa: E402
from weaver.testing import assert_close, random_root_paths  # noqa: E402

TREES = {
    # row 0: a branching tree with a pad node at the end; row 1: a chain, a pad node in the middle
    "tree": [[-1, 0, 0, 1, 2, 1, 5, -1], [-1, 0, 1, -1, 2, 4, 5, 6]],
    "star": [[-1, 0, 0, 0, 0], [-1, 0, 0, -1, 0]],
    "root": [[-1], [-1]],  # plain decode through the tree path
    "deep": [  # 14 nodes, two pad nodes per row
        [-1, 0, 0, 1, -1, 3, 2, 6, 0, 8, 5, -1, 7, 1],
        [-1, 0, 1, 2, 3, 0, 5, -1, 4, 1, 9, 6, 10, -1],
    ],
}
_MODELS: dict[str, torch.nn.Module] = {}


def _model(preset: str):
    """A tiny random model whose RMSNorm weights (layer, qk and final norms) are random too, not ones."""
    if preset not in _MODELS:
        model = weaver.LLM.from_config(preset, seed=5, device=DEVICE, dtype="fp32").model
        gen = torch.Generator().manual_seed(6)
        for name, param in model.named_parameters():
            if "norm" in name:
                param.data.mul_(1 + 0.3 * torch.randn(param.shape, generator=gen).to(DEVICE))
        _MODELS[preset] = model
    return _MODELS[preset]


@pytest.mark.parametrize("tree", sorted(TREES))
@pytest.mark.parametrize("preset", ["tiny-llama", "tiny-qwen3"])
@torch.no_grad()
def test_fast_verify_matches_forward_then_commit_continues(preset, tree):
    model = _model(preset)
    gen = torch.Generator().manual_seed(len(tree) + len(preset))
    vocab = model.config.vocab_size
    parents = torch.tensor(TREES[tree], device=DEVICE)
    depth = node_depth(parents)
    ref_cache, fast_cache = model.allocate_cache(2, 32), model.allocate_cache(2, 32)
    prompt = torch.randint(0, vocab, (2, 9), generator=gen).to(DEVICE)
    model(prompt, ref_cache)
    model(prompt, fast_cache)
    for c in (ref_cache, fast_cache):  # row 1 keeps 5 committed tokens: slots 5..8 hold stale K/V
        c.lengths[1] = 5
    lengths = ref_cache.lengths.clone()
    tokens = torch.randint(0, vocab, parents.shape, generator=gen).to(DEVICE)

    want = model(tokens, ref_cache, parents=parents, depth=depth, capture_layers=(0, 2))
    got = FastVerifier(model)(tokens, fast_cache, parents, depth, capture_layers=(0, 2))
    assert got.logits.dtype == torch.float32
    assert_close("logits", want.logits, got.logits, 1e-5)
    assert_close("hidden", want.hidden, got.hidden, 1e-5)
    assert_close("captured", want.captured, got.captured, 1e-5)
    assert torch.equal(ref_cache.lengths, lengths) and torch.equal(fast_cache.lengths, lengths)
    for i, (a, b) in enumerate(zip(ref_cache.layers, fast_cache.layers)):  # tree slots written, nothing else
        assert_close(f"layer {i} k", a.k, b.k, 1e-5)
        assert_close(f"layer {i} v", a.v, b.v, 1e-5)

    path = random_root_paths(parents.cpu(), gen).to(DEVICE)
    accepted = (path >= 0).sum(1)
    model.commit(ref_cache, path, accepted)
    model.commit(fast_cache, path, accepted)
    nxt = torch.randint(0, vocab, (2, 1), generator=gen).to(DEVICE)
    assert_close("decode after commit", model(nxt, ref_cache).logits, model(nxt, fast_cache).logits, 1e-5)
    assert torch.equal(ref_cache.lengths, fast_cache.lengths)


@pytest.mark.parametrize("preset", ["tiny-llama", "tiny-qwen3"])
@torch.no_grad()
def test_fast_prefill_matches_forward(preset):
    """No parents: the tokens are a chain after the committed prefix (the engine's prefill), padded past
    `count`; `select` keeps the last real row. Same logits, hidden, captured layers and K/V as Decoder.forward
    (which also advances `cache.lengths`; the fused pass leaves it, as a verify does)."""
    model = _model(preset)
    gen = torch.Generator().manual_seed(11)
    tokens = torch.randint(0, model.config.vocab_size, (1, 40), generator=gen).to(DEVICE)
    select = torch.tensor([[29]], device=DEVICE)  # 30 real tokens, 10 pads
    ref_cache, fast_cache = model.allocate_cache(1, 64), model.allocate_cache(1, 64)
    want = model(tokens, ref_cache, select=select, capture_layers=(1,))
    got = FastVerifier(model)(tokens, fast_cache, select=select, capture_layers=(1,))
    assert got.logits.shape == want.logits.shape == (1, 1, model.config.vocab_size)
    assert_close("logits", want.logits, got.logits, 1e-5)
    assert_close("hidden", want.hidden, got.hidden, 1e-5)
    assert_close("captured", want.captured, got.captured, 1e-5)
    assert ref_cache.lengths.tolist() == [40] and fast_cache.lengths.tolist() == [0]
    for i, (a, b) in enumerate(zip(ref_cache.layers, fast_cache.layers)):
        assert_close(f"layer {i} k", a.k, b.k, 1e-5)
        assert_close(f"layer {i} v", a.v, b.v, 1e-5)


@torch.no_grad()
def test_fast_verify_without_capture_and_default_depth():
    model = _model("tiny-llama")
    parents = torch.tensor([[-1, 0, 1, 0]], device=DEVICE)
    tokens = torch.tensor([[3, 4, 5, 6]], device=DEVICE)
    ref_cache, fast_cache = model.allocate_cache(1, 16), model.allocate_cache(1, 16)
    want = model(tokens, ref_cache, parents=parents, depth=node_depth(parents))
    got = FastVerifier(model)(tokens, fast_cache, parents)
    assert got.captured is None and want.captured is None
    assert_close("logits", want.logits, got.logits, 1e-5)


def test_fast_verify_refuses_unsupported_models():
    llm = weaver.LLM.from_config("tiny-qwen3_5", seed=0, device="cpu", dtype="fp32")
    with pytest.raises(ValueError, match="GDN layers"):
        FastVerifier(llm.model)


@torch.no_grad()
def test_given_ancestor_mask_is_used_as_is():
    """`ancestors=` (a DraftTree's mask; a chain's is an expanded tril view) gives the results of the built one."""
    from weaver.speculative.tree import DraftTree

    model = _model("tiny-llama")
    tree = DraftTree.chain(torch.tensor([3, 4], device=DEVICE), torch.tensor([[5, 6, 7], [8, 9, 10]], device=DEVICE))
    assert tree.ancestors.stride(0) == 0
    caches = [model.allocate_cache(2, 16) for _ in range(3)]
    want = model(tree.tokens, caches[0], parents=tree.parents, depth=tree.depth)
    given = model(tree.tokens, caches[1], parents=tree.parents, depth=tree.depth, ancestors=tree.ancestor_mask())
    fast = FastVerifier(model)(tree.tokens, caches[2], tree.parents, tree.depth, ancestors=tree.ancestor_mask())
    assert torch.equal(want.logits, given.logits)
    assert_close("fast verify", want.logits, fast.logits, 1e-5)


def _random_parents(n: int, seed: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return [-1] + [int(torch.randint(0, j, (1,), generator=gen)) for j in range(1, n)]


@pytest.mark.parametrize(
    ("nodes", "head_dim", "launches"),
    [
        pytest.param(ROPE_ATTENTION_MAX_NODES, None, {"rope_table", "tree_attention_rope"}, id="at-the-limit"),
        pytest.param(ROPE_ATTENTION_MAX_NODES + 1, None, {"qkv_rope_kv", "tree_attention"}, id="past-it"),
        pytest.param(ROPE_ATTENTION_MAX_NODES + 1, 12, {"tree_rope_kv_write", "tree_attention"}, id="past-it-hd12"),
    ],
)
@pytest.mark.parametrize("packed", [False, True], ids=["contiguous", "packed-fields"])
@torch.no_grad()
def test_rope_and_kv_write_sit_by_tree_size(nodes, head_dim, launches, packed, monkeypatch):
    """Up to ROPE_ATTENTION_MAX_NODES nodes the tree attention ropes and writes K/V itself; past it the qkv GEMM
    does (qkv_rope_kv), or a launch of its own where qkv_rope_kv cannot tile the head dim (12). Every way gives
    the reference's logits and K/V, also when tokens / parents / depth are strided field views of one [B, T, 4]
    buffer, as the device weaver builder hands them (the kernels once read depth as if packed: wrong positions)."""
    if head_dim is None:
        model = _model("tiny-qwen3")
    else:
        from weaver.models.presets import preset_config

        model = weaver.LLM.from_config(preset_config("tiny-llama", head_dim=head_dim), seed=5, device=DEVICE,
                                       dtype="fp32").model  # fmt: skip
    verifier = FastVerifier(model)
    assert verifier.qkv_rope == (head_dim is None)
    launched = []

    def spy(name):
        real = getattr(verifier.kernels, name)
        return lambda *args, **kw: launched.append(name) or real(*args, **kw)

    for name in ("rope_table", "tree_attention_rope", "tree_attention", "qkv_rope_kv", "tree_rope_kv_write"):
        monkeypatch.setattr(verifier.kernels, name, spy(name))
    parents = torch.tensor([_random_parents(nodes, nodes)], device=DEVICE)
    tokens = (torch.arange(3, 3 + nodes, device=DEVICE) % model.config.vocab_size)[None]
    depth = node_depth(parents)
    ref_cache, fast_cache = model.allocate_cache(1, 48), model.allocate_cache(1, 48)
    prompt = torch.tensor([[5, 6, 7, 8, 9]], device=DEVICE)
    model(prompt, ref_cache)
    model(prompt, fast_cache)
    want = model(tokens, ref_cache, parents=parents, depth=depth)
    if packed:  # parent, token, depth, candidate row of node j side by side (weaver's Frontier.nodes)
        fields = torch.stack([parents, tokens, depth, torch.full_like(depth, 999)], dim=-1)
        parents, tokens, depth, _ = fields.unbind(-1)
        assert depth.stride(1) == 4
    got = verifier(tokens, fast_cache, parents, depth)
    assert set(launched) == launches
    assert_close("logits", want.logits, got.logits, 1e-5)
    for i, (a, b) in enumerate(zip(ref_cache.layers, fast_cache.layers)):
        assert_close(f"layer {i} k", a.k, b.k, 1e-5)
        assert_close(f"layer {i} v", a.v, b.v, 1e-5)
