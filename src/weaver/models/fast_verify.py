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
        parents: torch.Tensor | None = None,  # [B, T]: -1 for the root and pad nodes; None: a chain (prefill)
        depth: torch.Tensor | None = None,  # [B, T]; None: node_depth(parents)
        capture_layers: tuple[int, ...] = (),
        ancestors: torch.Tensor | None = None,  # [B, T, T] ancestor-or-self mask; None: built here
        select: torch.Tensor | None = None,  # [B, K] rows whose logits / hidden are wanted; None: every row
    ) -> ForwardOutput:
        """Verify one batch of trees: logits [B, T, V] fp32 (or [B, K, V] of `select`), final-norm hidden,
        captured layer outputs ([B, T, layers * hidden]).

        Without `parents` the T tokens are a chain after the committed prefix, as `Decoder.forward` takes a
        prompt: the engine's prefill on CUDA (~160 launches in one captured graph per prompt bucket against
        ~1,000 small torch kernels, ~3.7 ms on the H200 for SmolLM2, rounds/h200_v29_prefill)."""
        m = self.model
        b, t = tokens.shape
        if parents is None:
            node = torch.arange(t, device=tokens.device)
            parents, depth = (node - 1).expand(b, t), node.expand(b, t)
            ancestors = torch.ones(t, t, dtype=torch.bool, device=tokens.device).tril().expand(b, t, t)
        if parents.shape != (b, t):
            raise ValueError(f"parents must be [{b}, {t}] like tokens, got {tuple(parents.shape)}")
        depth = node_depth(parents) if depth is None else depth
        anc = ancestor_mask(parents) if ancestors is None else ancestors  # [B, T, T], shared by every layer
        x = m.model.embed_tokens(tokens.reshape(b * t))  # [B T, hidden]: one row per node
        weights = self.weights()
        rows = self.tree_rows(cache.lengths, depth, m.rope_inv_freq, [anc] * len(weights), x.dtype)
        x, captured = self.run_layers(x, weights, [(c.k, c.v) for c in cache.layers], rows, capture_layers)
        if select is not None:  # only those rows through the final norm and the LM head
            x = x.view(b, t, -1).gather(1, select[:, :, None].expand(-1, -1, x.shape[-1])).reshape(-1, x.shape[-1])
        logits, hidden = self.head(x, m.model.norm.weight, m.lm_head.weight, rows)
        cap = torch.cat([c.view(b, t, -1) for c in captured], dim=-1) if captured else None
        return ForwardOutput(logits=logits.view(b, -1, logits.shape[-1]), hidden=hidden.view(b, -1, hidden.shape[-1]),
                             captured=cap)  # fmt: skip
