"""Loading checkpoints as released: Qwen3_5ForConditionalGeneration layout, meta build, no fp32 detour, memory."""

from __future__ import annotations

import json

import pytest
import torch
from helpers.hf_reference import hf_logits
from torch.utils._python_dispatch import TorchDispatchMode

import weaver
from weaver.bench.load import measure_in_subprocess, text_config, write_released_checkpoint
from weaver.cli import main
from weaver.models.checkpoint import copy_tensors, read_tensors, write_checkpoint
from weaver.models.config import ModelConfig
from weaver.models.decoder import Decoder
from weaver.models.loading import build_model, init_random_weights, load_model
from weaver.models.presets import preset_config

PROMPT = [5, 17, 42, 8, 9, 60, 3]


def _logits(model: Decoder, ids: list[int] = PROMPT) -> torch.Tensor:
    cache = model.allocate_cache(1, 16)
    with torch.no_grad():
        return model(torch.tensor([ids]), cache).logits[0]


def test_conditional_generation_checkpoint_matches_transformers(tmp_path):
    """A sharded Qwen3_5ForConditionalGeneration save (vision tower, plus an MTP head we add) loads by its names."""
    import transformers
    from safetensors.torch import save_file

    text = {k: v for k, v in preset_config("tiny-qwen3_5").items() if k != "model_type"}
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=4,
                  spatial_merge_size=2, temporal_patch_size=2)  # fmt: skip
    torch.manual_seed(0)
    config = transformers.Qwen3_5Config(text_config=text, vision_config=vision)
    hf = transformers.Qwen3_5ForConditionalGeneration(config)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in hf.parameters():  # norms and gates away from their init: offsets are exercised
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    hf.eval().save_pretrained(tmp_path, max_shard_size="40KB")
    mtp = {"mtp.fc.weight": torch.zeros(64, 128), "mtp.norm.weight": torch.ones(64)}
    save_file(mtp, str(tmp_path / "mtp.safetensors"))
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    index["weight_map"].update({"mtp.fc.weight": "mtp.safetensors", "mtp.norm.weight": "mtp.safetensors"})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))

    ours = load_model(tmp_path)
    diff = (_logits(ours) - hf_logits(hf, PROMPT)).abs().max().item()
    assert diff <= 1e-4, f"max abs logit diff {diff:.3e}"


def _previous_loader(path, cfg: ModelConfig, dtype: torch.dtype) -> Decoder:
    """What loading did before the meta build: an initialised float32 decoder, cast, then every tensor copied."""
    model = Decoder(cfg).to(dtype=dtype).eval().requires_grad_(False)
    params = dict(model.named_parameters())
    tied = cfg.tie_word_embeddings
    copy_tensors(params, read_tensors(path), path, lambda n: None if tied and n == "lm_head.weight" else n)
    return model


@pytest.mark.parametrize("preset", ["tiny-llama", "tiny-qwen3", "tiny-qwen3_5", "tied"])
def test_logits_identical_to_the_previous_loader(tmp_path, preset):
    hf = preset_config("tiny-llama", tie_word_embeddings=True) if preset == "tied" else preset_config(preset)
    cfg = ModelConfig.from_hf(hf)
    eager = init_random_weights(Decoder(cfg).eval().requires_grad_(False), seed=4)  # the previous build path
    assert torch.equal(_logits(init_random_weights(build_model(cfg), seed=4)), _logits(eager))
    write_checkpoint(tmp_path, hf, eager)
    for dtype in (torch.float32, torch.bfloat16):
        new, old = load_model(tmp_path, dtype=dtype), _previous_loader(tmp_path, cfg, dtype)
        assert new.dtype == dtype and torch.equal(_logits(new), _logits(old)), dtype
        if cfg.tie_word_embeddings:
            assert new.lm_head.weight is new.model.embed_tokens.weight


class _Allocations(TorchDispatchMode):
    """Every tensor an op produces off the meta device: (op, dtype, numel)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, torch.dtype, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                self.seen.append((str(func), t.dtype, t.numel()))
        return out


def test_loading_bf16_never_makes_a_float32_copy(tmp_path):
    write_released_checkpoint(tmp_path, text_config("tiny-qwen3_5"), torch.bfloat16, num_shards=3)
    with _Allocations() as allocations:
        model = load_model(tmp_path, dtype=torch.bfloat16)
    assert model.dtype == torch.bfloat16
    fp32 = [(op, n) for op, dtype, n in allocations.seen if dtype == torch.float32 and n > 64]  # rope freqs: 8
    assert not fp32, fp32[:5]
    assert sum(n for _, dtype, n in allocations.seen if dtype == torch.bfloat16) >= sum(
        p.numel() for p in model.parameters())
    with _Allocations() as allocations:  # the check catches what the previous build did
        Decoder(ModelConfig.from_hf(preset_config("tiny-qwen3_5"))).to(torch.bfloat16)
    assert any(dtype == torch.float32 and n > 64 for _, dtype, n in allocations.seen)


def test_peak_memory_while_loading_stays_near_the_weights(tmp_path):
    """CPU, bf16, in a fresh process: resident memory added by the load <= 1.1 x the text weights + 16 MiB.

    15 shards, as released (one shard's pages are mapped while it is read); a tiny checkpoint is loaded first so
    one-time costs (lazy imports, allocator set-up) are not counted. The previous loader measured 2.05x here.
    """
    text = {**text_config("tiny-qwen3_5"), "vocab_size": 8192, "hidden_size": 1024, "intermediate_size": 2816,
            "num_hidden_layers": 8, "num_attention_heads": 8, "head_dim": 128, "full_attention_interval": 4,
            "linear_num_key_heads": 4, "linear_num_value_heads": 12, "linear_key_head_dim": 64,
            "linear_value_head_dim": 64}  # fmt: skip
    text_bytes = write_released_checkpoint(tmp_path / "big", text, torch.bfloat16, num_shards=15)
    write_released_checkpoint(tmp_path / "warmup", text_config("tiny-qwen3_5"), torch.bfloat16, num_shards=2)
    assert text_bytes > 150e6
    report = measure_in_subprocess(tmp_path / "big", "cpu", "bf16", warmup=tmp_path / "warmup")
    assert report["text_bytes"] == text_bytes
    assert report["peak_bytes"] <= 1.1 * text_bytes + (16 << 20), report


def test_bad_checkpoints_are_one_line_errors(tmp_path, capsys):
    write_released_checkpoint(tmp_path, text_config("tiny-qwen3_5"), torch.bfloat16, num_shards=3)
    (tmp_path / "tokenizer_config.json").write_text("{}")  # the directory check wants a tokenizer file
    shard = tmp_path / "model-00002-of-00003.safetensors"
    shard.rename(tmp_path / "moved")
    with pytest.raises(weaver.CheckpointError, match="missing weight file .*model-00002-of-00003"):
        load_model(tmp_path)
    assert main(["generate", "hi", "--model", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    (tmp_path / "moved").rename(shard)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["text_config"]["intermediate_size"] = 64
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(weaver.CheckpointError, match="shape"):
        load_model(tmp_path)
    cfg["text_config"]["intermediate_size"] = 96
    cfg["text_config"]["num_hidden_layers"] = 2
    cfg["text_config"].pop("layer_types", None)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(weaver.CheckpointError, match="unexpected parameter 'model.language_model.layers.2"):
        load_model(tmp_path)


def test_random_init_of_large_models_draws_in_place(monkeypatch):
    """Past the size where init draws on the device (real-shape timing runs), no float32 tensor is made either."""
    import weaver.models.loading as loading

    monkeypatch.setattr(loading, "_DRAW_ON_DEVICE_PARAMS", 0)
    cfg = ModelConfig.from_hf(preset_config("tiny-qwen3_5"))
    with _Allocations() as allocations:
        model = init_random_weights(build_model(cfg, dtype=torch.bfloat16), seed=1)
    assert not [(op, n) for op, dtype, n in allocations.seen if dtype == torch.float32 and n > 64]
    assert all(torch.isfinite(p.float()).all() for p in model.parameters())
    assert 0.015 < model.lm_head.weight.float().std() < 0.025


def test_weights_that_cannot_fit_are_a_one_line_error(monkeypatch, capsys):
    """Past the device's free memory, build_model refuses before allocating (no allocator traceback, no swapping):
    the weights' bytes in the run's dtype, tied embeddings once, against `free_memory`."""
    import weaver.models.loading as loading

    cfg = ModelConfig.from_hf(preset_config("tiny-llama"))
    with torch.device("meta"):
        params = sum(p.numel() for n, p in Decoder(cfg).named_parameters() if n != "lm_head.weight" or
                     not cfg.tie_word_embeddings)  # fmt: skip
    monkeypatch.setattr(loading, "free_memory", lambda device: 2 * params)  # bf16 fits exactly, fp32 does not
    build_model(cfg, dtype=torch.bfloat16)
    with pytest.raises(weaver.InsufficientMemoryError, match=r"need .* GB in float32 on cpu.*--dtype bf16"):
        build_model(cfg, dtype=torch.float32)
    assert main(["generate", "hi", "--model", "tiny-llama", "--random-weights", "--device", "cpu"]) == 2
    assert "GB is free" in capsys.readouterr().err
    free = loading.free_memory(torch.device("cpu"))
    assert free is None or free > 0
