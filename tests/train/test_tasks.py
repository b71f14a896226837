"""The drafter and adapter training tasks on a tiny random target (CPU): finite losses, gradients where they
belong (never into the frozen target), metrics per depth, and a few optimizer steps that learn."""

from __future__ import annotations

import pytest
import torch

import weaver
from weaver.speculative.drafter import DFlashDrafter
from weaver.train.drafter_task import DrafterTask, DrafterTaskConfig
from weaver.train.shards import SequenceStore, read_shard, write_shard
from weaver.train.weaver_task import WeaverTask, WeaverTaskConfig, greedy_path_loss, pool_loss


@pytest.fixture(scope="module")
def target():
    return weaver.LLM.from_config("tiny-llama", seed=1, device="cpu", dtype="fp32").model


@pytest.fixture(scope="module")
def store(tmp_path_factory, target):
    """Sequences the target 'wrote': a repeated pattern, so a few steps can learn something."""
    d = tmp_path_factory.mktemp("regen")
    gen = torch.Generator().manual_seed(0)
    v = target.config.vocab_size
    seqs, plens = [], []
    for i in range(12):
        prompt = torch.randint(0, v, (5 + i % 3,), generator=gen).tolist()
        pattern = torch.randint(0, v, (4,), generator=gen).tolist()
        seqs.append(prompt + pattern * 8)
        plens.append(len(prompt))
    write_shard(d / "shard_00000.npz", seqs, plens)
    return SequenceStore(d, max_len=64, seed=0)


def test_shards_round_trip_and_batches_are_deterministic(tmp_path, store) -> None:
    write_shard(tmp_path / "shard_00000.npz", [[1, 2, 3], [70000, 5]], [1, 1])
    tokens, offsets, plens = read_shard(tmp_path / "shard_00000.npz")
    assert tokens.tolist() == [1, 2, 3, 70000, 5] and offsets.tolist() == [0, 3, 5] and plens.tolist() == [1, 1]
    a, b = store.batch(3, 0, 1, 2, 4), store.batch(3, 0, 1, 2, 4)
    assert torch.equal(a.tokens, b.tokens)
    other = store.batch(3, 0, 0, 2, 4)  # the other rank's slice of the same global batch
    assert not torch.equal(a.tokens, other.tokens)


def _steps(task, steps: int, lr: float = 3e-3) -> list[float]:
    model = task.model()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    losses = []
    for step in range(steps):
        loss, metrics = task.loss(model, task.batch(step % 2, 0, 0, 1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, metrics


def test_drafter_task_learns_and_leaves_the_target_frozen(target, store) -> None:
    cfg = DrafterTaskConfig(num_layers=1, num_target_features=2, block_size=4, anchors=8, batch_size=4)
    task = DrafterTask(target, store, cfg)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    losses, metrics = _steps(task, 30, lr=1e-2)
    assert all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-5:]) / 5 < 0.85 * sum(losses[:5]) / 5
    assert metrics["top1"].shape == (3,) and (metrics["top1"] >= 0).all() and (metrics["top1"] <= 1).all()
    assert all(torch.equal(before[k], v) for k, v in target.state_dict().items())


def test_drafter_task_saves_a_checkpoint_the_loader_reads(tmp_path, target, store) -> None:
    task = DrafterTask(target, store, DrafterTaskConfig(num_layers=1, num_target_features=2, block_size=4,
                                                        anchors=4, batch_size=2, init="random"))
    task.save(task.model(), tmp_path / "d")
    loaded = DFlashDrafter.from_pretrained(tmp_path / "d")
    assert loaded.dtype == torch.bfloat16 and loaded.config.block_size == 4 and loaded.mask_embedding is not None
    drafter = task.model().drafter
    drafter.save_pretrained(tmp_path / "s", max_shard_bytes=20_000)  # sharded, with an index
    assert len(list((tmp_path / "s").glob("model-*-of-*.safetensors"))) > 2
    again = DFlashDrafter.from_pretrained(tmp_path / "s")
    assert all(torch.equal(a, b) for a, b in zip(drafter.state_dict().values(), again.state_dict().values(),
                                                 strict=True))


@pytest.mark.parametrize(("variant", "greedy_weight"), [("released", 0.0), ("learned", 0.0), ("released", 1.0)])
def test_weaver_task_learns_the_teacher(target, store, variant, greedy_weight) -> None:
    drafter = DFlashDrafter.random(target.config, num_layers=1, num_target_features=2, block_size=5, seed=2)
    cfg = WeaverTaskConfig(d_rank=32, num_heads=4, mlp_dim=64, pool_size=16, anchors=4, batch_size=4,
                           variant=variant, greedy_weight=greedy_weight)
    task = WeaverTask(target, drafter, store, cfg)
    losses, metrics = _steps(task, 25)
    assert all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5
    assert metrics["top1"].shape == (4,) and metrics["drafter_top1"].shape == (4,)
    grads = [p.grad for p in task.model().parameters() if p.requires_grad]
    assert task.model().adapter.lm_head_query_in.weight.grad is not None and len(grads) > 5


def test_pool_loss_is_zero_at_the_teacher_and_lk_adds_tv() -> None:
    t = torch.randn(3, 2, 7)
    valid = torch.ones(3, 2, dtype=torch.bool)
    assert pool_loss(t, t, valid, "kl").abs() < 1e-6 and pool_loss(t, t, valid, "lk").abs() < 1e-6
    s = torch.randn(3, 2, 7)
    p, q = t.softmax(-1), s.softmax(-1)
    tv = 0.5 * (p - q).abs().sum(-1).mean()
    assert torch.allclose(pool_loss(s, t, valid, "lk") - pool_loss(s, t, valid, "kl"), tv, atol=1e-6)
    with pytest.raises(ValueError, match="kl"):
        pool_loss(s, t, valid, "mse")


def test_greedy_path_loss_counts_greedy_chains_with_the_token_in_the_pool() -> None:
    student = torch.randn(2, 3, 4)
    pool = torch.tensor([[10, 11, 12, 13]]).repeat(2, 3, 1)
    greedy = torch.tensor([[11, 12, 99], [13, 10, 11]])  # chain 0 depth 3: the argmax is not in the pool
    chain = torch.tensor([[5, 11, 12], [5, 13, 12]])  # chain 1's reply has 12, not the greedy 10, at depth 2
    valid = torch.ones(2, 3, dtype=torch.bool)
    log_q = student.log_softmax(-1)
    want = -(log_q[0, 0, 1] + log_q[0, 1, 2] + log_q[1, 0, 3] + log_q[1, 1, 0]) / 4
    assert torch.allclose(greedy_path_loss(student, pool, greedy, chain, valid), want, atol=1e-6)
    valid[1, 1] = False
    want = -(log_q[0, 0, 1] + log_q[0, 1, 2] + log_q[1, 0, 3]) / 3
    assert torch.allclose(greedy_path_loss(student, pool, greedy, chain, valid), want, atol=1e-6)


def test_warm_start_loads_trained_weights_and_rejects_a_misfit(tmp_path, target, store) -> None:
    from weaver.errors import CheckpointError
    from weaver.train.warm_start import adapter_init, drafter_init

    drafter = DFlashDrafter.random(target.config, num_layers=1, num_target_features=2, block_size=5, seed=3)
    drafter.save_pretrained(tmp_path / "d")
    again = drafter_init(tmp_path / "d", target, block_size=5)
    assert again.dtype == torch.float32
    assert all(torch.equal(a, b) for a, b in zip(drafter.state_dict().values(), again.state_dict().values(),
                                                 strict=True))
    with pytest.raises(CheckpointError, match="block_size is 5, but this run needs 16"):
        drafter_init(tmp_path / "d", target, block_size=16)
    task = WeaverTask(target, again, store, WeaverTaskConfig(d_rank=32, num_heads=4, mlp_dim=64, pool_size=16,
                                                             anchors=4, batch_size=4))
    task.save(task.model(), tmp_path / "w")
    adapter = adapter_init(tmp_path / "w", target, again)
    saved = task.model().adapter.state_dict()
    assert all(torch.equal(saved[k].to(torch.bfloat16).float(), v) for k, v in adapter.state_dict().items())
    short = DFlashDrafter.random(target.config, num_layers=1, num_target_features=2, block_size=4, seed=3)
    with pytest.raises(CheckpointError, match="max_depth is 4, but this run needs 3"):
        adapter_init(tmp_path / "w", target, short)


def test_a_grown_drafter_drafts_as_before_and_its_new_layers_learn(target, store) -> None:
    from weaver.errors import CheckpointError
    from weaver.train.warm_start import grow_drafter

    drafter = DFlashDrafter.random(target.config, num_layers=2, num_target_features=2, block_size=4, seed=3)
    grown = grow_drafter(drafter, 4, seed=5)
    assert grown.config.num_hidden_layers == 4 and len(grown.layers) == 4
    assert grown.config.layer_types == drafter.config.layer_types * 2
    assert any(p.abs().sum() > 0 for p in grown.layers[3].self_attn.q_proj.parameters())  # drawn, not zero
    ctx_rows = torch.randn(1, 6, target.config.hidden_size * 2, generator=torch.Generator().manual_seed(0))
    root = torch.tensor([3])
    outs = []
    for model in (drafter, grown):
        ctx = model.new_context(1, 16)
        model.append_context(ctx, ctx_rows)
        outs.append(model.draft(ctx, root, target.model.embed_tokens, target.lm_head).logits)
    torch.testing.assert_close(outs[1], outs[0], rtol=0, atol=0)
    task = DrafterTask(target, store, DrafterTaskConfig(num_layers=4, num_target_features=2, block_size=4, anchors=8,
                                                        batch_size=4), drafter=grown)  # fmt: skip
    model = task.model()
    loss, _ = task.loss(model, task.batch(0, 0, 0, 1))
    loss.backward()
    new = next(m for m in model.modules() if m is grown.layers[3])
    assert new.self_attn.o_proj.weight.grad.abs().sum() > 0 and new.mlp.down_proj.weight.grad.abs().sum() > 0
    with pytest.raises(CheckpointError, match="already has 2 layers"):
        grow_drafter(drafter, 1)


@pytest.mark.parametrize("released", [True, False], ids=["released", "learned"])
def test_a_grown_adapter_scores_as_before_and_its_new_parts_learn(target, store, released) -> None:
    from weaver.errors import CheckpointError
    from weaver.speculative.weaver import RELEASED, WeaverAdapter
    from weaver.train.warm_start import grow_adapter

    drafter = DFlashDrafter.random(target.config, num_layers=1, num_target_features=2, block_size=5, seed=2)
    adapter = WeaverAdapter.random(target.config, d_rank=32, num_heads=4, mlp_dim=24, max_depth=4, pool_size=16,
                                   seed=4, **(RELEASED if released else {}))  # fmt: skip
    grown = grow_adapter(adapter, num_layers=2, mlp_dim=40, seed=6)
    assert (grown.config.num_layers, grown.config.mlp_dim) == (2, 40) and len(grown.blocks) == 2
    assert grown.blocks[1].qkv_proj.weight.abs().sum() > 0  # drawn, not zero
    gen = torch.Generator().manual_seed(0)
    hidden, v = target.config.hidden_size, target.config.vocab_size
    th, dh = torch.randn(2, hidden, generator=gen), torch.randn(2, 4, hidden, generator=gen)
    tokens = torch.randint(0, v, (2, 4), generator=gen)
    ids = torch.stack([torch.randperm(v, generator=gen)[:16] for _ in range(8)]).view(2, 4, 16)
    prior = torch.randn(2, 4, 16, generator=gen)
    scores = []
    for model in (adapter, grown):
        model.bind(target.model.embed_tokens.weight, target.lm_head.weight)
        scores.append(model(th, dh, tokens, ids, prior))
    torch.testing.assert_close(scores[1], scores[0], rtol=1e-5, atol=1e-5)
    task = WeaverTask(target, drafter, store, WeaverTaskConfig(pool_size=16, anchors=4, batch_size=4), adapter=grown)
    model = task.model()
    loss, _ = task.loss(model, task.batch(0, 0, 0, 1))
    loss.backward()
    new_block, old_down = grown.blocks[1], grown.blocks[0].mlp_down
    assert new_block.o_proj.weight.grad.abs().sum() > 0 and new_block.mlp_down.weight.grad.abs().sum() > 0
    assert old_down.weight.grad[:, 24:].abs().sum() > 0  # the new hidden units' columns learn
    with pytest.raises(CheckpointError, match="grows only"):
        grow_adapter(adapter, num_layers=1, mlp_dim=16)
