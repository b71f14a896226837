"""Move each decoder layer's RMSNorm weights into the projections that read the normed row.

    fold_norms(model)   # after models.fuse.fuse_projections; in place, returns the model

W (g * x / rms(x)) = (W diag(g)) x / rms(x): with g in the weight, the norm of a one-row step is one scalar, which
weaver's GEMV takes from the row it loads anyway (`kernels.gemv`), so a decode step launches no norm kernel. The
norm keeps running (dividing by rms(x) only) wherever its projection does not take that GEMV. Only norms whose
projection takes the GEMV at one row are folded (large 16-bit weights: `gemv.takes_weight`); small models, fp32
models and the final norm (the drafter reads the LM head with it) keep their weights. The fold rounds W diag(g)
once to the weight's dtype, a change of the same order as rounding the normed row, which the unfolded model does;
every path of the model (decode, verify, prefill) reads the same folded weights, so its greedy outputs agree with
each other as before. The state dict holds the folded weights afterwards: save checkpoints before folding.
"""

from __future__ import annotations

import torch
from torch import nn

from weaver.kernels import gemv
from weaver.models.fuse import FusedLinear
from weaver.models.norm import RMSNorm

__all__ = ["fold_norm", "fold_norms"]


@torch.no_grad()
def fold_norm(norm: RMSNorm, fused: FusedLinear, min_bytes: int | None = None) -> bool:
    """Fold `norm`'s scale into the columns of `fused` (whose linears are views of it) if that projection takes the
    one-row GEMV (weights from `min_bytes`, default gemv.GEMV_MIN_BYTES); True when folded."""
    if norm.folded or fused.bias is not None or not gemv.takes_weight(fused.weight, min_bytes):
        return False
    scale = (1.0 + norm.weight.float()) if norm.offset else norm.weight.float()
    fused.weight.copy_((fused.weight.float() * scale[None, :]).to(fused.weight.dtype))
    norm.weight.fill_(0.0 if norm.offset else 1.0)
    norm.folded = True
    return True


def fold_norms(model: nn.Module) -> nn.Module:
    """Fold every decoder layer's input and post-attention norms where their projections take the GEMV."""
    from weaver.models.decoder import DecoderLayer

    for layer in model.modules():
        if isinstance(layer, DecoderLayer):
            mixer = layer.linear_attn if layer.kind == "linear_attention" else layer.self_attn
            if mixer.fused is not None:
                fold_norm(layer.input_layernorm, mixer.fused)
            if layer.mlp.fused is not None:
                fold_norm(layer.post_attention_layernorm, layer.mlp.fused)
    return model
