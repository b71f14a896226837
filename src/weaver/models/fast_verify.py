"""Tree verify of attention-only models: `FusedLayers.layer` over the B T tree nodes as rows.

`Decoder.forward(tokens, cache, parents=..., depth=...)` is the reference; this is the same pass with the
nodes as the rows of small GEMMs. Node j of batch row b sits at position lengths[b] + depth[b, j], writes its
K/V at slot lengths[b] + j and sees the committed prefix and its ancestors-or-self (one mask for every
layer). Per layer: (input norm + qkv), (tree attention with RoPE + K/V write inside it, for trees of at most
ROPE_ATTENTION_MAX_NODES nodes), (o + residual), (post norm + gate/up + SiLU*up), (down + residual); a larger
tree moves the RoPE + K/V write into the qkv launch instead (`fused_layer` says when and why). Then one
launch for the final norm + LM head, which also hands out the normed hidden rows. Like the reference it
writes only the tree's slots and leaves `cache.lengths` alone; `Decoder.commit` keeps the accepted path.
"""

from __future__ import annotations

import torch

from weaver.models.cache import ModelCache
from weaver.models.decoder import ForwardOutput
from weaver.models.fast_decode import TargetLayers
from weaver.ops.tree import ancestor_mask, node_depth


class FastVerifier(TargetLayers):
    """Callable `(tokens [B, T], cache, parents, depth, capture_layers) -> ForwardOutput`, as `Decoder.forward`."""

    what = "fast verify"

    def __call__(
        self,
        tokens: torch.Tensor,  # [B, T]
        cache: ModelCache,
        parents: torch.Tensor,  # [B, T]: -1 for the root and pad nodes
        depth: torch.Tensor | None = None,  # [B, T]; None: node_depth(parents)
        capture_layers: tuple[int, ...] = (),
        ancestors: torch.Tensor | None = None,  # [B, T, T] ancestor-or-self mask; None: built here
    ) -> ForwardOutput:
        """Verify one batch of trees: logits [B, T, V] fp32, final-norm hidden, captured layer outputs."""
        m = self.model
        b, t = tokens.shape
        if parents.shape != (b, t):
            raise ValueError(f"parents must be [{b}, {t}] like tokens, got {tuple(parents.shape)}")
        depth = node_depth(parents) if depth is None else depth
        anc = ancestor_mask(parents) if ancestors is None else ancestors  # [B, T, T], shared by every layer
        x = m.model.embed_tokens(tokens.reshape(b * t))  # [B T, hidden]: one row per node
        weights = self.weights()
        rows = self.tree_rows(cache.lengths, depth, m.rope_inv_freq, [anc] * len(weights), x.dtype)
        x, captured = self.run_layers(x, weights, [(c.k, c.v) for c in cache.layers], rows, capture_layers)
        logits, hidden = self.head(x, m.model.norm.weight, m.lm_head.weight, rows)
        cap = torch.cat([c.view(b, t, -1) for c in captured], dim=-1) if captured else None
        return ForwardOutput(logits=logits.view(b, t, -1), hidden=hidden.view(b, t, -1), captured=cap)
