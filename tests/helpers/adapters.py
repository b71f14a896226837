"""A tiny random Weaver adapter and its round inputs, for the adapter, builder and frontier tests."""

from __future__ import annotations

import torch

from weaver.models.config import ModelConfig
from weaver.options import RuntimeOptions
from weaver.speculative.weaver import RELEASED, WeaverAdapter

HT = 24  # target hidden
TORCH = RuntimeOptions(kernels="torch")  # the torch references everywhere
TRITON = RuntimeOptions(kernels="triton")  # the Triton kernels, under the interpreter on CPU tensors


def make_adapter(vocab: int = 11, *, max_depth: int = 4, pool: int = 5, layers: int = 1, bias: bool = True, seed=0,
                 released: bool = False):  # fmt: skip
    """A random adapter of the older variant, or of the released one (RoPE, SwiGLU) with `released`."""
    target = ModelConfig(vocab_size=vocab, hidden_size=HT, intermediate_size=32, num_hidden_layers=1)
    return WeaverAdapter.random(
        target,
        d_rank=16,
        num_heads=2,
        mlp_dim=20,
        max_depth=max_depth,
        pool_size=pool,
        seed=seed,
        norm_bias=bias,
        num_layers=layers,
        **(RELEASED if released else {}),
    )


def make_inputs(batch: int, depth: int, vocab: int, seed: int = 1) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "embed": torch.randn(vocab, HT, generator=gen),
        "lm_head": torch.randn(vocab, HT, generator=gen) * 0.3,
        "target_hidden": torch.randn(batch, HT, generator=gen) * 3.0,
        "draft_hidden": torch.randn(batch, depth, HT, generator=gen) * 3.0,
        "marginals": torch.randn(batch, depth, vocab, generator=gen) * 2.0,
        "root": torch.randint(0, vocab, (batch,), generator=gen),
    }


def bound(adapter: WeaverAdapter, inp: dict[str, torch.Tensor], options: RuntimeOptions = TORCH) -> WeaverAdapter:
    """The adapter bound to the inputs' embedding and LM head, running with `options`."""
    adapter.bind(inp["embed"], inp["lm_head"], options=options)
    return adapter

