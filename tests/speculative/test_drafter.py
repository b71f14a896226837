"""DFlash drafter: cached drafting vs a cache-free reference, batching, checkpoints, and parity with z-lab's model."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from helpers.drafters import HIDDEN, TARGET, VOCAB, make_drafter, random_features, target_io
from helpers.triton_env import DEVICE  # sets TRITON_INTERPRET before triton loads
from safetensors.torch import load_file, save_file

from weaver.errors import CheckpointError, UnsupportedArchitectureError
from weaver.options import RuntimeOptions
from weaver.speculative.drafter import DFlashDrafter, DrafterConfig, DraftOutput, build_target_layer_ids
from weaver.testing import assert_close


def run(drafter, features, lengths, roots, embed, head, capacity: int = 24, options=None):
    """Append each row's first lengths[b] features in one call, then draft."""
    dev = features.device
    ctx = drafter.new_context(features.shape[0], capacity)
    drafter.append_context(ctx, features, torch.tensor(lengths, device=dev))
    return drafter.draft(ctx, torch.tensor(roots, device=dev), embed, head, options=options), ctx


# ---------------------------------------------------------------- the cache-free reference (z-lab's forward)


def rotate(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """Half-split RoPE of x [T, heads, D] at integer positions pos [T]."""
    d = x.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = torch.cat([pos.double()[:, None] * inv_freq] * 2, dim=-1)[:, None].float()  # [T, 1, D]
    half = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], dim=-1)
    return x * ang.cos() + half * ang.sin()


def visible(cfg: DrafterConfig, layer: int, p: int, s: int) -> bool:
    """z-lab's mask: may the query at position p see the key at position s?"""
    causal = cfg.layer_types[layer] == "sliding_attention" if cfg.is_causal is None else cfg.is_causal
    window = cfg.sliding_window if cfg.layer_types[layer] == "sliding_attention" else None
    ok = s <= p if causal else True
    if window is not None:
        ok = ok and p - s < window and (causal or s - p < window)
    return ok


@torch.no_grad()
def reference_draft(drafter, features, root: int, embed, head) -> tuple[torch.Tensor, torch.Tensor]:
    """One row, no cache: K/V from concat([ctx rows, block rows]) at positions 0..L+Bk-1, explicit mask.

    features [L, n*H] -> logits [Bk-1, V], hidden [Bk-1, H].
    """
    cfg = drafter.config
    n_ctx, bk, d = features.shape[0], cfg.block_size, cfg.head_dim
    ctx = drafter.hidden_norm(drafter.fc(features))  # [L, H]
    if cfg.mask_token_id is None:
        x = torch.cat([embed.weight[root][None], drafter.mask_embedding[None].expand(bk - 1, -1)])
    else:
        x = embed(torch.tensor([root] + [cfg.mask_token_id] * (bk - 1)))
    pos = torch.arange(n_ctx + bk)
    for i, layer in enumerate(drafter.layers):
        att = layer.self_attn
        h = layer.input_layernorm(x)
        rows = torch.cat([ctx, h])  # [L + Bk, H]
        q = rotate(att.q_norm(att.q_proj(h).view(bk, -1, d)), pos[n_ctx:], cfg.rope_theta)
        k = rotate(att.k_norm(att.k_proj(rows).view(n_ctx + bk, -1, d)), pos, cfg.rope_theta)
        v = att.v_proj(rows).view(n_ctx + bk, -1, d)
        group = cfg.num_attention_heads // cfg.num_key_value_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        mask = torch.tensor([[visible(cfg, i, n_ctx + a, s) for s in range(n_ctx + bk)] for a in range(bk)])
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(d)
        probs = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        out = torch.einsum("hqk,khd->qhd", probs, v).reshape(bk, -1)
        x = x + att.o_proj(out)
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    hidden = drafter.norm(x[1:])
    return head(hidden), hidden


# ---------------------------------------------------------------- tests


def test_build_target_layer_ids():
    assert build_target_layer_ids(36, 5) == [1, 9, 17, 25, 33]  # Qwen3-8B
    assert build_target_layer_ids(40, 5) == [1, 10, 19, 28, 37]  # Qwen3.5-35B-A3B
    assert build_target_layer_ids(64, 5) == [1, 16, 31, 46, 61]  # Qwen3.5/3.6-27B
    assert build_target_layer_ids(30, 5) == [1, 8, 14, 20, 27]  # SmolLM2 (Python's round: 7.5 -> 8, 20.5 -> 20)
    assert build_target_layer_ids(36, 1) == [18]
    for layers in range(1, 12):  # tiny targets: distinct, sorted, in range
        for n in range(1, layers + 1):
            ids = build_target_layer_ids(layers, n)
            assert ids == sorted(set(ids)) and len(ids) == n and 0 <= ids[0] and ids[-1] < layers, (layers, n)
    with pytest.raises(ValueError, match="n <= num_target_layers"):
        build_target_layer_ids(3, 4)


CASES = [
    pytest.param({}, id="full-learned-mask"),
    pytest.param({"mask_token_id": 7}, id="full-mask-token"),
    pytest.param({"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 4}, id="sliding4+full"),
    pytest.param({"layer_types": ["sliding_attention"] * 2, "sliding_window": 3}, id="sliding3-window<block"),
    pytest.param({"is_causal": True}, id="full-causal-override"),
    pytest.param(
        {"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 5, "is_causal": False},
        id="two-sided-window",
    ),
    pytest.param({"num_key_value_heads": 4}, id="mha"),
]


@pytest.mark.parametrize("kernels", [None, "triton"])  # SDPA; the prefix-split kernel (interpreted on CPU)
@pytest.mark.parametrize("overrides", CASES)
def test_matches_cache_free_reference(overrides, kernels):
    drafter = make_drafter(**overrides)
    embed, head = target_io()
    lengths, roots = [11, 1, 6], [3, 0, 59]
    features = random_features(drafter, 3, 11)
    if kernels is None:
        out, _ = run(drafter, features, lengths, roots, embed, head)
    else:  # the kernel runs where the tests' kernels run (`pytest --triton-full`: on the GPU)
        on_device = [copy.deepcopy(m).to(DEVICE) for m in (drafter, embed, head)]
        got, _ = run(on_device[0], features.to(DEVICE), lengths, roots, *on_device[1:],
                     options=RuntimeOptions(kernels=kernels))  # fmt: skip
        out = DraftOutput(got.logits.cpu(), got.hidden.cpu())
    assert out.logits.shape == (3, 4, VOCAB) and out.logits.dtype == torch.float32
    assert out.hidden.shape == (3, 4, HIDDEN)
    for b in range(3):
        ref_logits, ref_hidden = reference_draft(drafter, features[b, : lengths[b]], roots[b], embed, head)
        assert_close(f"logits row {b}", ref_logits, out.logits[b], 1e-5)
        assert_close(f"hidden row {b}", ref_hidden, out.hidden[b], 1e-5)


def test_draft_independent_of_append_chunking():
    drafter = make_drafter(layer_types=["sliding_attention", "full_attention"], sliding_window=6)
    embed, head = target_io()
    features = random_features(drafter, 2, 13)
    whole, _ = run(drafter, features, [13, 9], [4, 8], embed, head)
    ctx = drafter.new_context(2, 24)
    gen = torch.Generator().manual_seed(5)
    start = [0, 0]
    for counts in ([5, 2], [0, 4], [1, 1], [7, 2]):  # rows advance by different amounts; padding is garbage
        t = max(counts)
        chunk = 50 * torch.randn(2, t, features.shape[-1], generator=gen)
        for b in range(2):
            chunk[b, : counts[b]] = features[b, start[b] : start[b] + counts[b]]
            start[b] += counts[b]
        drafter.append_context(ctx, chunk, torch.tensor(counts))
    assert ctx.lengths.tolist() == [13, 9]
    chunked = drafter.draft(ctx, torch.tensor([4, 8]), embed, head)
    assert_close("logits", whole.logits, chunked.logits, 1e-5)
    # counts=None appends every row's T tokens
    ctx2 = drafter.new_context(2, 24)
    drafter.append_context(ctx2, features[:, :9])
    drafter.append_context(ctx2, features[:, 9:])
    full = drafter.draft(ctx2, torch.tensor([4, 8]), embed, head)
    ref, _ = reference_draft(drafter, features[1], 8, embed, head)
    assert_close("counts=None", ref, full.logits[1], 1e-5)


def test_batch_rows_equal_single_row_runs():
    drafter = make_drafter(layer_types=["full_attention", "sliding_attention"], sliding_window=5)
    embed, head = target_io()
    lengths, roots = [3, 12, 7, 1], [1, 2, 3, 4]
    features = random_features(drafter, 4, 12)
    batched, _ = run(drafter, features, lengths, roots, embed, head)
    for b in range(4):
        single, _ = run(drafter, features[b : b + 1, : lengths[b]], [lengths[b]], [roots[b]], embed, head)
        assert_close(f"row {b}", single.logits[0], batched.logits[b], 1e-5)


def test_rows_depend_on_root_and_context():
    drafter = make_drafter()
    embed, head = target_io()
    features = random_features(drafter, 1, 8)
    base, _ = run(drafter, features, [8], [5], embed, head)
    other_root, _ = run(drafter, features, [8], [6], embed, head)
    changed = features.clone()
    changed[0, 0] += 1.0  # the oldest context token
    other_ctx, _ = run(drafter, changed, [8], [5], embed, head)
    for k in range(4):  # every output row sees the root (bidirectional block) and all of the context
        assert (base.logits[0, k] - other_root.logits[0, k]).abs().max() > 1e-4, k
        assert (base.logits[0, k] - other_ctx.logits[0, k]).abs().max() > 1e-4, k


def test_stale_slots_are_ignored_and_context_untouched():
    drafter = make_drafter(layer_types=["sliding_attention", "full_attention"], sliding_window=4)
    embed, head = target_io()
    features = random_features(drafter, 2, 10)
    clean, ctx = run(drafter, features, [10, 6], [1, 2], embed, head)
    gen = torch.Generator().manual_seed(9)
    slot = torch.arange(ctx.num_slots)[None, None, :, None]
    stale = slot >= ctx.lengths[:, None, None, None]
    for buf in ctx.k + ctx.v:  # finite poison: a masked NaN would still poison probs @ V, as in any cache
        buf.copy_(torch.where(stale, 1e3 * torch.randn(buf.shape, generator=gen), buf))
    kept = [buf.clone() for buf in ctx.k + ctx.v]
    poisoned = drafter.draft(ctx, torch.tensor([1, 2]), embed, head)
    assert_close("logits", clean.logits, poisoned.logits, 1e-6)
    for before, after in zip(kept, ctx.k + ctx.v):  # the context slots are read, never written
        assert torch.equal(torch.where(stale, 0.0, before), torch.where(stale, 0.0, after))


def test_sliding_window_reach():
    """One sliding layer, window W: output row k (position start+k) sees context positions > start+k-W."""
    window, start = 4, 9
    drafter = make_drafter(num_hidden_layers=1, layer_types=["sliding_attention"], sliding_window=window)
    embed, head = target_io()
    features = random_features(drafter, 1, start)
    base, _ = run(drafter, features, [start], [3], embed, head)
    for s, rows_changed in ((start - window, []), (start - window + 1, []), (start - window + 2, [0])):
        changed = features.clone()
        changed[0, s] += 1.0
        out, _ = run(drafter, changed, [start], [3], embed, head)
        diff = (out.logits[0] - base.logits[0]).abs().amax(-1)
        assert [k for k in range(4) if diff[k] > 1e-6] == rows_changed, s


def test_learned_mask_embedding_equals_mask_token_path():
    with_token = make_drafter(mask_token_id=11)
    learned = make_drafter()
    assert with_token.mask_embedding is None and learned.mask_embedding.shape == (HIDDEN,)
    embed, head = target_io()
    state = dict(with_token.state_dict(), mask_embedding=embed.weight[11].detach())
    learned.load_state_dict(state, strict=True)
    features = random_features(learned, 2, 6)
    a, _ = run(with_token, features, [6, 3], [2, 9], embed, head)
    b, _ = run(learned, features, [6, 3], [2, 9], embed, head)
    assert_close("logits", a.logits, b.logits, 1e-6)


def test_fused_projections_change_nothing():
    """fuse_projections (one context GEMM for every layer, fused k|v and gate|up) gives the unfused results."""
    plain = make_drafter(layer_types=["sliding_attention", "full_attention"], sliding_window=4, attention_bias=True)
    with torch.no_grad():
        for layer in plain.layers:
            layer.self_attn.k_proj.bias.normal_()
    fused = copy.deepcopy(plain).fuse_projections()
    assert fused.context_kv is not None and all(layer.mlp.fused is not None for layer in fused.layers)
    state = plain.state_dict()
    assert fused.state_dict().keys() == state.keys()
    assert all(torch.equal(t, state[name]) for name, t in fused.state_dict().items())
    embed, head = target_io()
    features = random_features(plain, 2, 10)
    want, want_ctx = run(plain, features, [10, 4], [3, 5], embed, head)
    got, got_ctx = run(fused, features, [10, 4], [3, 5], embed, head)
    assert_close("logits", want.logits, got.logits, 1e-6)
    for i, (a, b) in enumerate(zip(want_ctx.k + want_ctx.v, got_ctx.k + got_ctx.v)):
        assert_close(f"context K/V {i}", a, b, 1e-6)
    moved = fused.to(torch.float64)  # moving drops the fusion (the parameters moved one by one)
    assert moved.context_kv is None and moved.layers[0].self_attn.fused_kv is None
    assert_close("moved", want.logits.double(), run(moved, features.double(), [10, 4], [3, 5],
                                                    embed.double(), head.double())[0].logits, 1e-6)


def test_random_is_deterministic_and_runs_in_bf16():
    a = DFlashDrafter.random(TARGET, seed=3)
    b = DFlashDrafter.random(TARGET, seed=3, dtype=torch.bfloat16)
    assert a.config.target_layer_ids == [0, 2, 3, 4, 6] and a.config.block_size == 16  # n > L - 3: all layers
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(pa.to(torch.bfloat16), pb), name
    assert b.rope_inv_freq.dtype == torch.float32
    embed, head = target_io()
    ctx = b.new_context(1, 8)
    b.append_context(ctx, random_features(b, 1, 5).bfloat16())
    out = b.draft(ctx, torch.tensor([1]), embed.bfloat16(), head.bfloat16())
    assert out.logits.dtype == torch.float32 and out.hidden.dtype == torch.bfloat16
    assert torch.isfinite(out.logits).all()


def test_checkpoint_round_trip(tmp_path):
    drafter = make_drafter(layer_types=["sliding_attention", "full_attention"], sliding_window=4, mask_token_id=5)
    drafter.save_pretrained(tmp_path)
    hf = json.loads((tmp_path / "config.json").read_text())
    assert hf["architectures"] == ["DFlashDraftModel"] and hf["model_type"] == "qwen3"
    assert hf["block_size"] == 5 and hf["num_target_layers"] == 7
    assert hf["dflash_config"] == {"target_layer_ids": [1, 2, 4], "mask_token_id": 5}
    assert hf["layer_types"] == ["sliding_attention", "full_attention"]
    assert hf["sliding_window"] == 4 and hf["use_sliding_window"] is True and hf["dtype"] == "float32"
    names = set(load_file(str(tmp_path / "model.safetensors")))
    layer = [f"self_attn.{p}_proj.weight" for p in "qkvo"] + ["self_attn.q_norm.weight", "self_attn.k_norm.weight"]
    layer += [f"mlp.{p}_proj.weight" for p in ("gate", "up", "down")]
    layer += ["input_layernorm.weight", "post_attention_layernorm.weight"]
    expected = {f"layers.{i}.{p}" for i in range(2) for p in layer} | {"fc.weight", "hidden_norm.weight", "norm.weight"}
    assert names == expected
    loaded = DFlashDrafter.from_pretrained(tmp_path)
    assert loaded.config == drafter.config
    embed, head = target_io()
    features = random_features(drafter, 2, 9)
    a, _ = run(drafter, features, [9, 4], [1, 2], embed, head)
    b, _ = run(loaded, features, [9, 4], [1, 2], embed, head)
    assert torch.equal(a.logits, b.logits)
    assert DFlashDrafter.from_pretrained(tmp_path, dtype=torch.bfloat16).dtype == torch.bfloat16


def test_from_hf_reads_zlab_fields():
    hf = make_drafter().config.to_hf()
    del hf["dflash_config"]  # SpecForge-style: ids from num_target_layers and the draft depth
    hf.update(mask_token_id=3, layer_types=["sliding_attention", "full_attention"], sliding_window=8)
    hf["use_sliding_window"] = False  # the window is kept anyway (see DrafterConfig.from_hf)
    cfg = DrafterConfig.from_hf(hf)
    assert cfg.target_layer_ids == build_target_layer_ids(7, 2) and cfg.mask_token_id == 3
    assert cfg.sliding_window == 8 and cfg.layer_window(0) == 8 and cfg.layer_window(1) is None
    assert cfg.layer_causal(0) and not cfg.layer_causal(1)
    with pytest.raises(UnsupportedArchitectureError, match="DFlash2DraftModel"):
        DrafterConfig.from_hf({**hf, "architectures": ["DFlash2DraftModel"]})
    with pytest.raises(UnsupportedArchitectureError, match="output_multiplier"):
        DrafterConfig.from_hf({**hf, "dflash_config": {"output_multiplier": 2.0}})


def test_checkpoint_errors(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        DFlashDrafter.from_pretrained(tmp_path / "nowhere")
    with pytest.raises(CheckpointError, match="no config.json"):
        DFlashDrafter.from_pretrained(tmp_path)
    drafter = make_drafter()
    good = tmp_path / "good"
    drafter.save_pretrained(good)
    tensors = load_file(str(good / "model.safetensors"))

    def variant(name: str, weights: dict | bytes | None = None, config: str | None = None):
        path = tmp_path / name
        path.mkdir()
        (path / "config.json").write_text(config or (good / "config.json").read_text())
        if isinstance(weights, bytes):
            (path / "model.safetensors").write_bytes(weights)
        elif weights is not None:
            save_file(weights, str(path / "model.safetensors"))
        return path

    with pytest.raises(CheckpointError, match="not valid JSON"):
        DFlashDrafter.from_pretrained(variant("bad-json", tensors, config="{oops"))
    no_width = json.dumps({k: v for k, v in drafter.config.to_hf().items() if k != "hidden_size"})
    with pytest.raises(CheckpointError, match="missing the required field 'hidden_size'"):
        DFlashDrafter.from_pretrained(variant("no-width", tensors, config=no_width))
    with pytest.raises(CheckpointError, match="no \\*.safetensors"):
        DFlashDrafter.from_pretrained(variant("no-weights"))
    with pytest.raises(CheckpointError, match="cannot read"):
        DFlashDrafter.from_pretrained(variant("corrupt", b"\x00\x01 definitely not safetensors"))
    missing = {k: v for k, v in tensors.items() if k != "layers.1.mlp.up_proj.weight"}
    with pytest.raises(CheckpointError, match="lacks parameters.*layers.1.mlp.up_proj.weight"):
        DFlashDrafter.from_pretrained(variant("missing", missing))
    no_mask = {k: v for k, v in tensors.items() if k != "mask_embedding"}
    with pytest.raises(CheckpointError, match="no dflash_config.mask_token_id"):
        DFlashDrafter.from_pretrained(variant("no-mask", no_mask))
    with pytest.raises(CheckpointError, match="unexpected parameter 'layers.9.mlp.up_proj.weight'"):
        DFlashDrafter.from_pretrained(variant("extra", {**tensors, "layers.9.mlp.up_proj.weight": torch.zeros(1)}))
    with pytest.raises(CheckpointError, match="fc.weight has shape"):
        DFlashDrafter.from_pretrained(variant("shape", {**tensors, "fc.weight": torch.zeros(3, 3)}))


# ---------------------------------------------------------------- parity with z-lab's PyPI `dflash` package


def _zlab_model_class():
    # `make test` installs dflash==0.1.0 with --no-deps (its metadata pins tqdm/datasets/requests we do not
    # want); its model module needs only torch and transformers.
    from dflash.model import DFlashDraftModel

    return DFlashDraftModel


ZLAB_CASES = [
    pytest.param({"mask_token_id": 7}, id="full"),
    pytest.param(
        {"mask_token_id": 7, "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 4},
        id="sliding4+full",
    ),
]


@pytest.mark.parametrize("overrides", ZLAB_CASES)
def test_matches_zlab_dflash_model(tmp_path, overrides):
    zlab_cls = _zlab_model_class()
    from transformers import Qwen3Config

    ours = make_drafter(**overrides)
    theirs_cfg = Qwen3Config(**ours.config.to_hf())  # our config.json is a valid z-lab config
    theirs_cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    theirs = zlab_cls(theirs_cfg).float().eval()
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for p in theirs.parameters():  # random weights, norms included
            p.copy_((1.0 if p.ndim == 1 else 0.0) + 0.05 * torch.randn(p.shape, generator=gen))
    theirs.save_pretrained(tmp_path / "zlab")  # their checkpoint format, loaded by name into ours
    ours = DFlashDrafter.from_pretrained(tmp_path / "zlab")
    assert ours.config.target_layer_ids == theirs.target_layer_ids
    assert ours.config.layer_window(0) == theirs.layers[0].self_attn.sliding_window
    embed, head = target_io()
    n_ctx, root, bk = 11, 9, ours.config.block_size
    features = random_features(ours, 1, n_ctx)
    block = torch.tensor([[root] + [7] * (bk - 1)])
    with torch.no_grad():
        hidden = theirs(
            position_ids=torch.arange(n_ctx + bk)[None], noise_embedding=embed(block), target_hidden=features
        )
        ref = head(hidden[:, 1:])
    out, _ = run(ours, features, [n_ctx], [root], embed, head)
    assert_close("block logits vs z-lab", ref, out.logits, 1e-4)
    ours.save_pretrained(tmp_path / "ours")  # and our checkpoint loads in their code
    back = zlab_cls.from_pretrained(tmp_path / "ours")
    for name, tensor in theirs.state_dict().items():
        assert torch.equal(tensor, back.state_dict()[name]), name
