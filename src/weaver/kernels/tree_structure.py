"""A draft tree's ancestor-or-self mask on CUDA in one Triton launch (weaver.kernels.triton.structure).

    anc = tree_ancestor_mask(parents, options)   # = weaver.ops.tree.ancestor_mask(parents), bool [B, N, N]

The reference's pointer jumping is ~2 torch ops a round over log2(N) rounds; compiled for a round's build
stage that is ~10 small kernels, each a few microseconds of a latency-bound round. The GDN verify's structure
kernel already builds the same mask (int8) in registers in one launch; its bytes are 0 or 1, so the bool view
is the mask. Where `use_kernel(options, parents)` says no (CPU, kernels="torch"), the reference runs.
"""

from __future__ import annotations

import torch

from weaver.kernels.dispatch import launch, use_kernel
from weaver.ops.tree import ancestor_mask
from weaver.options import RuntimeOptions

__all__ = ["ancestor_mask_op", "tree_ancestor_mask"]


@torch.library.custom_op("weaver::ancestor_mask", mutates_args=())
def ancestor_mask_op(parents: torch.Tensor) -> torch.Tensor:
    """`ancestor_bool` as a custom op: one opaque kernel for a compiled stage."""
    return ancestor_bool(parents)


@ancestor_mask_op.register_fake
def _ancestor_mask_fake(parents: torch.Tensor) -> torch.Tensor:
    b, n = parents.shape
    return parents.new_empty(b, n, n, dtype=torch.bool)


def ancestor_bool(parents: torch.Tensor) -> torch.Tensor:
    """The structure kernel's int8 mask as bool (its bytes are 0 or 1)."""
    from weaver.kernels.triton.structure import build_tree_structure

    return build_tree_structure(parents).anc.view(torch.bool)


def tree_ancestor_mask(parents: torch.Tensor, options: RuntimeOptions) -> torch.Tensor:
    """Bool [B, N, N]: M[b, i, j] iff j is on the path root..i (pads: only themselves), for topological trees."""
    if parents.dim() == 2 and parents.shape[1] >= 1 and use_kernel(options, parents):
        return launch(ancestor_mask_op, "weaver.kernels.tree_structure", "ancestor_bool", parents)
    return ancestor_mask(parents)
