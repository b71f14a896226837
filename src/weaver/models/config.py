"""One config dataclass for every supported target family, built from a HF `config.json` dict."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from weaver.errors import CheckpointError, UnsupportedArchitectureError

SUPPORTED_MODEL_TYPES = ("llama", "qwen3", "qwen3_5")
LAYER_TYPES = ("full_attention", "sliding_attention", "linear_attention")
# HF model_type aliases that share one implementation here.
_MODEL_TYPE_ALIASES = {"qwen3_5_text": "qwen3_5", "smollm2": "llama", "mistral": "llama"}


@dataclass
class ModelConfig:
    """Shapes and switches of a decoder; field names follow HF so `from_hf` stays a thin mapping."""

    model_type: str = "llama"  # llama | qwen3 | qwen3_5
    vocab_size: int = 32000
    hidden_size: int = 256
    intermediate_size: int = 688
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 4  # GQA: query heads per kv head = heads / kv_heads
    head_dim: int = 0  # 0 = hidden_size // num_attention_heads
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    partial_rotary_factor: float = 1.0  # qwen3_5 rotates only the first 25% of each head's dims
    rope_scaling: dict[str, Any] | None = None  # llama3-style frequency scaling, or None
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False  # per-head RMSNorm on q and k (qwen3, qwen3_5)
    attn_output_gate: bool = False  # qwen3_5: q_proj also yields a sigmoid gate on the attention output
    norm_offset: bool = False  # qwen3_5 RMSNorm scales by (1 + w), weights initialised to 0
    sliding_window: int | None = None
    layer_types: list[str] = field(default_factory=list)
    # Gated DeltaNet (linear_attention layers)
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 4
    bos_token_id: int | None = None
    eos_token_id: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.head_dim <= 0:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if not self.layer_types:
            self.layer_types = ["full_attention"] * self.num_hidden_layers
        if len(self.layer_types) != self.num_hidden_layers:
            raise UnsupportedArchitectureError(
                f"layer_types has {len(self.layer_types)} entries for {self.num_hidden_layers} layers"
            )
        unknown = sorted(set(self.layer_types) - set(LAYER_TYPES))
        if unknown:
            raise UnsupportedArchitectureError(f"unsupported layer types {unknown}; supported: {LAYER_TYPES}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise UnsupportedArchitectureError(
                f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads={self.num_key_value_heads}"
            )
        if self.has_gdn and self.linear_num_value_heads % max(self.linear_num_key_heads, 1):
            raise UnsupportedArchitectureError(
                f"linear_num_value_heads={self.linear_num_value_heads} is not a multiple of "
                f"linear_num_key_heads={self.linear_num_key_heads}"
            )

    @property
    def has_gdn(self) -> bool:
        return "linear_attention" in self.layer_types

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def gdn_conv_dim(self) -> int:
        """Channels of the GDN short conv: [q | k | v]."""
        key_dim = self.linear_num_key_heads * self.linear_key_head_dim
        return 2 * key_dim + self.linear_num_value_heads * self.linear_value_head_dim

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> ModelConfig:
        """Map a HF config dict (llama / qwen3 / qwen3_5, or a qwen3_5 VL wrapper with text_config)."""
        if "text_config" in hf and isinstance(hf["text_config"], dict):
            hf = {"tie_word_embeddings": hf.get("tie_word_embeddings", False), **hf["text_config"]}
        raw_type = str(hf.get("model_type", ""))
        model_type = _MODEL_TYPE_ALIASES.get(raw_type, raw_type)
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise UnsupportedArchitectureError(
                f"model_type {raw_type!r} is not supported; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
            )
        rope = dict(hf.get("rope_parameters") or {})
        legacy_scaling = hf.get("rope_scaling") or {}
        rope_type = rope.get("rope_type") or legacy_scaling.get("rope_type") or legacy_scaling.get("type")
        rope_type = rope_type or "default"
        if rope_type not in ("default", "llama3"):
            raise UnsupportedArchitectureError(f"rope type {rope_type!r} is not supported (default, llama3)")
        scaling = None
        if rope_type == "llama3":
            scaling = {**legacy_scaling, **rope}
        eos = hf.get("eos_token_id")
        eos_ids = [] if eos is None else ([int(eos)] if isinstance(eos, int) else [int(e) for e in eos])
        layers = int(hf["num_hidden_layers"])
        layer_types = list(hf.get("layer_types") or [])
        if model_type == "qwen3_5" and not layer_types:
            interval = int(hf.get("full_attention_interval", 4))
            layer_types = [
                "full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)
            ]
        if model_type == "qwen3" and not layer_types and hf.get("use_sliding_window"):
            window_layers = int(hf.get("max_window_layers", layers))
            layer_types = [
                "sliding_attention" if i >= window_layers else "full_attention" for i in range(layers)
            ]
        heads = int(hf["num_attention_heads"])
        try:
            return cls(
                model_type=model_type,
                vocab_size=int(hf["vocab_size"]),
                hidden_size=int(hf["hidden_size"]),
                intermediate_size=int(hf["intermediate_size"]),
                num_hidden_layers=layers,
                num_attention_heads=heads,
                num_key_value_heads=int(hf.get("num_key_value_heads") or heads),
                head_dim=int(hf.get("head_dim") or 0),
                rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
                rope_theta=float(rope.get("rope_theta", hf.get("rope_theta", 10000.0))),
                partial_rotary_factor=float(
                    rope.get(
                        "partial_rotary_factor",
                        hf.get("partial_rotary_factor", 0.25 if model_type == "qwen3_5" else 1.0),
                    )
                ),
                rope_scaling=scaling,
                max_position_embeddings=int(hf.get("max_position_embeddings", 4096)),
                tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
                attention_bias=bool(hf.get("attention_bias", False)),
                mlp_bias=bool(hf.get("mlp_bias", False)),
                qk_norm=model_type in ("qwen3", "qwen3_5"),
                attn_output_gate=model_type == "qwen3_5" and bool(hf.get("attn_output_gate", True)),
                norm_offset=model_type == "qwen3_5",
                sliding_window=hf.get("sliding_window"),
                layer_types=layer_types,
                linear_num_key_heads=int(hf.get("linear_num_key_heads", 0) or 0),
                linear_num_value_heads=int(hf.get("linear_num_value_heads", 0) or 0),
                linear_key_head_dim=int(hf.get("linear_key_head_dim", 0) or 0),
                linear_value_head_dim=int(hf.get("linear_value_head_dim", 0) or 0),
                linear_conv_kernel_dim=int(hf.get("linear_conv_kernel_dim", 4) or 4),
                bos_token_id=hf.get("bos_token_id"),
                eos_token_id=eos_ids,
            )
        except KeyError as missing:
            raise CheckpointError(f"config is missing the required field {missing}") from None


def load_config(path: str | Path) -> ModelConfig:
    """Read `config.json` (a file or the directory holding it) into a ModelConfig."""
    from weaver.models.checkpoint import read_config_json

    return ModelConfig.from_hf(read_config_json(path, "model"))
