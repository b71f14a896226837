"""Build a Decoder from a HF directory (config.json + safetensors) or from a config with random weights.

The decoder is built on the meta device (no memory, no initialisation), then allocated once, in the dtype and
on the device where it will run; weights are streamed into it tensor by tensor, or drawn in place. So loading
never holds more than the weights plus one stored tensor (and, on the CPU, one shard's mapped pages): no fp32
copy of a bf16 model, which for a 27B model would be ~108 GB.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

from weaver.errors import InsufficientMemoryError
from weaver.models.checkpoint import check_complete, copy_file_tensors, weight_files
from weaver.models.config import ModelConfig, load_config
from weaver.models.decoder import Decoder
from weaver.models.norm import GatedRMSNorm, RMSNorm
from weaver.options import RuntimeOptions

# Checkpoints of multimodal wrappers (Qwen3.5/3.6 VL) keep the text decoder under another prefix.
_PREFIX_REWRITES = (("model.language_model.", "model."),)
_SKIPPED_PREFIXES = ("model.visual.", "visual.", "mtp.", "model.mtp.")
_DRAW_ON_DEVICE_PARAMS = 1_000_000_000  # larger models (real-shape timing runs) are drawn in place, on their device


def build_model(
    cfg: ModelConfig, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
    options: RuntimeOptions | None = None,
) -> Decoder:
    """An uninitialised Decoder allocated once, in `dtype` on `device` (fill it with `load_weights` or
    `init_random_weights`)."""
    with torch.device("meta"):
        model = Decoder(cfg, options)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = None  # re-tied below: the shared matrix is allocated once
    check_fits(sum(p.numel() for p in model.parameters()) * dtype.itemsize, torch.device(device), dtype)
    model = model.to(dtype=dtype).to_empty(device=device)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.eval().requires_grad_(False)


def free_memory(device: torch.device) -> int | None:
    """Bytes free for new tensors on `device`: the GPU's free memory, or the host's MemAvailable (Linux); None
    where it cannot be known."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type == "cpu":
        try:
            with open("/proc/meminfo") as f:
                return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
        except (OSError, StopIteration, ValueError):
            return None
    return None


def check_fits(nbytes: int, device: torch.device, dtype: torch.dtype) -> None:
    """An InsufficientMemoryError before allocating weights that cannot fit: not an allocator traceback, nor, on the
    CPU, minutes of swapping before the kernel's OOM killer (a 27B shape is 108 GB in float32)."""
    free = free_memory(device)
    if free is not None and nbytes > free:
        hint = " (--dtype bf16 halves it)" if dtype == torch.float32 else ""
        raise InsufficientMemoryError(
            f"the model's weights need {nbytes / 1e9:.1f} GB in {str(dtype).removeprefix('torch.')} on {device}, "
            f"but {free / 1e9:.1f} GB is free{hint}: use a smaller model or a device with more memory")


@torch.no_grad()
def init_random_weights(model: Decoder, seed: int = 0) -> Decoder:
    """Deterministic random weights with sane scales (std 0.02 linears, unit norms, HF-like GDN gates).

    Drawn on the CPU in float32, so a seed gives the same model on every device and dtype, except for models
    over a billion parameters (real-shape timing runs), which are drawn in place on their device in their own
    dtype: no float32 copy of a tensor, so random init needs no more memory than the weights.
    """
    total = sum(p.numel() for p in model.parameters())
    in_place = total > _DRAW_ON_DEVICE_PARAMS
    gen = torch.Generator(device=model.device if in_place else "cpu").manual_seed(seed)

    def fill(param: torch.Tensor, draw) -> None:  # draw(t) fills t in place
        if in_place:
            draw(param)
        else:
            param.copy_(draw(torch.empty(param.shape)))

    filled: set[int] = set()
    for name, param in model.named_parameters():
        if name.endswith("A_log"):
            fill(param, lambda t: t.uniform_(1.0, 16.0, generator=gen).log_())
        elif name.endswith("dt_bias"):
            param.fill_(1.0)
        elif name.endswith("conv1d.weight"):
            bound = 1.0 / math.sqrt(param.shape[-1])
            fill(param, lambda t, r=bound: t.uniform_(-r, r, generator=gen))
        elif param.ndim > 1:  # norms and biases are set below
            fill(param, lambda t: t.normal_(0.0, 0.02, generator=gen))
        else:
            continue
        filled.add(id(param))
    for module in model.modules():
        if isinstance(module, RMSNorm):
            module.weight.fill_(0.0 if module.offset else 1.0)
        elif isinstance(module, GatedRMSNorm):
            module.weight.fill_(1.0)
        elif isinstance(module, torch.nn.Linear) and module.bias is not None:
            module.bias.zero_()
            filled.add(id(module.bias))
            continue
        else:
            continue
        filled.add(id(module.weight))
    unset = [name for name, p in model.named_parameters() if id(p) not in filled]
    if unset:  # build_model leaves memory uninitialised: a parameter no rule covers would hold garbage
        raise RuntimeError(f"init_random_weights has no rule for {unset[:5]}")
    return model


def _rename(name: str) -> str | None:
    for old, new in _PREFIX_REWRITES:
        if name.startswith(old):
            name = new + name[len(old) :]
    if name.startswith(_SKIPPED_PREFIXES):
        return None
    return name


@torch.no_grad()
def load_weights(model: Decoder, model_dir: str | Path, progress: bool = True) -> Decoder:
    """Stream HF safetensors (by HF parameter names; vision tower and MTP head skipped unread) into the model,
    shard by shard, tensor by tensor; any mismatch is a CheckpointError. `progress`: a bar on stderr (for loads
    that last over a second)."""
    from tqdm.auto import tqdm

    model_dir = Path(model_dir)
    params = dict(model.named_parameters())
    tied = model.config.tie_word_embeddings

    def rename(name: str) -> str | None:
        name = _rename(name)
        return None if (tied and name == "lm_head.weight") else name

    files = weight_files(model_dir, "model checkpoint")
    total = sum(p.numel() * p.element_size() for p in params.values())
    seen: set[str] = set()
    with tqdm(total=total, unit="B", unit_scale=True, desc=f"loading {model_dir.name}", file=sys.stderr,
              disable=not progress, delay=1.0, mininterval=1.0, leave=False) as bar:  # fmt: skip
        for file in files:
            seen |= copy_file_tensors(params, file, rename, on_copy=bar.update)
    if tied:
        seen.add("lm_head.weight")
    check_complete(params, seen, model_dir)
    return model


def load_model(
    model_dir: str | Path, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
    options: RuntimeOptions | None = None, progress: bool = True,
) -> Decoder:
    """config.json + safetensors in `model_dir` -> a ready Decoder in eval mode."""
    cfg = load_config(model_dir)
    return load_weights(build_model(cfg, device, dtype, options), model_dir, progress)
