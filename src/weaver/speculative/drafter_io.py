"""The DFlash drafter's checkpoint format (z-lab's): `config.json` <-> DrafterConfig, and `model.safetensors`.

Parameter names are z-lab's `DFlashDraftModel` names, with no `model.` prefix (`layers.{i}.self_attn.q_proj.weight`,
..., `fc.weight`, `hidden_norm.weight`, `norm.weight`). The only name of ours is `mask_embedding` (a drafter for a
target without a spare MASK id). Every problem with a directory is a CheckpointError; a config weaver cannot run
is an UnsupportedArchitectureError. This module knows nothing about the drafter's layers: it maps config dicts
and copies tensors by name (`weaver.speculative.drafter` builds the model).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from weaver.errors import CheckpointError, UnsupportedArchitectureError
from weaver.models.checkpoint import (
    check_complete,
    checkpoint_dir,
    copy_tensors,
    read_config_json,
)
from weaver.models.checkpoint import read_tensors as read_checkpoint_tensors
from weaver.models.config import ModelConfig

DRAFTER_LAYER_TYPES = ("full_attention", "sliding_attention")
ARCHITECTURE = "DFlashDraftModel"
# DFlash 2 / later z-lab fields that change the computation; a config setting them is refused, not ignored.
_UNSUPPORTED_FIELDS = {"input_embedding_scale": 1.0, "output_multiplier": 1.0, "final_logit_softcapping": None}


def build_target_layer_ids(num_target_layers: int, n: int) -> list[int]:
    """n target layer ids (0-based decoder layer indices) whose outputs feed the drafter.

    z-lab's rule when it gives n distinct ids (n <= L - 3): n == 1 -> [L // 2]; otherwise
    round(1 + i (L - 4) / (n - 1)) for i < n, i.e. uniform over [1, L - 3] with Python's round
    (Qwen3-8B, L=36, n=5 -> [1, 9, 17, 25, 33]; SmolLM2, L=30 -> [1, 8, 14, 20, 27]).
    Tiny targets (n > L - 3, e.g. every target with L < 5): n ids uniform over all layers [0, L - 1]
    with the same rounding, which are distinct for n <= L (L=2, n=2 -> [0, 1]; L=4, n=3 -> [0, 2, 3]).
    """
    if num_target_layers < 1 or not 1 <= n <= num_target_layers:
        raise ValueError(f"need 1 <= n <= num_target_layers, got n={n}, num_target_layers={num_target_layers}")
    if n == 1:
        return [num_target_layers // 2]
    if n <= num_target_layers - 3:
        start, end = 1, num_target_layers - 3
    else:
        start, end = 0, num_target_layers - 1
    return [int(round(start + i * (end - start) / (n - 1))) for i in range(n)]


@dataclass
class DrafterConfig:
    """Shapes of a DFlash drafter; field names follow z-lab's Qwen3-style config.json."""

    hidden_size: int = 256  # = the target's hidden size
    num_hidden_layers: int = 1
    num_attention_heads: int = 4
    num_key_value_heads: int = 4
    head_dim: int = 0  # 0 = hidden_size // num_attention_heads
    intermediate_size: int = 688
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 4096
    block_size: int = 16  # Bk: root + Bk-1 mask positions
    target_layer_ids: list[int] = field(default_factory=list)
    mask_token_id: int | None = None  # None: a learned `mask_embedding` [H] instead of embed_tokens(MASK)
    layer_types: list[str] = field(default_factory=list)  # full_attention | sliding_attention
    sliding_window: int | None = None
    vocab_size: int = 32000  # the target's
    num_target_layers: int = 0
    rope_scaling: dict[str, Any] | None = None  # llama3-style scaling, or None
    attention_bias: bool = False
    is_causal: bool | None = None  # z-lab override for every layer; None: causal iff sliding_attention

    def __post_init__(self) -> None:
        if self.head_dim <= 0:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if not self.layer_types:
            self.layer_types = ["full_attention"] * self.num_hidden_layers
        self.layer_types = list(self.layer_types)
        self.target_layer_ids = [int(i) for i in self.target_layer_ids]
        if len(self.layer_types) != self.num_hidden_layers:
            raise UnsupportedArchitectureError(
                f"drafter layer_types has {len(self.layer_types)} entries for {self.num_hidden_layers} layers"
            )
        unknown = sorted(set(self.layer_types) - set(DRAFTER_LAYER_TYPES))
        if unknown:
            raise UnsupportedArchitectureError(
                f"drafter layer types {unknown} are not supported; supported: {DRAFTER_LAYER_TYPES}"
            )
        if "sliding_attention" in self.layer_types and not (self.sliding_window and self.sliding_window > 0):
            raise UnsupportedArchitectureError("sliding_attention drafter layers need a positive sliding_window")
        if self.num_attention_heads % self.num_key_value_heads:
            raise UnsupportedArchitectureError(
                f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads={self.num_key_value_heads}"
            )
        if self.block_size < 2:
            raise UnsupportedArchitectureError(f"block_size must be at least 2, got {self.block_size}")
        if not self.target_layer_ids:
            raise UnsupportedArchitectureError("the drafter needs at least one target layer id")
        bad = [i for i in self.target_layer_ids if i < 0 or (self.num_target_layers and i >= self.num_target_layers)]
        if bad:
            raise UnsupportedArchitectureError(
                f"target_layer_ids {bad} out of range for a target of {self.num_target_layers} layers"
            )
        if self.mask_token_id is not None and not 0 <= self.mask_token_id < self.vocab_size:
            raise UnsupportedArchitectureError(
                f"mask_token_id={self.mask_token_id} is outside the vocabulary of {self.vocab_size}"
            )

    @property
    def num_target_features(self) -> int:
        return len(self.target_layer_ids)

    @property
    def rotary_dim(self) -> int:
        return self.head_dim

    def rope_config(self) -> ModelConfig:
        """The RoPE fields as a ModelConfig, so `weaver.models.rope` computes the frequencies."""
        return ModelConfig(
            model_type="qwen3",
            hidden_size=self.hidden_size,
            num_hidden_layers=1,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            rope_theta=self.rope_theta,
            rope_scaling=self.rope_scaling,
        )

    def layer_causal(self, i: int) -> bool:
        return self.layer_types[i] == "sliding_attention" if self.is_causal is None else self.is_causal

    def layer_window(self, i: int) -> int | None:
        return self.sliding_window if self.layer_types[i] == "sliding_attention" else None

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> DrafterConfig:
        """Map a z-lab / SpecForge DFlash config.json dict (dflash_config values win over top-level ones).

        `sliding_window` is honoured whenever the layer types ask for it, even with `use_sliding_window`
        false: HF's Qwen3Config (so z-lab's torch model) would silently drop the window there, z-lab's MLX
        loader keeps it, SpecForge refuses such a config. `to_hf` always writes `use_sliding_window: true`.
        """
        try:
            return cls._from_hf(hf)
        except KeyError as missing:
            raise CheckpointError(f"drafter config is missing the required field {missing}") from None
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"drafter config has a malformed field: {exc}") from None

    @classmethod
    def _from_hf(cls, hf: dict[str, Any]) -> DrafterConfig:
        archs = hf.get("architectures") or [ARCHITECTURE]
        if ARCHITECTURE not in archs:
            raise UnsupportedArchitectureError(f"drafter architectures {archs} are not supported; need {ARCHITECTURE}")
        dflash = hf.get("dflash_config") or {}

        def value(name: str, default: Any = None) -> Any:
            return dflash.get(name, hf.get(name, default))

        for name, neutral in _UNSUPPORTED_FIELDS.items():
            if value(name, neutral) not in (neutral, None):
                raise UnsupportedArchitectureError(f"drafter config sets {name}={value(name)!r}, not supported")
        if hf.get("hidden_act", "silu") != "silu":
            raise UnsupportedArchitectureError(f"drafter hidden_act {hf['hidden_act']!r} is not supported (silu)")
        rope = dict(hf.get("rope_parameters") or {})
        legacy = hf.get("rope_scaling") or {}
        rope_type = rope.get("rope_type") or legacy.get("rope_type") or legacy.get("type") or "default"
        if rope_type not in ("default", "llama3"):
            raise UnsupportedArchitectureError(f"drafter rope type {rope_type!r} is not supported (default, llama3)")
        layers = int(hf["num_hidden_layers"])
        heads = int(hf["num_attention_heads"])
        num_target_layers = int(value("num_target_layers", 0) or 0)
        layer_ids = value("target_layer_ids")
        if layer_ids is None:  # z-lab's default: as many features as draft layers
            if not num_target_layers:
                raise UnsupportedArchitectureError("drafter config has neither target_layer_ids nor num_target_layers")
            layer_ids = build_target_layer_ids(num_target_layers, min(layers, num_target_layers))
        mask_id = value("mask_token_id")
        return cls(
            hidden_size=int(hf["hidden_size"]),
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=int(hf.get("num_key_value_heads") or heads),
            head_dim=int(hf.get("head_dim") or 0),
            intermediate_size=int(hf["intermediate_size"]),
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            rope_theta=float(rope.get("rope_theta", hf.get("rope_theta", 10000.0))),
            max_position_embeddings=int(hf.get("max_position_embeddings", 4096)),
            block_size=int(value("block_size", 16)),
            target_layer_ids=[int(i) for i in layer_ids],
            mask_token_id=None if mask_id is None else int(mask_id),
            layer_types=list(hf.get("layer_types") or []),
            sliding_window=hf.get("sliding_window"),
            vocab_size=int(hf["vocab_size"]),
            num_target_layers=num_target_layers,
            rope_scaling={**legacy, **rope} if rope_type == "llama3" else None,
            attention_bias=bool(hf.get("attention_bias", False)),
            is_causal=hf.get("is_causal"),
        )

    def to_hf(self) -> dict[str, Any]:
        """z-lab's config.json dict (loadable by HF `Qwen3Config` and z-lab's `DFlashDraftModel`)."""
        sliding = "sliding_attention" in self.layer_types
        hf: dict[str, Any] = {
            "architectures": [ARCHITECTURE],
            "model_type": "qwen3",
            "hidden_act": "silu",
            "attention_bias": self.attention_bias,
            "attention_dropout": 0.0,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": self.rope_scaling,
            "max_position_embeddings": self.max_position_embeddings,
            "layer_types": list(self.layer_types),
            "max_window_layers": self.num_hidden_layers,
            "use_sliding_window": sliding,  # HF Qwen3Config keeps sliding_window only when this is true
            "sliding_window": self.sliding_window if sliding else None,
            "tie_word_embeddings": False,
            "initializer_range": 0.02,
            "vocab_size": self.vocab_size,
            "block_size": self.block_size,
            "num_target_layers": self.num_target_layers,
            "dflash_config": {"target_layer_ids": list(self.target_layer_ids), "mask_token_id": self.mask_token_id},
        }
        if self.is_causal is not None:
            hf["is_causal"] = self.is_causal
        return hf


# ---------------------------------------------------------------- files

# Tensors some exporters add next to the drafter's own (the target's frozen embedding / LM head, RoPE tables).
_IGNORED_PREFIXES = ("embed_tokens.", "lm_head.", "rotary_emb.")
_STRIPPED_PREFIXES = ("model.",)


def check_dir(path: str | Path) -> Path:
    return checkpoint_dir(path, "drafter checkpoint")


def read_hf_config(path: str | Path) -> dict[str, Any]:
    """The JSON object in `<path>/config.json`."""
    return read_config_json(check_dir(path), "drafter checkpoint")


def read_tensors(path: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint on the CPU, under its stored name."""
    return read_checkpoint_tensors(check_dir(path), "drafter checkpoint")


def _normalise(name: str) -> str | None:
    """Stored name -> module name (None: a tensor the drafter does not own)."""
    for prefix in _STRIPPED_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix) :]
    return None if name.startswith(_IGNORED_PREFIXES) else name


def copy_tensors_into(module: nn.Module, tensors: dict[str, torch.Tensor], where: str | Path) -> None:
    """Copy `tensors` into the module's parameters by name; an unexpected, missing or misshapen one is an error."""
    params = dict(module.named_parameters())
    seen = copy_tensors(params, tensors, where, _normalise)
    hint = ""
    if "mask_embedding" in set(params) - seen:
        hint = "; mask_embedding is needed because the config has no dflash_config.mask_token_id"
    check_complete(params, seen, f"drafter {where}", hint)
