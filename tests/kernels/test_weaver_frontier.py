"""The device weaver builder's Triton bookkeeping (weaver.kernels.triton.weaver_frontier) vs its tensor-op path.

CPU: the kernels run under TRITON_INTERPRET=1 inside `build_weaver_device` (FRONTIER_KERNELS forced on); the
trees must equal the tensor-op path's and the host builder's. GPU (`--triton-full`): the same, compiled,
on CUDA, plus one case at the benchmark's shapes (d_rank 512, pool 512, budget 64, w 4, c 8).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from helpers.triton_env import DEVICE, FULL  # sets TRITON_INTERPRET before triton loads
from hypothesis import given, settings
from hypothesis import strategies as st

import weaver.speculative.weaver as weaver_module
import weaver.speculative.weaver_builder_device as device_builder
from weaver.kernels.weaver_frontier import frontier_pop, node_inputs
from weaver.speculative.weaver_builder import build_weaver
from weaver.speculative.weaver_builder_device import build_weaver_device

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spec"))
from helpers.adapters import bound, make_adapter, make_inputs  # noqa: E402
from helpers.trees import assert_same_tree  # noqa: E402

VOCAB = 23


def _args(batch: int, depth: int, max_depth: int, pool: int, seed: int, layers: int) -> tuple[tuple, dict]:
    inp = {k: v.to(DEVICE) for k, v in make_inputs(batch, depth, VOCAB, seed=seed).items()}
    ad = bound(make_adapter(VOCAB, max_depth=max_depth, pool=pool, seed=seed, layers=layers).to(DEVICE), inp)
    ad.candidate_table = True
    kw = {"adapter": ad, "target_hidden": inp["target_hidden"], "draft_hidden": inp["draft_hidden"]}
    return (inp["root"], inp["marginals"]), kw


def _trees(args, kw, budget, w, c):
    """The device builder's tree with the Triton bookkeeping and with its tensor ops."""
    trees, calls, adapter = [], [], kw["adapter"]
    prepared = adapter.step_top_prepared
    adapter.step_top_prepared = lambda *a, **k: calls.append(a[1].shape) or prepared(*a, **k)
    try:
        for forced in (True, False):
            device_builder.FRONTIER_KERNELS = forced
            trees.append(build_weaver_device(*args, budget, w=w, c=c, **kw))
    finally:
        device_builder.FRONTIER_KERNELS = None
        del adapter.step_top_prepared
    assert calls or trees[0].size == 1  # the kernel loop ran (every tree beyond the root has pop rounds)
    return trees


@settings(max_examples=4 if FULL else 12, deadline=None, derandomize=True)
@given(
    budget=st.sampled_from([1, 8, 32, 64]),
    w=st.integers(1, 4),
    c=st.integers(1, 8),
    batch=st.sampled_from([1, 3]),
    depth=st.integers(1, 6),
    max_depth=st.integers(1, 5),
    pool=st.integers(3, 9),
    layers=st.integers(1, 2),
    seed=st.integers(0, 2**16),
)
def test_frontier_kernels_build_the_same_trees(budget, w, c, batch, depth, max_depth, pool, layers, seed) -> None:
    """pop / node inputs / push in Triton give the tensor-op path's tree and the host builder's."""
    args, kw = _args(batch, depth, max_depth, pool, seed, layers)
    fused, plain = _trees(args, kw, budget, w, c)
    what = f"B{batch} budget {budget} w {w} c {c} D {depth} max_depth {max_depth} K {pool} layers {layers}"
    assert_same_tree(plain, fused, what)
    if not FULL:  # on CUDA the host builder's torch scoring rounds differently from the fused tail (near-ties)
        assert_same_tree(build_weaver(*args, budget, w=w, c=c, **kw), fused, what + " (host)")


@pytest.mark.skipif(not FULL, reason="benchmark shapes: compiled kernels (GPU run)")
def test_frontier_kernels_at_benchmark_shapes() -> None:
    from weaver.models.config import ModelConfig
    from weaver.speculative.weaver import WeaverAdapter

    vocab, ht = 49152, 576
    target = ModelConfig(vocab_size=vocab, hidden_size=ht, intermediate_size=1536, num_hidden_layers=1)
    ad = WeaverAdapter.random(target, d_rank=512, num_heads=8, mlp_dim=1024, max_depth=15, pool_size=512)
    gen = torch.Generator().manual_seed(0)
    ad.bind(torch.randn(vocab, ht, generator=gen), torch.randn(vocab, ht, generator=gen) * 0.05)
    ad = ad.to(DEVICE)
    ad.bind(ad._embed.to(DEVICE), torch.randn(vocab, ht, generator=gen).to(DEVICE) * 0.05)
    kw = {"adapter": ad, "target_hidden": torch.randn(1, ht, generator=gen).to(DEVICE),
          "draft_hidden": torch.randn(1, 15, ht, generator=gen).to(DEVICE)}  # fmt: skip
    args = (torch.tensor([7], device=DEVICE), (torch.randn(1, 15, vocab, generator=gen) * 3).to(DEVICE))
    fused, plain = _trees(args, kw, 64, 4, 8)
    assert_same_tree(plain, fused, "benchmark shapes")


# torch.compile backends: inductor as the engine's build stage on CUDA; interpreted on the CPU, aot_eager (dynamo
# + functionalization of the mutating custom ops; a cold inductor cache spends ~40 s a test in its C++ builds)
# and inductor with `make test-slow`
BACKENDS = ["inductor"] if FULL else ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)]
PUSH_COMPILED = [pytest.param(32, 3, 4, 1, "inductor")] if FULL else [
    pytest.param(32, 3, 4, 1, "aot_eager"), pytest.param(32, 3, 4, 1, "inductor", marks=pytest.mark.slow)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_frontier_kernels_under_torch_compile(backend) -> None:
    """The mutating custom ops inside a torch.compile'd builder (how the engine's build stage runs them on
    CUDA: functionalized, then re-inplaced by inductor) give the eager tree."""
    args, kw = _args(2, 5, 4, 6, 3, 1)
    try:
        device_builder.FRONTIER_KERNELS = True
        eager = build_weaver_device(*args, 8, w=2, c=3, **kw)
        compiled = torch.compile(lambda root, logits: build_weaver_device(root, logits, 8, w=2, c=3, **kw),
                                 backend=backend)
        tree = compiled(*args)
    finally:
        device_builder.FRONTIER_KERNELS = None
        torch._dynamo.reset()
    assert_same_tree(eager, tree, "compiled")


@pytest.mark.parametrize(("budget", "w", "c", "seed", "backend"),
                         [(8, 1, 3, 0, None), (64, 4, 8, 2, None)] + PUSH_COMPILED)
def test_push_inside_the_scoring_tail_builds_the_same_trees(monkeypatch, budget, w, c, seed, backend) -> None:
    """With the fused scoring tail (forced on: its kernels run under the interpreter on CPU), pushing the
    children inside its second launch gives the tree of pushing them after it, eagerly and (one case)
    torch.compile'd."""
    args, kw = _args(2, 5, 4, 6, seed, 2)
    pushed = []
    monkeypatch.setattr(weaver_module, "fused_pool_top_ready", lambda x: True)
    fused_push = weaver_module.fused_pool_top_push
    monkeypatch.setattr(weaver_module, "fused_pool_top_push", lambda *a: pushed.append(1) or fused_push(*a))
    monkeypatch.setattr(device_builder, "FRONTIER_KERNELS", True)
    monkeypatch.setattr(device_builder, "FUSED_PUSH", True)
    inside = build_weaver_device(*args, budget, w=w, c=c, **kw)
    assert pushed  # the fused push ran
    in_graph = inside
    if backend:  # one case through torch.compile (the mutating custom op, as the engine's build stage)
        compiled = torch.compile(lambda root, logits: build_weaver_device(root, logits, budget, w=w, c=c, **kw),
                                 backend=backend)
        try:
            in_graph = compiled(*args)
        finally:
            torch._dynamo.reset()
    monkeypatch.setattr(device_builder, "FUSED_PUSH", False)  # the tail's top-c, then frontier_push's launch
    after = build_weaver_device(*args, budget, w=w, c=c, **kw)
    assert_same_tree(after, inside, f"budget {budget} w {w} c {c}")
    assert_same_tree(after, in_graph, f"budget {budget} w {w} c {c} (compiled)")
    monkeypatch.setattr(device_builder, "FUSED_POP", False)  # and the node inputs in a launch of their own
    assert_same_tree(after, build_weaver_device(*args, budget, w=w, c=c, **kw), f"budget {budget} (unfused pop)")


def test_pop_with_node_inputs_equals_pop_then_node_inputs(monkeypatch) -> None:
    """Every pop of a build, with the node inputs in its launch, against the two launches on copies of every
    buffer: the same results, and every buffer (frontier, nodes, visibility, K/V) written alike."""
    args, kw = _args(2, 5, 4, 6, 3, 2)
    fused, checked = device_builder.frontier_pop_inputs, []

    def both(*a):
        copies = [t.clone() if isinstance(t, torch.Tensor) else t for t in a]
        got = fused(*a)
        popped = frontier_pop(*copies[:10])
        want = (*popped, *node_inputs(popped[0], *copies[10:]))
        assert len(got) == len(want) == 7 and all(torch.equal(g, x) for g, x in zip(got, want, strict=True))
        assert all(torch.equal(t, c) for t, c in zip(a, copies, strict=True) if isinstance(t, torch.Tensor))
        checked.append(1)
        return got

    monkeypatch.setattr(device_builder, "frontier_pop_inputs", both)
    monkeypatch.setattr(device_builder, "FRONTIER_KERNELS", True)
    monkeypatch.setattr(device_builder, "FUSED_POP", True)
    tree = build_weaver_device(*args, 32, w=3, c=4, **kw)
    assert len(checked) > 1 and tree.size > 1
