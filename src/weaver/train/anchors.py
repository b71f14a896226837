"""The drafter at many anchors of one sequence in one pass: how both trainers see what a decoding round sees.

A round drafts from a root at position a with the context of positions < a (`DFlashDrafter.draft` after
`append_context`). Training puts N such blocks side by side: the context K/V of the whole sequence is computed
once, the N blocks' rows follow it in one key buffer, and a mask lets block n's queries see context positions
< a_n and their own block only (bidirectional inside it, or causal / windowed as each layer says). Each block
runs through the drafter's own layers (`DrafterLayer.forward`), so training and decoding share one forward;
`draft_at_anchors` equals `draft` at each anchor (tests/train/test_anchors.py).
"""

from __future__ import annotations

import torch

from weaver.models.rope import rope_cos_sin
from weaver.speculative.drafter import DFlashDrafter

__all__ = ["anchor_block_mask", "anchored_batch", "draft_at_anchors", "sample_anchors", "target_features"]


def sample_anchors(lengths: torch.Tensor, prompt_lens: torch.Tensor, n: int, gen: torch.Generator) -> torch.Tensor:
    """[B, N] anchor positions, uniform over each row's reply [prompt_len, length - 2] (with replacement):
    the root is a token the target wrote and at least one later token exists to predict."""
    lo = prompt_lens.clamp(min=1)
    span = (lengths - 1 - lo).clamp(min=1)
    u = torch.rand(lengths.shape[0], n, generator=gen)
    return (lo[:, None] + (u * span[:, None]).long().clamp(max=span[:, None] - 1)).long()


def anchored_batch(store, step: int, micro: int, rank: int, world: int, batch_size: int, grad_accum: int,
                   anchors: int, seed: int):
    """A trainer's batch: the store's sequences for (step, micro, rank) and their anchors [B, N], both a pure
    function of the arguments (what resume and DDP rely on)."""
    b = store.batch(step, micro, rank, world, batch_size, grad_accum)
    gen = torch.Generator().manual_seed(((seed * 1_000_003 + step) * 64 + micro) * 4096 + rank)
    return b, sample_anchors(b.lengths, b.prompt_lens, anchors, gen)


def anchor_block_mask(anchors: torch.Tensor, context_len: int, block_size: int, causal: bool,
                      window: int | None) -> torch.Tensor:
    """[B, 1, N Bk, T + N Bk] bool: which keys block n's query r (position a_n + r) sees."""
    b, n = anchors.shape
    dev = anchors.device
    r = torch.arange(block_size, device=dev)
    pos = (anchors[:, :, None] + r).reshape(b, n * block_size, 1)  # query positions [B, Q, 1]
    ctx = torch.arange(context_len, device=dev)[None, None, :]
    anchor_q = anchors.repeat_interleave(block_size, dim=1)[:, :, None]  # [B, Q, 1]
    see_ctx = ctx < anchor_q
    if window is not None:
        see_ctx = see_ctx & (pos - ctx < window)
    block_q = torch.arange(n, device=dev).repeat_interleave(block_size)  # [Q]
    same = block_q[:, None] == block_q[None, :]  # [Q, Q]
    kr = r.repeat(n)  # key row inside its block
    qr = kr
    see_blk = same[None].expand(b, -1, -1)
    if causal:
        see_blk = see_blk & (kr[None, None, :] <= qr[None, :, None])
    if window is not None:
        d = qr[None, :, None] - kr[None, None, :]
        see_blk = see_blk & (d < window) & (causal | (-d < window))
    return torch.cat([see_ctx, see_blk], dim=2)[:, None]


def draft_at_anchors(drafter: DFlashDrafter, features: torch.Tensor, tokens: torch.Tensor, anchors: torch.Tensor,
                     embed_tokens: torch.nn.Embedding) -> torch.Tensor:
    """Final-normed drafter hidden [B, N, Bk-1, H] of the blocks rooted at tokens[anchors] (differentiable).

    features [B, T, n*H]: the target's captured layers over the sequence; tokens [B, T]; anchors [B, N]."""
    cfg = drafter.config
    bk = cfg.block_size
    b, t = tokens.shape
    n = anchors.shape[1]
    c = drafter.fuse_features(features)  # [B, T, H]
    ctx_pos = torch.arange(t, device=tokens.device).expand(b, t)
    kc, vc = drafter.context_key_value(c, rope_cos_sin(ctx_pos, drafter.rope_inv_freq, c.dtype))  # [B, L, Hkv, T, D]
    roots = tokens.gather(1, anchors).reshape(-1)  # [B N]
    x = drafter.block_embeddings(roots, embed_tokens).reshape(b, n * bk, -1)  # [B, N Bk, H]
    positions = (anchors[:, :, None] + torch.arange(bk, device=tokens.device)).reshape(b, n * bk)
    rope = rope_cos_sin(positions, drafter.rope_inv_freq, x.dtype)
    slots = (t + torch.arange(n * bk, device=tokens.device)).expand(b, -1)
    masks: dict[tuple[bool, int | None], torch.Tensor] = {}
    for i, layer in enumerate(drafter.layers):
        kind = (cfg.layer_causal(i), cfg.layer_window(i))
        if kind not in masks:
            masks[kind] = anchor_block_mask(anchors, t, bk, *kind)
        pad = kc.new_zeros(b, kc.shape[2], n * bk, kc.shape[4])
        k_buf, v_buf = torch.cat([kc[:, i], pad], dim=2), torch.cat([vc[:, i], pad], dim=2)  # fresh: autograd-safe
        x = layer(x, k_buf, v_buf, slots, masks[kind], rope)
    return drafter.norm(x.view(b, n, bk, -1)[:, :, 1:])


@torch.no_grad()
def target_features(target, tokens: torch.Tensor, layer_ids: list[int], select: torch.Tensor | None = None):
    """One frozen target forward over right-padded sequences: (captured features [B, T, n*H], final-normed
    hidden and float32 logits at `select` positions [B, K] (all positions when None))."""
    cache = target.allocate_cache(tokens.shape[0], tokens.shape[1])
    out = target(tokens, cache, select=select, capture_layers=tuple(layer_ids))
    return out.captured, out.hidden, out.logits
