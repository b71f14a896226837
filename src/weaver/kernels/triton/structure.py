"""Tree structure shared by every layer of one verify: ancestor mask and depth, built once on the device.

`build_tree_structure(parents)` runs one small kernel per verify; the model passes the result to every
GDN layer and tree conv (`parents=` of the Triton `gdn_tree` / `tree_conv1d` takes it as well as a raw
parents tensor). Nothing here reads data on the host, so it can sit inside a CUDA graph.

Algorithm: pointer jumping on ancestor bitsets held in registers (tl.gather). With up[i] the 2^r-th
ancestor of i, `bits[i] |= bits[up[i]]; depth[i] += depth[up[i]]; up[i] = up[up[i]]` doubles the
covered distance each round, so ceil(log2 T) rounds cover any tree. Each program (grid: row blocks x
batch rows) redoes the few rounds and expands its BR rows of bitsets into the dense int8
ancestor-or-self mask that the GDN kernels read tile by tile (16-byte loads).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from weaver.kernels.triton._utils import check_device, next_pow2, pdl_launch, pdl_wait

__all__ = ["TreeStructure", "build_tree_structure", "as_structure"]


class TreeStructure(NamedTuple):
    """Layer-invariant description of a batch of draft trees (DESIGN §1), built once per verify."""

    parents: torch.Tensor  # [B, T] int32; -1 for roots and isolated pad nodes
    anc: torch.Tensor  # [B, T, T] int8; anc[b, i, j] = 1 iff j is on the path root..i (diagonal included)
    depth: torch.Tensor  # [B, T] int32; 0 for roots and pad nodes


@triton.jit
def tree_structure_kernel(parents, anc, depth, T, BT: tl.constexpr, BW: tl.constexpr, BR: tl.constexpr,
                          NJ: tl.constexpr, PDL: tl.constexpr = False):  # fmt: skip
    if PDL:  # programmatic dependent launch: nothing is read before the wait
        pdl_wait()
    i_r, i_b = tl.program_id(0), tl.program_id(1).to(tl.int64)
    o_t = tl.arange(0, BT)
    o_w = tl.arange(0, BW)
    m_t = o_t < T
    b_p = tl.load(parents + i_b * T + o_t, mask=m_t, other=-1).to(tl.int32)
    b_p = tl.where(b_p < o_t, b_p, -1)  # parents[i] < i; anything else is treated as a root
    # ancestor-or-self bitsets (bit j % 32 of word j // 32), distance to `up`, and the jump pointer
    b_bits = tl.where(o_w[None, :] == (o_t // 32)[:, None], (1 << (o_t % 32))[:, None], 0).to(tl.int32)
    b_d = tl.where(b_p >= 0, 1, 0).to(tl.int32)
    b_up = b_p
    for _ in tl.static_range(NJ):  # pointer jumping in registers: each round doubles the distance
        m_up = b_up >= 0
        i_up = tl.maximum(b_up, 0)
        b_bits = b_bits | tl.where(m_up[:, None], tl.gather(b_bits, tl.broadcast_to(i_up[:, None], (BT, BW)), 0), 0)
        b_d = b_d + tl.where(m_up, tl.gather(b_d, i_up, 0), 0)
        b_up = tl.where(m_up, tl.gather(b_up, i_up, 0), -1)
    # this program's BR rows of the dense mask
    o_r = i_r * BR + tl.arange(0, BR)
    m_r = o_r < T
    i_r_c = tl.minimum(o_r, BT - 1)
    b_rows = tl.gather(b_bits, tl.broadcast_to(i_r_c[:, None], (BR, BW)), 0)  # [BR, BW]
    b_word = tl.zeros([BR, BT], dtype=tl.int32)  # word (col // 32) of each row, per column
    for i_w in tl.static_range(BW):  # (an axis-1 tl.gather here trips a triton 3.6 assertion for some shapes)
        b_col = tl.sum(tl.where(o_w[None, :] == i_w, b_rows, 0), 1)
        b_word = tl.where((o_t // 32)[None, :] == i_w, b_col[:, None], b_word)
    b_m = ((b_word >> (o_t % 32)[None, :]) & 1).to(tl.int8)
    tl.store(anc + i_b * T * T + o_r[:, None] * T + o_t[None, :], b_m, mask=m_r[:, None] & m_t[None, :])
    tl.store(depth + i_b * T + o_r, tl.gather(b_d, i_r_c, 0), mask=m_r)


def build_tree_structure(parents: torch.Tensor) -> TreeStructure:
    """Ancestor-or-self mask and depths of a batch of trees, for every layer of one verify.

    Args:
        parents: integer tensor [B, T]; parents[:, 0] = -1, parents[b, i] < i for real nodes, and a node
            i > 0 with parent -1 is an isolated pad node (its own root, nobody's ancestor). Not validated
            here (no host sync); see weaver.ops.tree.validate_parents.
    Returns:
        TreeStructure(parents int32 [B, T], anc int8 [B, T, T], depth int32 [B, T]).
    """
    if parents.dim() != 2 or parents.shape[1] < 1:
        raise ValueError(f"parents must be [B, T] with T >= 1, got shape {tuple(parents.shape)}")
    if parents.dtype.is_floating_point or parents.dtype == torch.bool:
        raise ValueError(f"parents must be an integer tensor, got {parents.dtype}")
    check_device(parents)
    B, T = parents.shape
    p32 = parents.to(torch.int32).contiguous()
    BT = next_pow2(T, 64)  # >= 2 bitset words (degenerate [BT, 1] gathers: see the kernel)
    anc = torch.empty(B, T, T, dtype=torch.int8, device=parents.device)
    depth = torch.empty(B, T, dtype=torch.int32, device=parents.device)
    BR = 32 if BT <= 128 else 16
    tree_structure_kernel[(triton.cdiv(T, BR), B)](
        p32, anc, depth, T, BT=BT, BW=BT // 32, BR=BR, NJ=max(0, (T - 1).bit_length()), num_warps=4,
        **pdl_launch(p32.device),
    )
    return TreeStructure(parents=p32, anc=anc, depth=depth)


def as_structure(parents: torch.Tensor | TreeStructure) -> TreeStructure:
    """Accept either a parents tensor or a prebuilt TreeStructure."""
    if isinstance(parents, TreeStructure):
        return parents
    return build_tree_structure(parents)
