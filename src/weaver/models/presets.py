"""Named HF-style configs for random-weight models: tiny ones for tests, real shapes for timing."""

from __future__ import annotations

import copy
from typing import Any

from weaver.errors import UnknownModelError

_TINY_COMMON: dict[str, Any] = {
    "vocab_size": 97,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "eos_token_id": 2,
    "bos_token_id": 1,
}

PRESETS: dict[str, dict[str, Any]] = {
    "tiny-llama": {**_TINY_COMMON, "model_type": "llama", "rope_theta": 10000.0},
    "tiny-qwen3": {**_TINY_COMMON, "model_type": "qwen3", "head_dim": 16, "rope_theta": 1000000.0},
    "tiny-qwen3_5": {
        **_TINY_COMMON,
        "model_type": "qwen3_5_text",
        "head_dim": 16,
        "full_attention_interval": 2,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 6,  # HV = 3 H, the Qwen3.6-27B ratio
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "linear_conv_kernel_dim": 4,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
    },
    # SmolLM2-135M-Instruct shapes (the default model; timing without its GGUF: same kernels, same bytes).
    "smollm2-shape": {
        "model_type": "llama",
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "head_dim": 64,
        "vocab_size": 49152,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 100000.0,
        "tie_word_embeddings": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
    },
    # Qwen3-8B shapes (attention-only, 436 MB a layer in bf16): where the fused decode / verify give way to
    # cuBLAS (models.fused_layer.FUSED_MAX_LAYER_BYTES), for timing that regime.
    "qwen3-8b-shape": {
        "model_type": "qwen3",
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": False,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
    },
    # Qwen3.6-27B text decoder shapes (../shared/reference/qwen3.6-27b-text-config.json), for timing.
    "qwen3.6-27b-shape": {
        "model_type": "qwen3_5_text",
        "hidden_size": 5120,
        "intermediate_size": 17408,
        "num_hidden_layers": 64,
        "full_attention_interval": 4,
        "num_attention_heads": 24,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "attn_output_gate": True,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 48,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "vocab_size": 248320,
        "max_position_embeddings": 262144,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25},
    },
}


def preset_config(name: str, **overrides: Any) -> dict[str, Any]:
    """A copy of a named preset's HF config dict, with overrides applied."""
    if name not in PRESETS:
        raise UnknownModelError(f"unknown preset {name!r}; known presets: {', '.join(sorted(PRESETS))}")
    return {**copy.deepcopy(PRESETS[name]), **overrides}
