"""Build a Decoder from a HF directory (config.json + safetensors) or from a config with random weights."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from weaver.models.checkpoint import check_complete, copy_tensors, read_weight_file, weight_files
from weaver.models.config import ModelConfig, load_config
from weaver.models.decoder import Decoder
from weaver.models.norm import GatedRMSNorm, RMSNorm
from weaver.options import RuntimeOptions

# Checkpoints of multimodal wrappers (Qwen3.5/3.6 VL) keep the text decoder under another prefix.
_PREFIX_REWRITES = (("model.language_model.", "model."),)
_SKIPPED_PREFIXES = ("model.visual.", "visual.", "mtp.", "model.mtp.")


def build_model(
    cfg: ModelConfig, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
    options: RuntimeOptions | None = None,
):
    """An uninitialised Decoder on `device` (fill it with `load_weights` or `init_random_weights`)."""
    with torch.device(device):
        model = Decoder(cfg, options)
    return model.to(dtype=dtype).eval().requires_grad_(False)


@torch.no_grad()
def init_random_weights(model: Decoder, seed: int = 0) -> Decoder:
    """Deterministic random weights with sane scales (std 0.02 linears, unit norms, HF-like GDN gates).

    Drawn on the CPU, so a seed gives the same model on every device, except for models over a
    billion parameters (real-shape timing runs), which are drawn on their own device for speed.
    """
    total = sum(p.numel() for p in model.parameters())
    draw_device = model.device if total > 1_000_000_000 else torch.device("cpu")
    gen = torch.Generator(device=draw_device).manual_seed(seed)

    def draw(shape, fill) -> torch.Tensor:
        return fill(torch.empty(shape, device=draw_device))

    for name, param in model.named_parameters():
        if name.endswith("A_log"):
            param.copy_(torch.log(draw(param.shape, lambda t: t.uniform_(1.0, 16.0, generator=gen))))
        elif name.endswith("dt_bias"):
            param.fill_(1.0)
        elif name.endswith("conv1d.weight"):
            bound = 1.0 / math.sqrt(param.shape[-1])
            param.copy_(draw(param.shape, lambda t, r=bound: t.uniform_(-r, r, generator=gen)))
        elif param.ndim > 1:  # norms and biases are set below
            param.copy_(draw(param.shape, lambda t: t.normal_(0.0, 0.02, generator=gen)))
    for module in model.modules():
        if isinstance(module, RMSNorm):
            module.weight.fill_(0.0 if module.offset else 1.0)
        elif isinstance(module, GatedRMSNorm):
            module.weight.fill_(1.0)
        elif isinstance(module, torch.nn.Linear) and module.bias is not None:
            module.bias.zero_()
    return model


def _rename(name: str) -> str | None:
    for old, new in _PREFIX_REWRITES:
        if name.startswith(old):
            name = new + name[len(old) :]
    if name.startswith(_SKIPPED_PREFIXES):
        return None
    return name


@torch.no_grad()
def load_weights(model: Decoder, model_dir: str | Path) -> Decoder:
    """Copy HF safetensors (by HF parameter names) into the model; any mismatch is a CheckpointError.

    Reads one weight file at a time, so peak host memory is one shard.
    """
    model_dir = Path(model_dir)
    params = dict(model.named_parameters())
    tied = model.config.tie_word_embeddings

    def rename(name: str) -> str | None:
        name = _rename(name)
        return None if (tied and name == "lm_head.weight") else name

    seen: set[str] = set()
    for file in weight_files(model_dir, "model checkpoint"):
        seen |= copy_tensors(params, read_weight_file(file), file.name, rename)
    if tied:
        seen.add("lm_head.weight")
    check_complete(params, seen, model_dir)
    return model


def load_model(
    model_dir: str | Path, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
) -> Decoder:
    """config.json + safetensors in `model_dir` -> a ready Decoder in eval mode."""
    cfg = load_config(model_dir)
    return load_weights(build_model(cfg, device, dtype), model_dir)
