"""The device weaver builder's Triton loop (weaver.kernels.triton.weaver_frontier and the push inside
weaver.kernels.triton.pool_top) vs its torch reference (weaver.ops.weaver_frontier).

CPU: the kernels run under TRITON_INTERPRET=1 (kernels="triton"); the trees must equal the reference loop's
(the same adapter kernels, the torch bookkeeping) and the host reference builder's. GPU
(`--triton-full`): the same, compiled, on CUDA, plus one case at the benchmark's shapes (d_rank 512,
pool 512, budget 64, w 4, c 8). Both adapter variants: the older (pos_emb, GELU: the round's candidate table)
and the released one (RoPE: the vocabulary's rows, q / k rotated as a node reads them, blocks after the first
rotate theirs; SwiGLU).
"""

from __future__ import annotations

import pytest
import torch
from helpers.adapters import TORCH, TRITON, bound, make_adapter, make_inputs
from helpers.trees import assert_same_tree
from helpers.triton_env import DEVICE, FULL  # sets TRITON_INTERPRET before triton loads
from hypothesis import given, settings
from hypothesis import strategies as st

import weaver.speculative.builders.frontier as frontier_module
from weaver.speculative.builders.weaver import build_weaver, build_weaver_reference

VOCAB = 23


@pytest.fixture(autouse=True)
def finish_in_torch(monkeypatch):
    """On CPU the block's MLP runs its torch reference here: interpreted, its three GEMV launches a block (tested
    in test_adapter_finish.py) would take most of this file's time and add nothing to the frontier's tests."""
    if FULL:
        return
    import weaver.speculative.weaver as weaver_module
    from weaver.kernels.adapter_finish import fused_finish

    monkeypatch.setattr(weaver_module, "fused_finish", lambda block, x, attn, options: fused_finish(block, x, attn,
                                                                                                      TORCH))


def _args(batch: int, depth: int, max_depth: int, pool: int, seed: int, layers: int,
          released: bool = False) -> tuple[tuple, dict, dict]:  # fmt: skip
    """A build's arguments (and the inputs behind them); the adapter (the released variant with `released`) runs
    its kernels (so it has the candidate table)."""
    inp = {k: v.to(DEVICE) for k, v in make_inputs(batch, depth, VOCAB, seed=seed).items()}
    ad = make_adapter(VOCAB, max_depth=max_depth, pool=pool, seed=seed, layers=layers, released=released)
    ad = bound(ad.to(DEVICE), inp, TRITON)
    kw = {"adapter": ad, "target_hidden": inp["target_hidden"], "draft_hidden": inp["draft_hidden"]}
    return (inp["root"], inp["marginals"]), kw, inp


def _trees(args, kw, budget, w, c):
    """The device builder's tree with the Triton loop and with the reference loop (the same adapter, its
    kernels and candidate table: only the bookkeeping differs)."""
    calls = []
    pop = frontier_module.frontier_pop_inputs
    frontier_module.frontier_pop_inputs = lambda *a, **k: calls.append(a[0].shape) or pop(*a, **k)
    try:
        fused = build_weaver(*args, budget, w=w, c=c, options=TRITON, **kw)
        assert calls or fused.size == 1  # the Triton loop ran (every tree beyond the root has pop rounds)
        calls.clear()
        plain = build_weaver(*args, budget, w=w, c=c, options=TORCH, **kw)
        assert not calls  # ... and the reference loop did not use it
    finally:
        frontier_module.frontier_pop_inputs = pop
    return fused, plain


@settings(max_examples=4 if FULL else 8, deadline=None, derandomize=True)
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
    """pop + node inputs and the push in Triton give the reference loop's tree and the host reference's."""
    args, kw, inp = _args(batch, depth, max_depth, pool, seed, layers)
    fused, plain = _trees(args, kw, budget, w, c)
    what = f"B{batch} budget {budget} w {w} c {c} D {depth} max_depth {max_depth} K {pool} layers {layers}"
    assert_same_tree(plain, fused, what)
    if not FULL:  # on CUDA the torch scoring rounds differently from the fused kernels (near-ties)
        bound(kw["adapter"], inp, TORCH)  # the host reference with the torch references throughout
        assert_same_tree(build_weaver_reference(*args, budget, w=w, c=c, **kw), fused, what + " (reference)")


@pytest.mark.parametrize(("budget", "w", "c", "batch", "depth", "layers", "seed"),
                         [(8, 2, 3, 1, 5, 2, 11), (16, 3, 2, 2, 3, 1, 12)])  # fmt: skip
def test_frontier_kernels_build_the_same_trees_released(budget, w, c, batch, depth, layers, seed) -> None:
    """The same for the released variant: RoPE (the candidate table's q / k rotated, a second block rotating its
    own) and SwiGLU. The host reference computes its rows with other GEMMs than the table, so its log p may differ
    by a few ulps of the logits (rtol)."""
    args, kw, inp = _args(batch, depth, 4, 6, seed, layers, released=True)
    fused, plain = _trees(args, kw, budget, w, c)
    what = f"released B{batch} budget {budget} w {w} c {c} D {depth} layers {layers}"
    assert_same_tree(plain, fused, what)
    if not FULL:
        bound(kw["adapter"], inp, TORCH)
        assert_same_tree(build_weaver_reference(*args, budget, w=w, c=c, **kw), fused, what + " (reference)", 1e-6)


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
    ad.bind(ad._embed.to(DEVICE), torch.randn(vocab, ht, generator=gen).to(DEVICE) * 0.05, options=TRITON)
    kw = {"adapter": ad, "target_hidden": torch.randn(1, ht, generator=gen).to(DEVICE),
          "draft_hidden": torch.randn(1, 15, ht, generator=gen).to(DEVICE)}  # fmt: skip
    args = (torch.tensor([7], device=DEVICE), (torch.randn(1, 15, vocab, generator=gen) * 3).to(DEVICE))
    fused, plain = _trees(args, kw, 64, 4, 8)
    assert_same_tree(plain, fused, "benchmark shapes")


@pytest.mark.parametrize(("budget", "w", "c", "seed", "released"),
                         [(8, 1, 3, 0, False), (32, 3, 4, 1, True), (64, 8, 8, 2, False)])  # fmt: skip
def test_push_inside_the_scoring_tail_builds_the_same_trees(monkeypatch, budget, w, c, seed, released) -> None:
    """The Triton loop pushes the children inside the scoring tail's second launch (`fused_pool_top_push`): the
    reference loop's tree (which pushes with `weaver.ops.weaver_frontier.frontier_push`), with two blocks."""
    import weaver.speculative.weaver as weaver_module

    args, kw, _ = _args(2, 5, 4, 6, seed, 2, released)
    pushed = []
    fused_push = weaver_module.fused_pool_top_push
    monkeypatch.setattr(weaver_module, "fused_pool_top_push", lambda *a: pushed.append(1) or fused_push(*a))
    fused, plain = _trees(args, kw, budget, w, c)
    assert pushed  # the fused push ran
    assert_same_tree(plain, fused, f"budget {budget} w {w} c {c}")


# torch.compile backends: inductor as the engine's build stage on CUDA; interpreted on the CPU, aot_eager (dynamo
# + functionalization of the mutating custom ops; a cold inductor cache spends ~40 s a test in its C++ builds)
# and inductor with `make test-slow`
BACKENDS = ["inductor"] if FULL else ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)]


@pytest.mark.parametrize("released", [False, True], ids=["learned", "released"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_frontier_kernels_under_torch_compile(backend, released) -> None:
    """The mutating custom ops inside a torch.compile'd builder (how the engine's build stage runs them on
    CUDA: functionalized, then re-inplaced by inductor) give the eager tree, with either source of node rows."""
    args, kw, _ = _args(2, 5, 4, 6, 3, 1, released)
    eager = build_weaver(*args, 8, w=2, c=3, options=TRITON, **kw)
    compiled = torch.compile(lambda root, logits: build_weaver(root, logits, 8, w=2, c=3, options=TRITON, **kw),
                             backend=backend)
    try:
        tree = compiled(*args)
    finally:
        torch._dynamo.reset()
    assert_same_tree(eager, tree, "compiled")


@pytest.mark.parametrize(("released", "columns"), [(False, 512), (True, 512), (True, 4)])
def test_pop_with_node_inputs_equals_the_reference(monkeypatch, released, columns) -> None:
    """Every pop of a build, the kernel (pop and node inputs in one launch) against the torch reference
    (`frontier_pop`, then `node_inputs`) on copies of every buffer: the same results, and every buffer
    (frontier, nodes, count, visibility, K/V) written alike, bit for bit. The released variant (RoPE) reads the
    vocabulary's rows by token and rotates q / k in the kernel; the older one reads the round's table. columns 4:
    the node inputs in passes of 4 columns (a head's RoPE partner in another pass), as d_rank 2048 runs in 512s."""
    import weaver.kernels.triton.weaver_frontier as kernel_module

    monkeypatch.setattr(kernel_module, "COLUMNS_PER_PASS", columns)
    args, kw, _ = _args(2, 5, 4, 6, 3, 2, released)
    assert kw["adapter"].config.d_rank > columns or columns == 512  # 512: one pass here
    kernel, checked = frontier_module.frontier_pop_inputs, []

    def both(*a):
        *a, options, rope = a
        assert options is TRITON and (rope is not None) == released
        copies = [t.clone() if isinstance(t, torch.Tensor) else t for t in a]
        got = kernel(*a, options, rope)
        want = kernel(*copies, TORCH, rope)  # the dispatcher's reference (ties to the lowest column, as the kernel)
        assert len(got) == len(want) == 7 and all(torch.equal(g, x) for g, x in zip(got, want, strict=True))
        assert all(torch.equal(t, c) for t, c in zip(a, copies, strict=True) if isinstance(t, torch.Tensor))
        checked.append(1)
        return got

    monkeypatch.setattr(frontier_module, "frontier_pop_inputs", both)
    tree = build_weaver(*args, 32, w=3, c=4, options=TRITON, **kw)
    assert len(checked) > 1 and tree.size > 1


def _kernel_lines(body: str) -> list[str]:
    """The launches of inductor's `call` (its generated kernels and the custom ops), in order, by name."""
    names = []
    for line in body.splitlines():
        line = line.strip().split(" = ", 1)[-1]
        if line.startswith(("cpp_fused_", "triton_", "torch.ops.weaver.")):
            names.append(line.split("(", 1)[0].removesuffix(".run").removesuffix(".default"))
    return names


def test_compiled_step_loop_launches_only_its_kernels(monkeypatch) -> None:
    """Between the first pop and the last, the compiled build launches the step's own kernels and nothing that
    inductor generates: a generated kernel there sits on every step's critical path (session 54 removed one that
    recomputed a constant prefix mask before each pop: 15 launches of a 64-node build)."""
    from helpers.inductor import compiled_call

    import weaver.speculative.weaver as weaver_module
    from weaver.kernels.adapter_finish import fused_finish

    monkeypatch.setattr(weaver_module, "fused_finish", fused_finish)  # the block's MLP as the engine runs it
    args, kw, _ = _args(1, 5, 4, 6, 3, 1, True)
    build = torch.compile(lambda root, logits: build_weaver(root, logits, 8, w=2, c=3, options=TRITON, **kw))
    try:
        tree, body = compiled_call(build, *args)
    finally:
        torch._dynamo.reset()
    assert tree.size > 1
    names = _kernel_lines(body)
    pops = [i for i, n in enumerate(names) if n.endswith("frontier_pop_inputs")]
    assert len(pops) > 1, names
    loop = names[pops[0] : pops[-1] + 1]
    generated = [n for n in loop if not n.startswith("torch.ops.weaver.")]
    assert not generated, f"inductor kernels inside the step loop: {generated}"
