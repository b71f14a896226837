"""Per-forward inputs shared by every layer: positions, cache slots, attention masks, tree structure.

Built once per forward (not per layer), from device tensors only, so the whole forward is capturable.
A chain (prefill / decode) is the special case of a tree with parents = [-1, 0, 1, ...]; the only
difference is that a chain commits as it goes (GDN states and lengths advance) while a tree verify
leaves the committed state alone until `commit`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from weaver.ops.tree import ancestor_mask
from weaver.options import DEFAULT_OPTIONS, RuntimeOptions


@dataclass
class StepInputs:
    positions: torch.Tensor  # [B, T] RoPE positions (committed length + depth)
    slots: torch.Tensor  # [B, T] cache slots written (committed length + node index)
    attn_mask: torch.Tensor  # [B, 1, T, S] bool: committed prefix + ancestors-or-self
    window_mask: torch.Tensor | None  # [B, 1, T, S] bool for sliding-window layers, else None
    parents: torch.Tensor | None  # [B, T] for a tree verify, None for a chain
    lengths: torch.Tensor  # [B] committed tokens per row before this forward
    ancestors: torch.Tensor  # [B, T, T] bool ancestor-or-self mask (a chain: the lower triangle)
    # which GDN / conv paths the layers take. No default: dynamo on torch 2.11 wraps a dataclass's defaults when
    # it traces the constructor, and an object default (DEFAULT_OPTIONS) broke every compiled hybrid forward
    # there (tests/speculative/test_graph_breaks.py on the H200), even with every field passed
    options: RuntimeOptions
    tree_structure: object | None = None  # kernel-side tree structure, built once per verify
    gdn_scratch: object | None = None  # models.cache.GDNTreeScratch: where a verify's GDN layers leave commit inputs

    @property
    def is_tree(self) -> bool:
        return self.parents is not None


def build_step(
    lengths: torch.Tensor,
    num_tokens: int,
    capacity: int,
    parents: torch.Tensor | None = None,
    depth: torch.Tensor | None = None,
    sliding_window: int | None = None,
    ancestors: torch.Tensor | None = None,
    options: RuntimeOptions = DEFAULT_OPTIONS,
) -> StepInputs:
    """Inputs for a forward over `num_tokens` new tokens per row after `lengths` committed ones.

    ancestors: the tree's [B, T, T] ancestor-or-self mask when the caller has it (else computed here).
    options: the GDN / conv paths of the forward. Every field is passed to StepInputs explicitly: under
    torch.compile a dataclass default that is an object (DEFAULT_OPTIONS) breaks the graph (dynamo cannot
    wrap it), which split every compiled forward into four graphs with eager code between them; StepInputs
    has no such default left (torch 2.11 wraps the defaults even when every field is passed).
    """
    device = lengths.device
    batch = lengths.shape[0]
    node = torch.arange(num_tokens, device=device)
    slots = lengths[:, None] + node[None, :]  # [B, T]
    if parents is None:
        positions = slots
        anc = torch.ones(num_tokens, num_tokens, dtype=torch.bool, device=device).tril()
        anc = anc.expand(batch, num_tokens, num_tokens)
    else:
        positions = lengths[:, None] + depth
        anc = ancestor_mask(parents) if ancestors is None else ancestors  # [B, T, T] ancestor-or-self
    slot_ids = torch.arange(capacity, device=device)
    committed = slot_ids[None, None, :] < lengths[:, None, None]  # [B, 1, S]
    new = torch.zeros(batch, num_tokens, capacity, dtype=torch.bool, device=device)
    new.scatter_(2, slots[:, None, :].expand(batch, num_tokens, num_tokens), anc)
    attn_mask = (committed | new)[:, None]  # [B, 1, T, S]
    window_mask = None
    if sliding_window is not None:
        slot_pos = slot_ids[None, :].expand(batch, capacity).clone()
        slot_pos.scatter_(1, slots, positions)
        too_old = positions[:, :, None] - slot_pos[:, None, :] >= sliding_window  # [B, T, S]
        window_mask = attn_mask & ~too_old[:, None]
    return StepInputs(
        positions=positions, slots=slots, attn_mask=attn_mask, window_mask=window_mask, parents=parents,
        lengths=lengths, ancestors=anc, tree_structure=None, gdn_scratch=None, options=options,
    )
