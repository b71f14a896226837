"""A tiny random DFlash drafter with its target embedding / head, for the drafter tests."""

from __future__ import annotations

import torch
from torch import nn

from weaver.models.config import ModelConfig
from weaver.speculative.drafter import DFlashDrafter, DrafterConfig

VOCAB, HIDDEN = 61, 48
TARGET = ModelConfig(
    model_type="qwen3",
    vocab_size=VOCAB,
    hidden_size=HIDDEN,
    intermediate_size=80,
    num_hidden_layers=7,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    qk_norm=True,
)


def make_drafter(seed: int = 0, perturb_norms: bool = True, **overrides) -> DFlashDrafter:
    """A random drafter for TARGET; config fields in `overrides`; norms perturbed so they matter."""
    base = DFlashDrafter.random(TARGET, num_layers=2, num_target_features=3, block_size=5, seed=seed)
    cfg = DrafterConfig(**{**vars(base.config), **overrides})
    drafter = DFlashDrafter(cfg).init_random_weights(seed)
    if perturb_norms:
        gen = torch.Generator().manual_seed(seed + 100)
        with torch.no_grad():
            for name, p in drafter.named_parameters():
                if name.endswith("norm.weight"):
                    p.add_(0.3 * torch.randn(p.shape, generator=gen))
    return drafter.eval()


def target_io(seed: int = 1) -> tuple[nn.Embedding, nn.Linear]:
    gen = torch.Generator().manual_seed(seed)
    embed, head = nn.Embedding(VOCAB, HIDDEN), nn.Linear(HIDDEN, VOCAB, bias=False)
    with torch.no_grad():
        embed.weight.copy_(torch.randn(VOCAB, HIDDEN, generator=gen))
        head.weight.copy_(0.2 * torch.randn(VOCAB, HIDDEN, generator=gen))
    return embed, head


def random_features(drafter: DFlashDrafter, batch: int, length: int, seed: int = 2) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, length, drafter.config.num_target_features * HIDDEN, generator=gen)

