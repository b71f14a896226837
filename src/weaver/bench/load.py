"""`weaver bench load`: peak memory and speed of loading a checkpoint in the released Qwen3.6 layout.

Writes (once) a random checkpoint shaped like Qwen/Qwen3.6-27B's files: `Qwen3_5ForConditionalGeneration`
config with a nested `text_config`, sharded safetensors with `model.safetensors.index.json`, the text decoder
under `model.language_model.`, plus a small vision tower and MTP head the loader must skip unread. Then loads it
in a fresh process and reports the peak memory the load added over the text weights: device memory on CUDA
(`torch.cuda.max_memory_allocated`), resident memory on the CPU (VmHWM, reset just before, against the RSS then).
`--num-layers` bounds the size (the 27B shape with 6 layers is ~9.7 GB).

    weaver bench load --model qwen3.6-27b-shape --num-layers 6 --dir /tmp/released --device cuda --out load.json
    weaver bench load --model tiny-qwen3_5 --device cpu --dtype bf16
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from weaver.argtypes import positive_int
from weaver.errors import WeaverError

TEXT_PREFIX = "model.language_model."
INDEX_NAME = "model.safetensors.index.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="qwen3.6-27b-shape", help="preset name or config.json of the text model")
    parser.add_argument("--num-layers", type=positive_int, default=None,
                        help="decoder layers written (bounds the size)")
    parser.add_argument("--dir", default=None, help="checkpoint directory (written when incomplete; default: a "
                        "temporary one, removed afterwards)")
    parser.add_argument("--shards", type=positive_int, default=15, help="safetensors shards (the release has 15)")
    parser.add_argument("--device", default=None, help="where the model is loaded (default: cuda when available)")
    parser.add_argument("--dtype", default="bf16", help="stored and loaded dtype (default bf16)")
    parser.add_argument("--max-ratio", type=float, default=1.1, help="exit 1 when peak / text weights exceeds it")
    parser.add_argument("--out", default=None, help="write the JSON report here")


# ------------------------------------------------------------------------------------------------ writing
def text_config(model: str, num_layers: int | None = None) -> dict[str, Any]:
    """The HF text config of a preset (or a config.json), optionally cut to `num_layers` decoder layers."""
    from weaver.models.checkpoint import read_config_json
    from weaver.models.presets import PRESETS, preset_config

    cfg = preset_config(model) if model in PRESETS else read_config_json(model, "model")
    cfg = dict(cfg.get("text_config", cfg))
    cfg["model_type"] = "qwen3_5_text"
    if num_layers is not None:
        cfg["num_hidden_layers"] = num_layers
        cfg.pop("layer_types", None)  # derived again from full_attention_interval
    return cfg


def released_shapes(text: dict[str, Any]) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[int, ...]]]:
    """(text tensors, skipped tensors): stored names -> shapes, in the release's naming."""
    from weaver.models.config import ModelConfig
    from weaver.models.decoder import Decoder

    cfg = ModelConfig.from_hf(text)
    with torch.device("meta"):
        model = Decoder(cfg)
    names = {}
    for name, p in model.named_parameters():  # a tied lm_head is not listed (named once, as embed_tokens)
        names[TEXT_PREFIX + name.removeprefix("model.") if name.startswith("model.") else name] = tuple(p.shape)
    h, i, v = cfg.hidden_size, cfg.intermediate_size, min(cfg.hidden_size, 1152)
    skipped = {
        "model.visual.patch_embed.proj.weight": (v, 3, 2, 16, 16),
        "model.visual.blocks.0.attn.qkv.weight": (3 * v, v),
        "model.visual.merger.linear_fc2.weight": (h, 4 * v),
        "mtp.fc.weight": (h, 2 * h),
        "mtp.norm.weight": (h,),
        "mtp.pre_fc_norm_embedding.weight": (h,),
        "mtp.pre_fc_norm_hidden.weight": (h,),
        "mtp.layers.0.mlp.down_proj.weight": (h, i),
    }
    return names, skipped


def write_released_checkpoint(
    path: str | Path, text: dict[str, Any], dtype: torch.dtype = torch.bfloat16, num_shards: int = 15,
    seed: int = 0, device: str | torch.device = "cpu",
) -> int:
    """Write a random checkpoint in the released layout (config.json written last); returns the text bytes.

    Values ~ N(0, 0.02) drawn on `device` in `dtype`, one shard at a time (memory: one shard).
    """
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").unlink(missing_ok=True)
    names, skipped = released_shapes(text)
    shapes = {**names, **skipped}
    size = torch.tensor([], dtype=dtype).element_size()
    nbytes = {name: size * _numel(shape) for name, shape in shapes.items()}
    total = sum(nbytes.values())
    groups: dict[int, list[str]] = {}
    start = 0
    for name in shapes:  # in order; a tensor goes to the shard where its first byte falls
        groups.setdefault(min(start * num_shards // total, num_shards - 1), []).append(name)
        start += nbytes[name]
    shards = list(groups.values())
    gen = torch.Generator(device=device).manual_seed(seed)
    weight_map = {}
    for k, shard in enumerate(shards, 1):
        file = f"model-{k:05d}-of-{len(shards):05d}.safetensors"
        tensors = {n: torch.empty(shapes[n], dtype=dtype, device=device).normal_(0.0, 0.02, generator=gen).cpu()
                   for n in shard}  # fmt: skip
        save_file(tensors, str(path / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shard, file))
        del tensors
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (path / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n")
    config = {
        "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
        "tie_word_embeddings": bool(text.get("tie_word_embeddings", False)),
        "text_config": text,
        "vision_config": {"model_type": "qwen3_5_vision", "hidden_size": min(text["hidden_size"], 1152)},
    }  # fmt: skip
    (path / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return sum(nbytes[n] for n in names)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


# ---------------------------------------------------------------------------------------------- measuring
def _current_rss() -> int:
    """Resident bytes of this process now (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _reset_peak_rss() -> None:
    """Set this process's VmHWM back to its current RSS (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _peak_rss() -> int:
    """VmHWM: the highest RSS since the process started or since `_reset_peak_rss`."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    raise RuntimeError("no VmHWM in /proc/self/status")


def measure_load(path: str | Path, device: str, dtype: torch.dtype, warmup: str | Path | None = None) -> dict[str, Any]:
    """Load `path` here; the peak memory the load added, then the peak once its projections are fused too (as
    `weaver.LLM` does). Run it in a fresh process. On the CPU the peak is VmHWM, reset just before the load
    (/proc/self/clear_refs): a higher RSS earlier in the process (imports, the warm-up) is not the load's.

    `warmup`: a small checkpoint loaded first, so one-time costs (lazy imports, allocator set-up) are not counted.
    """
    import time

    from weaver.models.fuse import fuse_projections
    from weaver.models.loading import load_model

    dev = torch.device(device)
    if warmup is not None:
        fuse_projections(load_model(warmup, dev, dtype, progress=False))  # dropped at once

    def peak() -> int:
        if dev.type == "cuda":
            return torch.cuda.max_memory_allocated(dev)
        return _peak_rss()

    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        before = torch.cuda.memory_allocated(dev)
    else:
        _reset_peak_rss()
        before = _current_rss()
    t0 = time.perf_counter()
    model = load_model(path, dev, dtype)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    seconds = time.perf_counter() - t0
    loaded = peak() - before
    fuse_projections(model)
    fused = peak() - before
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return {"device": str(dev), "dtype": str(dtype).removeprefix("torch."), "text_bytes": weights,
            "peak_bytes": loaded, "ratio": loaded / weights, "fused_peak_bytes": fused, "fused_ratio": fused / weights,
            "seconds": seconds, "GB_per_s": weights / seconds / 1e9,
            "memory": "max_memory_allocated" if dev.type == "cuda" else "VmHWM - rss before"}  # fmt: skip


def measure_in_subprocess(
    path: str | Path, device: str, dtype: str, warmup: str | Path | None = None
) -> dict[str, Any]:
    """`measure_load` in a fresh interpreter (its own peak RSS); WeaverError with its stderr if it fails."""
    code = "from weaver.bench.load import _measure_main; _measure_main()"
    argv = [sys.executable, "-c", code, str(path), device, dtype, *([str(warmup)] if warmup else [])]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise WeaverError(f"loading {path} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _measure_main() -> None:
    from weaver.llm import resolve_dtype

    path, device, dtype, *warmup = sys.argv[1:]
    print(json.dumps(measure_load(path, device, resolve_dtype(dtype, torch.device(device)), *warmup)))


# -------------------------------------------------------------------------------------------------- CLI
def run(args: argparse.Namespace) -> int:
    from weaver.llm import resolve_device, resolve_dtype

    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    path = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="weaver-released-"))
    warmup = Path(tempfile.mkdtemp(prefix="weaver-released-warmup-"))  # a tiny one, loaded first
    try:
        if not (path / "config.json").is_file():
            text = text_config(args.model, args.num_layers)
            print(f"writing a random checkpoint in the released layout to {path} ...", file=sys.stderr, flush=True)
            write_released_checkpoint(path, text, dtype, args.shards, device=device)
        write_released_checkpoint(warmup, text_config("tiny-qwen3_5"), dtype, num_shards=2)
        report = measure_in_subprocess(path, str(device), str(dtype).removeprefix("torch."), warmup)
    finally:
        shutil.rmtree(warmup, ignore_errors=True)
        if not args.dir:
            shutil.rmtree(path, ignore_errors=True)
    report.update(model=args.model, num_layers=args.num_layers, shards=args.shards, max_ratio=args.max_ratio)
    print(f"loaded {report['text_bytes'] / 1e9:.2f} GB of text weights on {report['device']} in "
          f"{report['seconds']:.1f} s ({report['GB_per_s']:.2f} GB/s); peak added {report['peak_bytes'] / 1e9:.2f} GB"
          f" = {report['ratio']:.3f} x the weights (limit {args.max_ratio}); with the projections fused as weaver.LLM "
          f"does: {report['fused_ratio']:.3f} x")  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return 0 if report["ratio"] <= args.max_ratio else 1
