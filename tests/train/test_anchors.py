"""The trainers' many-anchor drafter pass equals the decoding round's drafter (`append_context` + `draft`) at
every anchor, for full, causal-windowed and two-sided-windowed layers; the anchor sampler stays in the reply."""

from __future__ import annotations

import pytest
import torch
from helpers.drafters import make_drafter, random_features, target_io

from weaver.train.anchors import draft_at_anchors, sample_anchors


@pytest.mark.parametrize("overrides", [
    {},
    {"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 3},
    {"layer_types": ["sliding_attention", "sliding_attention"], "sliding_window": 4, "is_causal": False},
    {"mask_token_id": 7},
], ids=["full", "causal-window", "two-sided-window", "mask-token"])
@torch.no_grad()
def test_draft_at_anchors_equals_draft_after_the_context(overrides) -> None:
    drafter = make_drafter(seed=3, **overrides)
    embed, head = target_io()
    b, t = 2, 13
    tokens = torch.randint(0, embed.num_embeddings, (b, t), generator=torch.Generator().manual_seed(4))
    features = random_features(drafter, b, t)
    anchors = torch.tensor([[1, 5, 9, 12], [2, 2, 7, 11]])
    got = draft_at_anchors(drafter, features, tokens, anchors, embed)  # [B, N, Bk-1, H]
    for row in range(b):
        for n, a in enumerate(anchors[row].tolist()):
            ctx = drafter.new_context(1, t)
            drafter.append_context(ctx, features[row : row + 1, :a])
            want = drafter.draft(ctx, tokens[row : row + 1, a], embed, head).hidden[0]
            torch.testing.assert_close(got[row, n], want, atol=2e-5, rtol=2e-5)


def test_draft_at_anchors_is_differentiable() -> None:
    drafter = make_drafter(seed=5).train()
    embed, _ = target_io()
    tokens = torch.randint(0, embed.num_embeddings, (1, 9))
    out = draft_at_anchors(drafter, random_features(drafter, 1, 9), tokens, torch.tensor([[2, 6]]), embed)
    out.square().sum().backward()
    assert drafter.fc.weight.grad.abs().sum() > 0 and drafter.mask_embedding.grad.abs().sum() > 0
    assert all(p.grad is not None for p in drafter.layers[0].parameters())


def test_anchors_lie_in_the_reply_with_a_token_after_them() -> None:
    lengths, prompts = torch.tensor([20, 9, 40]), torch.tensor([5, 7, 1])
    a = sample_anchors(lengths, prompts, 500, torch.Generator().manual_seed(0))
    assert a.shape == (3, 500)
    assert (a >= prompts[:, None].clamp(min=1)).all() and (a <= lengths[:, None] - 2).all()
    assert a[0].unique().numel() == 20 - 1 - 5  # every position of the reply gets drawn
