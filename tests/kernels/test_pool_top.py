"""The fused Weaver step tail (weaver.kernels.triton.pool_top) vs its torch reference (`weaver.ops.pool_top`).

CPU: the two kernels run under TRITON_INTERPRET=1 at small sizes. GPU (`--triton-full`): compiled, at
the benchmark's adapter (d_rank 512, pool 512, c 8, SmolLM2's vocabulary). The reference is `score_pool` ->
log_softmax -> top-k -> token gather (`pool_top`), which `step_top` runs where the kernels do not; the push
inside the tail's second launch is compared with `weaver.ops.weaver_frontier.frontier_push`.
"""

from __future__ import annotations

import pytest
import torch
from helpers.triton_env import DEVICE, FULL  # sets TRITON_INTERPRET before triton loads
from hypothesis import given, settings
from hypothesis import strategies as st

from weaver.kernels.pool_top import fused_pool_top, fused_pool_top_push, pool_top_op, pool_top_push_op
from weaver.kernels.triton.pool_top import pool_top
from weaver.models.config import ModelConfig
from weaver.ops import pool_top as reference
from weaver.ops.weaver_frontier import frontier_push
from weaver.options import RuntimeOptions
from weaver.speculative.weaver import WeaverAdapter
from weaver.testing import assert_close

TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}
TORCH, TRITON = RuntimeOptions(kernels="torch"), RuntimeOptions(kernels="triton")


def _case(b, w, d, k, depth, vocab, dtype, bias, seed):
    """A bound random adapter, its outputs y [B, w, d] and one round's pools."""
    target = ModelConfig(vocab_size=vocab, hidden_size=24, intermediate_size=32, num_hidden_layers=1)
    adapter = WeaverAdapter.random(target, d_rank=d, num_heads=2, mlp_dim=8, max_depth=depth, pool_size=k,
                                   seed=seed, norm_bias=bias)
    gen = torch.Generator().manual_seed(seed)
    adapter.bind(torch.randn(vocab, 24, generator=gen), torch.randn(vocab, 24, generator=gen) * 0.3)
    adapter = adapter.to(device=DEVICE, dtype=dtype)
    adapter.bind(adapter._embed.to(DEVICE, dtype), torch.randn(vocab, 24, generator=gen).to(DEVICE, dtype) * 0.3)
    y = (torch.randn(b, w, d, generator=gen) * 2).to(DEVICE, dtype)
    pool_ids = torch.stack([torch.randperm(vocab, generator=gen)[:k] for _ in range(b * depth)]).view(b, depth, k)
    pool_prior = torch.randn(b, depth, k, generator=gen) * 2
    pool = torch.randint(0, depth, (b, w), generator=gen)
    return adapter, y, pool_ids.to(DEVICE), pool_prior.to(DEVICE), pool.to(DEVICE)


@torch.no_grad()
def _torch_path(adapter, y, pool_ids, pool_prior, pool, c):
    """The reference's full log-probs [B, w, K] (for the tie gaps) and its top c, tokens and indices [B w, c]."""
    rows = torch.arange(y.shape[0], device=y.device)[:, None].expand(pool.shape)
    ids = pool_ids[rows, pool]
    logp = torch.log_softmax(adapter.score_pool(y, ids, pool_prior[rows, pool]), dim=-1)
    return logp, *reference.pool_top(*_flat_args(adapter, y, pool_ids, pool_prior, pool, c))


def _flat_args(adapter, y, pool_ids, pool_prior, pool, c):
    """pool_top's arguments (node rows flattened to [B w])."""
    b, w, d = y.shape
    norm = adapter.out_norm
    return (y.reshape(b * w, d), norm.weight, norm.bias, norm.eps, adapter.residual_lm_head, pool_ids, pool_prior,
            pool.reshape(-1), c)  # fmt: skip


@settings(max_examples=8 if FULL else 20, deadline=None)
@given(
    b=st.integers(1, 2),
    w=st.integers(1, 4) if not FULL else st.sampled_from([4, 8]),
    d=st.sampled_from([512]) if FULL else st.sampled_from([8, 16, 24]),
    k=st.sampled_from([512]) if FULL else st.integers(2, 40),
    depth=st.integers(1, 4),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    bias=st.booleans(),
    seed=st.integers(0, 10_000),
    data=st.data(),
)
def test_pool_top_matches_the_reference(b, w, d, k, depth, dtype, bias, seed, data):
    vocab = 49152 if FULL else k + 7
    c = data.draw(st.integers(1, min(k, 8)))
    adapter, y, pool_ids, pool_prior, pool = _case(b, w, d, k, depth, vocab, dtype, bias, seed)
    norm = adapter.out_norm
    got_lp, got_tok, got_ix = pool_top(y.reshape(b * w, d), norm.weight, norm.bias, norm.eps, adapter.residual_lm_head,
                               pool_ids, pool_prior, pool.reshape(-1), c)
    logp, want_lp, want_tok, want_ix = _torch_path(adapter, y, pool_ids, pool_prior, pool, c)
    assert got_lp.dtype == torch.float32 and got_tok.dtype == torch.int64
    # log p = logit - logsumexp: its rounding error scales with the logits (O(1)), not with log p itself, which
    # is ~0 when one child takes almost all the mass (a fixed seed: 8e-8 off a log p of -0.0071 in fp32)
    assert_close("top log p", want_lp.reshape(b * w, c), got_lp, TOL[dtype], floor=1.0)
    # tokens: equal wherever the torch path's top-c is not within the tolerance of a tie
    lp_sorted = torch.sort(logp.reshape(b * w, k), dim=-1, descending=True).values.cpu()
    gaps = (lp_sorted[:, :c] - lp_sorted[:, 1 : c + 1]).abs() if c < k else lp_sorted[:, :c] * 0 + 1
    clear = (gaps > 10 * TOL[dtype]).cumprod(dim=-1).bool()
    assert torch.equal(got_tok.cpu()[clear], want_tok.reshape(b * w, c).cpu()[clear])
    assert torch.equal(got_ix.cpu()[clear], want_ix.reshape(b * w, c).cpu()[clear])
    rows = torch.arange(b * w)[:, None] // w  # the indices name the tokens: pool_ids[b, pool, ix] = tok
    assert torch.equal(pool_ids.cpu()[rows, pool.reshape(-1).cpu()[:, None], got_ix.cpu()], got_tok.cpu())


def test_step_top_equals_step_then_top_c():
    """`step_top` = `step`'s log-probs, their top c, the tokens from each node's pool; same K/V written."""
    adapter, _, pool_ids, pool_prior, _ = _case(1, 3, 16, 9, 3, 20, torch.float32, True, 4)
    gen = torch.Generator().manual_seed(9)
    hidden = (torch.randn(1, 24, generator=gen).to(DEVICE), torch.randn(1, 3, 24, generator=gen).to(DEVICE))
    slot, token, parent, depth = (torch.tensor(v, device=DEVICE) for v in
                                  ([[0, 1, 2]], [[5, 6, 7]], [[-1, 0, 0]], [[0, 1, 2]]))
    states = [adapter.begin_round(*hidden, pool_ids, pool_prior, capacity=6) for _ in range(2)]
    top_lp, top_tok, top_cand = adapter.step_top(states[0], slot, token, parent, depth, c=4)  # the options of `bind`
    logp = adapter.step(states[1], slot, token, parent, depth)
    want_lp, want_ix = torch.topk(logp, 4, dim=-1)
    pool = depth.clamp(max=2)
    if DEVICE == "cpu":  # the same torch ops off CUDA: bit-equal
        assert torch.equal(top_lp, want_lp)
    else:  # the fused Triton tail on CUDA: fp32 rounding apart, and the top 4 clear of ties at that rounding
        assert_close("top log p", want_lp, top_lp, 1e-5, floor=1.0)
        lp_sorted = torch.sort(logp, dim=-1, descending=True).values
        assert bool(((lp_sorted[..., :4] - lp_sorted[..., 1:5]).abs() > 1e-4).all())
    assert torch.equal(top_tok, pool_ids[0, pool[0]].gather(-1, want_ix[0])[None])
    assert torch.equal(top_cand, 1 + pool[..., None] * pool_ids.shape[2] + want_ix)  # candidate-table rows
    assert torch.equal(states[0].k, states[1].k) and torch.equal(states[0].visible, states[1].visible)


def test_pool_top_rejects_bad_shapes():
    adapter, y, pool_ids, pool_prior, pool = _case(1, 2, 8, 5, 2, 12, torch.float32, False, 0)
    norm = adapter.out_norm
    args = (norm.weight, norm.bias, norm.eps, adapter.residual_lm_head, pool_ids, pool_prior)
    with pytest.raises(ValueError, match="pool_top: y"):
        pool_top(y.reshape(2, 8), *args, pool.reshape(-1)[:1], 2)
    with pytest.raises(ValueError, match="1 <= c"):
        pool_top(y.reshape(2, 8), *args, pool.reshape(-1), 6)


def test_pool_top_op_traces():
    """The custom op's fake impl (torch.compile of the build stage) matches the kernel's outputs."""
    adapter, y, pool_ids, pool_prior, pool = _case(1, 2, 8, 5, 2, 12, torch.float32, True, 1)
    norm = adapter.out_norm
    args = (y.reshape(2, 8), norm.weight.detach(), norm.bias.detach(), norm.eps, adapter.residual_lm_head, pool_ids,
            pool_prior, pool.reshape(-1), 3)  # the build stage runs without autograd
    torch.library.opcheck(pool_top_op, args)


def test_pool_top_log_p_near_zero():
    """One child takes almost all the mass: log p ~ -0.007, where fp32 rounding of logit - logsumexp (~1e-7
    absolute) is >1e-5 relative. The kernel must still be within fp32 rounding of the torch path in absolute
    terms (the case hypothesis found: B 1, w 1, d 16, K 2, seed 0, c 1)."""
    adapter, y, pool_ids, pool_prior, pool = _case(1, 1, 16, 2, 4, 2 + 7, torch.float32, False, 0)
    norm = adapter.out_norm
    got_lp, _, _ = pool_top(y.reshape(1, 16), norm.weight, norm.bias, norm.eps, adapter.residual_lm_head, pool_ids,
                            pool_prior, pool.reshape(-1), 1)  # fmt: skip
    _, want_lp, _, _ = _torch_path(adapter, y, pool_ids, pool_prior, pool, 1)
    assert float((got_lp.cpu() - want_lp.reshape(1, 1).cpu()).abs().max()) < 1e-6



def _frontier_case(b, w, c, depth, gen):
    """A builder frontier [B, F + 1] with earlier entries, and popped nodes of which some do not grow."""
    f1 = (w * 4 + 2) * c + 1
    f_score = torch.randn(b, f1, generator=gen, dtype=torch.float64)
    f_item = torch.randint(0, 50, (b, f1, 4), generator=gen)
    f_logp = torch.randn(b, f1, generator=gen)
    node = torch.stack([torch.randperm(w * 4 + 2, generator=gen)[:w] for _ in range(b)])
    grow = torch.rand(b, w, generator=gen) < 0.7
    score = torch.randn(b, w, generator=gen, dtype=torch.float64)
    score[0, 0] = float("-inf")  # a popped -inf: its children must be dropped
    node_depth = torch.randint(0, depth, (b, w), generator=gen)
    return [t.to(DEVICE) for t in (f_score, f_item, f_logp, node, grow, score, node_depth)]


@settings(max_examples=4 if FULL else 10, deadline=None)
@given(b=st.integers(1, 2), w=st.integers(1, 4), k=st.integers(2, 30), c=st.integers(1, 8), seed=st.integers(0, 999))
def test_pool_top_push_equals_top_then_frontier_push(b, w, k, c, seed):
    """The push inside the tail's second launch writes the frontier exactly as the torch push
    (`weaver.ops.weaver_frontier.frontier_push`) of the tail's top-c children (the sink column aside: the
    reference drops children into it, the kernel writes nothing)."""
    c = min(c, k)
    depth = 3
    adapter, y, pool_ids, pool_prior, pool = _case(b, w, 8, k, depth, k + 7, torch.float32, seed % 2 == 0, seed)
    args = _flat_args(adapter, y, pool_ids, pool_prior, pool, c)
    gen = torch.Generator().manual_seed(seed)
    want = _frontier_case(b, w, c, depth, gen)
    got = [t.clone() for t in want]
    before = want[0].clone()
    top_lp, top_tok, top_ix = (t.view(b, w, c) for t in pool_top(*args))
    frontier_push(*want, top_lp, top_tok, 1 + pool[..., None] * k + top_ix)
    assert pool_top(*args, push=tuple(got)) is None
    for name, x, ref in zip(("score", "item", "logp"), got[:3], want[:3]):
        assert torch.equal(x[:, :-1], ref[:, :-1]), name
    pushed = bool((want[4] & (want[5] > float("-inf"))).any())  # some grown node with a finite score
    assert torch.equal(got[0], before) != pushed  # the comparison is not between two untouched frontiers


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fused_pool_top_dispatch_matches_the_reference(seed):
    """`fused_pool_top(_push)` with kernels="torch" is the reference itself; with "triton" the kernels, equal
    to it within fp32 rounding (the children, their tokens and frontier columns exactly: no near-ties here)."""
    b, w, k, c, depth = 2, 3, 9, 4, 3
    adapter, y, pool_ids, pool_prior, pool = _case(b, w, 8, k, depth, 20, torch.float32, True, seed)
    args = _flat_args(adapter, y, pool_ids, pool_prior, pool, c)
    want = reference.pool_top(*args)
    assert all(torch.equal(x, r) for x, r in zip(fused_pool_top(*args, TORCH), want))
    got = fused_pool_top(*args, TRITON)
    assert_close("top log p", want[0], got[0], 1e-5, floor=1.0)
    assert torch.equal(got[1], want[1]) and torch.equal(got[2], want[2])
    frontiers = {}
    for name, options in (("torch", TORCH), ("triton", TRITON)):
        frontier = _frontier_case(b, w, c, depth, torch.Generator().manual_seed(seed))
        fused_pool_top_push(*args, *frontier, options)
        frontiers[name] = frontier
    ref, fused = frontiers["torch"], frontiers["triton"]
    assert torch.equal(fused[1][:, :-1], ref[1][:, :-1])  # items: parent, token, depth, candidate row
    assert torch.equal(fused[0][:, :-1].isinf(), ref[0][:, :-1].isinf())
    assert_close("frontier scores", ref[0][:, :-1].nan_to_num(neginf=0), fused[0][:, :-1].nan_to_num(neginf=0), 1e-5)
    assert_close("frontier log p", ref[2][:, :-1], fused[2][:, :-1], 1e-5, floor=1.0)


def test_padded_candidates_score_minus_inf():
    """A candidate id < 0 (a padded pool) scores -inf in the kernel as in the reference (`score_pool`), and the
    best c children come from the real candidates."""
    b, w, k, c, depth = 2, 3, 9, 4, 3
    adapter, y, pool_ids, pool_prior, pool = _case(b, w, 8, k, depth, 20, torch.float32, True, 3)
    pool_ids[0, :, 0] = -1
    pool_ids[1, 1, 3:] = -1  # pool 1 of row 1 keeps 3 real candidates
    pool = pool.clone()
    pool[1, 0] = 1
    ids = pool_ids[torch.arange(b, device=DEVICE)[:, None].expand(b, w), pool]
    logp = torch.log_softmax(adapter.score_pool(y, ids, pool_prior[torch.arange(b, device=DEVICE)[:, None], pool]), -1)
    assert torch.equal(logp.isinf(), ids < 0)
    args = _flat_args(adapter, y, pool_ids, pool_prior, pool, c)
    want_lp, want_tok, _ = reference.pool_top(*args)
    got_lp, got_tok, _ = pool_top(*args)
    real = want_lp > float("-inf")  # node (1, 0) (and any other on pool 1 of row 1) has 3 real children of c = 4
    short = ((ids >= 0).sum(-1) < c).reshape(-1)  # [B w]
    assert bool(short[w]) and torch.equal((~real).any(-1), short) and torch.equal(got_lp.isinf(), ~real)
    assert_close("top log p", want_lp[real], got_lp[real], 1e-5, floor=1.0)
    assert torch.equal(got_tok[real], want_tok[real]) and bool((got_tok[real] >= 0).all())


def test_pool_top_push_op_traces():
    """The mutating custom op's schema and fake impl hold (torch.compile of the build stage)."""
    b, w, c, k, depth = 1, 2, 3, 5, 2
    adapter, y, pool_ids, pool_prior, pool = _case(b, w, 8, k, depth, 12, torch.float32, True, 1)
    norm = adapter.out_norm
    frontier = _frontier_case(b, w, c, depth, torch.Generator().manual_seed(2))
    args = (y.reshape(b * w, 8), norm.weight.detach(), norm.bias.detach(), norm.eps, adapter.residual_lm_head,
            pool_ids, pool_prior, pool.reshape(-1), c, *frontier)  # fmt: skip
    torch.library.opcheck(pool_top_push_op, args)


def test_pool_top_push_rejects_bad_frontier():
    adapter, y, pool_ids, pool_prior, pool = _case(1, 2, 8, 5, 2, 12, torch.float32, False, 0)
    norm = adapter.out_norm
    args = (y.reshape(2, 8), norm.weight, norm.bias, norm.eps, adapter.residual_lm_head, pool_ids, pool_prior,
            pool.reshape(-1), 2)  # fmt: skip
    frontier = _frontier_case(1, 2, 2, 2, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="frontier score"):
        pool_top(*args, push=(frontier[0].float(), *frontier[1:]))
    with pytest.raises(ValueError, match="grow must be"):
        pool_top(*args, push=(*frontier[:4], frontier[4][:, :1], *frontier[5:]))
