"""Picks the implementation of each GDN / conv op for a device: one module owns the choice.

CPU: the torch references of `weaver.ops`. CUDA: our Triton tree kernels (`weaver.kernels.triton`) when
they import, and fla's chunk kernel for chain prefill when fla is installed. `WEAVER_BACKEND=torch`
forces the references everywhere (used by tests that compare the two paths).
"""

from __future__ import annotations

import functools
import os

import torch

from weaver.ops import conv as conv_ref
from weaver.ops import gdn as gdn_ref


@functools.lru_cache(maxsize=1)
def _triton_ops():
    if os.environ.get("WEAVER_BACKEND", "") == "torch":
        return None
    try:
        from weaver.kernels import triton as tri

        return tri if tri.triton_available() else None
    except Exception:  # noqa: BLE001 - any import problem means: use the reference
        return None


@functools.lru_cache(maxsize=1)
def _fla_chunk():
    if os.environ.get("WEAVER_BACKEND", "") == "torch":
        return None
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule

        return chunk_gated_delta_rule
    except Exception:  # noqa: BLE001
        return None


def _tree_ops(device: torch.device):
    tri = _triton_ops() if device.type == "cuda" else None
    return tri


def gdn_chain(q, k, v, g, beta, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the delta rule over a chain from `state`; returns (o, final state). Inputs are pre-l2norm."""
    t = q.shape[1]
    if q.device.type == "cuda" and t > 1 and _fla_chunk() is not None:
        o, h = _fla_chunk()(
            q, k, v, g=g, beta=beta, initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=True
        )
        return o, h.float()
    if t == 1:
        return gdn_ref.gdn_recurrent(q, k, v, g, beta, initial_state=state, use_qk_l2norm=True)
    return gdn_ref.gdn_chunk(q, k, v, g, beta, initial_state=state, use_qk_l2norm=True)


def gdn_tree(q, k, v, g, beta, parents, state: torch.Tensor, structure=None):
    """Tree verify from the committed `state` (read only); returns (o, aux for the commit)."""
    tri = _tree_ops(q.device)
    if tri is not None:
        return tri.gdn_tree(
            q, k, v, g, beta, structure if structure is not None else parents,
            initial_state=state, use_qk_l2norm=True,
        )
    return gdn_ref.gdn_tree(q, k, v, g, beta, parents, initial_state=state, use_qk_l2norm=True)


def gdn_tree_commit(aux, path: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    tri = _tree_ops(state.device)
    if tri is not None:
        return tri.gdn_tree_commit(aux, path, state)
    return gdn_ref.gdn_tree_commit(aux, path, state)


def causal_conv1d(x, weight, state):
    return conv_ref.causal_conv1d(x, weight, state, activation="silu")


def tree_conv1d(x, weight, parents, state, structure=None):
    tri = _tree_ops(x.device)
    if tri is not None:
        return tri.tree_conv1d(x, weight, structure if structure is not None else parents, state)
    return conv_ref.tree_conv1d(x, weight, parents, state, activation="silu")


def conv_state_commit(x, path, state):
    tri = _tree_ops(x.device)
    if tri is not None:
        return tri.conv_state_commit(x, path, state)
    return conv_ref.conv_state_commit(x, path, state)


def build_tree_structure(parents: torch.Tensor):
    """Kernel-side tree structure built once per verify and shared by every GDN layer (None on CPU)."""
    tri = _tree_ops(parents.device)
    return tri.build_tree_structure(parents) if tri is not None else None
