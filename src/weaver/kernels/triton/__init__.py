"""Triton kernels for tree verification of GDN layers, with the signatures of the torch references.

    from weaver.kernels import triton as wt
    tree = wt.build_tree_structure(parents)              # once per verify, shared by every layer
    y = wt.tree_conv1d(x, conv_w, tree, conv_state)      # each GDN layer
    o, aux = wt.gdn_tree(q, k, v, g, beta, tree, initial_state=h0)
    h_new = wt.gdn_tree_commit(aux, path, h0)            # after acceptance
    conv_new = wt.conv_state_commit(x, path, conv_state)
    wt.gdn_tree_commit_stacked(k, delta, G, path, states)  # or every layer at once, in place ([L, ...] stacks)
    wt.conv_state_commit_stacked(xs, path, convs)

Each function matches `weaver.ops.gdn` / `weaver.ops.conv` (a raw parents tensor works in place of the
TreeStructure). Every kernel has a fixed launch configuration, so under `TRITON_INTERPRET=1` (set by the test
suite before triton loads) the CPU tests run them on CPU tensors.
"""

from __future__ import annotations

import importlib.util

import torch

__all__ = [
    "GDNTreeConfig",
    "RawGates",
    "TreeStructure",
    "build_tree_structure",
    "conv_state_commit",
    "conv_state_commit_stacked",
    "decode_attention",
    "fused_gemv",
    "gdn_tree",
    "gdn_tree_commit",
    "gdn_tree_commit_stacked",
    "qkv_rope_kv",
    "tree_attention",
    "rope_table",
    "tree_attention_rope",
    "tree_conv1d",
    "tree_rope_kv_write",
    "triton_available",
]


def triton_available() -> bool:
    """True only when CUDA is present and triton imports (the kernels can run compiled)."""
    if not torch.cuda.is_available() or importlib.util.find_spec("triton") is None:
        return False
    try:
        import triton  # noqa: F401
    except Exception:
        return False
    return True


if importlib.util.find_spec("triton") is not None:
    from weaver.kernels.triton.conv import conv_state_commit, conv_state_commit_stacked, tree_conv1d
    from weaver.kernels.triton.decode import decode_attention, fused_gemv
    from weaver.kernels.triton.gdn_commit import gdn_tree_commit, gdn_tree_commit_stacked
    from weaver.kernels.triton.gdn_tree import GDNTreeConfig, RawGates, gdn_tree
    from weaver.kernels.triton.qkv_rope import qkv_rope_kv
    from weaver.kernels.triton.structure import TreeStructure, build_tree_structure
    from weaver.kernels.triton.tree_attention import rope_table, tree_attention, tree_attention_rope, tree_rope_kv_write
else:  # keep the names importable; calling them explains what is missing

    def _missing(*_args, **_kwargs):
        raise RuntimeError("weaver.kernels.triton needs the `triton` package (pip install triton)")

    conv_state_commit = tree_conv1d = gdn_tree_commit = gdn_tree = build_tree_structure = qkv_rope_kv = _missing
    conv_state_commit_stacked = gdn_tree_commit_stacked = _missing
    decode_attention = fused_gemv = tree_attention = tree_attention_rope = tree_rope_kv_write = rope_table = _missing
    GDNTreeConfig = RawGates = TreeStructure = None
