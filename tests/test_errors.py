"""Bad input: typed errors from the API, one line and exit code 2 from the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import weaver
from weaver.cli import main
from weaver.models.presets import preset_config


def _tiny_checkpoint(tmp_path, **overrides):
    """A real (random-weight) tiny llama checkpoint directory with a byte-level tokenizer.json."""
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, models, pre_tokenizers

    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg = preset_config("tiny-llama", vocab_size=300, **overrides)
    llm = weaver.LLM.from_config(cfg, random_weights=True)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    save_file({k: v.clone() for k, v in llm.model.state_dict().items()}, str(tmp_path / "model.safetensors"))
    vocab = {f"<{i}>": i for i in range(300)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<0>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    return tmp_path


def test_unknown_model(capsys):
    with pytest.raises(weaver.UnknownModelError, match="smollm2"):
        weaver.LLM("no-such-model")
    assert main(["generate", "hi", "--model", "no-such-model"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: unknown model")


def test_missing_and_corrupt_checkpoints(tmp_path, capsys):
    with pytest.raises(weaver.CheckpointError):
        weaver.LLM(str(tmp_path))  # empty directory
    ckpt = _tiny_checkpoint(tmp_path / "ok")
    (ckpt / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(weaver.CheckpointError, match="cannot read"):
        weaver.LLM(str(ckpt))
    assert main(["generate", "hi", "--model", str(ckpt)]) == 2
    (ckpt / "config.json").write_text("{ broken")
    with pytest.raises(weaver.CheckpointError, match="JSON"):
        weaver.LLM(str(ckpt))
    assert capsys.readouterr().err.count("\n") == 1


def test_wrong_checkpoint_for_config(tmp_path):
    ckpt = _tiny_checkpoint(tmp_path / "a")
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["hidden_size"] = 32  # weights no longer fit the config
    (ckpt / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(weaver.CheckpointError, match="shape"):
        weaver.LLM(str(ckpt))


def test_unsupported_architecture(tmp_path, capsys):
    ckpt = _tiny_checkpoint(tmp_path / "b")
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["model_type"] = "gpt2"
    (ckpt / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(weaver.UnsupportedArchitectureError, match="gpt2"):
        weaver.LLM(str(ckpt))
    assert main(["generate", "hi", "--model", str(ckpt)]) == 2
    assert "not supported" in capsys.readouterr().err


def test_empty_and_too_long_prompts(tmp_path, capsys):
    llm = weaver.LLM.from_config(preset_config("tiny-llama", max_position_embeddings=64), random_weights=True)
    with pytest.raises(weaver.PromptError, match="empty"):
        llm.generate("")
    with pytest.raises(weaver.PromptError, match="empty"):
        llm.generate([])
    with pytest.raises(weaver.PromptError, match="context"):
        llm.generate(list(range(1, 65)))
    with pytest.raises(weaver.PromptError, match="vocabulary"):
        llm.generate([1, 2, 10_000])
    ckpt = _tiny_checkpoint(tmp_path / "c", max_position_embeddings=16)
    assert main(["generate", "   ", "--model", str(ckpt)]) == 2
    assert main(["generate", " ".join(f"<{i}>" for i in range(20)), "--model", str(ckpt), "--no-chat"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [err[0], err[1]] and "empty" in err[0] and "context" in err[1]


def test_bad_generation_arguments():
    llm = weaver.LLM.from_config("tiny-llama", random_weights=True)
    for kwargs in ({"temperature": -1.0}, {"top_p": 0.0}, {"top_k": -3}, {"max_new_tokens": 0},
                   {"method": "magic"}):
        with pytest.raises(weaver.GenerationConfigError):
            llm.generate([1, 2], **kwargs)


def test_cli_reports_without_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "weaver.cli", "generate", "hello", "--model", str(tmp_path / "missing")],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.startswith("error:")


def test_random_drafter_and_adapter_sizes():
    kw = dict(seed=0, device="cpu", dtype="fp32")
    llm = weaver.LLM.from_config("tiny-llama", **kw, drafter="random:2", adapter="random:16")
    assert len(llm.drafter.layers) == 2
    assert llm.adapter.config.d_rank == 16
    for bad in ("random:0", "random:x"):
        with pytest.raises(weaver.WeaverError, match="random:<positive int>"):
            weaver.LLM.from_config("tiny-llama", **kw, drafter=bad)
