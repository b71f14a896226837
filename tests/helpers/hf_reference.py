"""Build a transformers model with the same random weights as ours, for parity tests."""

from __future__ import annotations

import torch

from weaver.models.config import ModelConfig
from weaver.models.loading import build_model


def build_hf_and_ours(hf_config: dict, seed: int = 0):
    """(hf_model, our_model) in fp32 with identical, fully random weights (norms perturbed too)."""
    import transformers

    kwargs = {k: v for k, v in hf_config.items() if k != "model_type"}
    cfg = transformers.AutoConfig.for_model(hf_config["model_type"], **kwargs)
    torch.manual_seed(seed)
    hf = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.log(torch.empty(p.shape).uniform_(1.0, 16.0, generator=gen)))
            elif name.endswith("dt_bias"):
                p.copy_(torch.empty(p.shape).uniform_(0.5, 1.5, generator=gen))
            elif p.ndim == 1:  # norm weights: away from their init so offset conventions are exercised
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
    ours = build_model(ModelConfig.from_hf(hf_config))
    state = {k: v for k, v in hf.state_dict().items()}
    missing, unexpected = ours.load_state_dict(state, strict=False)
    missing = [m for m in missing if not (m == "lm_head.weight" and ours.config.tie_word_embeddings)]
    assert not missing and not unexpected, (missing, unexpected)
    return hf, ours


@torch.no_grad()
def hf_logits(hf, tokens: list[int]) -> torch.Tensor:
    """Logits [T, V] of one full causal forward (no cache): the reference every path must match."""
    return hf(torch.tensor([tokens])).logits[0].float()
