"""The fast path of each GDN / conv op, chosen per call from RuntimeOptions (one module owns the choice).

Torch references (`weaver.ops.gdn`, `weaver.ops.conv`) on CPU and with kernels="torch"; on CUDA our Triton
tree kernels (`weaver.kernels.triton`) when triton imports, and fla's chunk kernel for chain prefill when fla
is installed (kernels="triton" also runs the tree kernels on CPU tensors, under the interpreter).
"""

from __future__ import annotations

import functools

import torch

from weaver.kernels.dispatch import launch, use_kernel
from weaver.ops import conv as conv_ref
from weaver.ops import gdn as gdn_ref
from weaver.options import RuntimeOptions


@functools.lru_cache(maxsize=1)
def _triton_ops():
    try:
        from weaver.kernels import triton as tri

        return tri
    except Exception:  # noqa: BLE001 - any import problem means: use the reference
        return None


@functools.lru_cache(maxsize=1)
def _fla_chunk():
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule

        return chunk_gated_delta_rule
    except Exception:  # noqa: BLE001
        return None


def _tree_ops(options: RuntimeOptions, x: torch.Tensor):
    """The Triton module when this call may use it, else None."""
    return _triton_ops() if use_kernel(options, x) else None


def gdn_chain(q, k, v, g, beta, state: torch.Tensor, options: RuntimeOptions) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the delta rule over a chain from `state`; returns (o, final state). Inputs are pre-l2norm."""
    t = q.shape[1]
    if q.is_cuda and t > 1 and not options.torch_only and _fla_chunk() is not None:
        o, h = _fla_chunk()(
            q, k, v, g=g, beta=beta, initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=True
        )
        return o, h.float()
    if t == 1:
        return gdn_ref.gdn_recurrent(q, k, v, g, beta, initial_state=state, use_qk_l2norm=True)
    return gdn_ref.gdn_chunk(q, k, v, g, beta, initial_state=state, use_qk_l2norm=True)


@torch.library.custom_op("weaver::gdn_decode", mutates_args=("state",))
def gdn_decode_op(
    mixed: torch.Tensor, b_raw: torch.Tensor, a_raw: torch.Tensor, z: torch.Tensor, A_log: torch.Tensor,
    dt_bias: torch.Tensor, norm_weight: torch.Tensor, eps: float, state: torch.Tensor, num_k_heads: int,
) -> torch.Tensor:
    """`weaver.kernels.triton.gdn_decode.gdn_decode` as a custom op (what a torch.compile'd decode step sees)."""
    from weaver.kernels.triton.gdn_decode import gdn_decode as kernel

    return kernel(mixed, b_raw, a_raw, z, A_log, dt_bias, norm_weight, eps, state, num_k_heads)


@gdn_decode_op.register_fake
def _gdn_decode_fake(mixed, b_raw, a_raw, z, A_log, dt_bias, norm_weight, eps, state, num_k_heads):
    return z.new_empty(z.shape[0], 1, state.shape[1] * state.shape[3])


def fused_decode(options: RuntimeOptions, x: torch.Tensor) -> bool:
    """Whether a one-token GDN step runs `gdn_decode` (one kernel) instead of the torch recurrence and norm."""
    return _tree_ops(options, x) is not None


def gdn_decode(mixed, b_raw, a_raw, z, A_log, dt_bias, norm_weight, eps: float, state: torch.Tensor,
               num_k_heads: int) -> torch.Tensor:
    """One token after the conv: gates, delta rule (advances `state` in place), gated norm -> out_proj's input."""
    args = (mixed, b_raw, a_raw, z, A_log, dt_bias, norm_weight, eps, state, num_k_heads)
    return launch(gdn_decode_op, "weaver.kernels.triton.gdn_decode", "gdn_decode", *args)


def gdn_tree(q, k, v, g, beta, parents, state: torch.Tensor, structure, options: RuntimeOptions):
    """Tree verify from the committed `state` (read only); returns (o, aux for the commit)."""
    tri = _tree_ops(options, q)
    if tri is not None:
        return tri.gdn_tree(
            q, k, v, g, beta, structure if structure is not None else parents,
            initial_state=state, use_qk_l2norm=True,
        )
    return gdn_ref.gdn_tree(q, k, v, g, beta, parents, initial_state=state, use_qk_l2norm=True)


def gdn_tree_commit(aux, path: torch.Tensor, state: torch.Tensor, options: RuntimeOptions) -> torch.Tensor:
    """The committed state after accepting `path` (DESIGN §4.4: no replay of the layer)."""
    tri = _tree_ops(options, state)
    if tri is not None:
        return tri.gdn_tree_commit(aux, path, state)
    return gdn_ref.gdn_tree_commit(aux, path, state)


def causal_conv1d(x, weight, state):
    """The chain conv (prefill / decode): the torch op is already one fused kernel."""
    return conv_ref.causal_conv1d(x, weight, state, activation="silu")


def tree_conv1d(x, weight, parents, state, structure, options: RuntimeOptions):
    """Each node's window is itself and its 3 nearest ancestors (DESIGN §4.5)."""
    tri = _tree_ops(options, x)
    if tri is not None:
        return tri.tree_conv1d(x, weight, structure if structure is not None else parents, state)
    return conv_ref.tree_conv1d(x, weight, parents, state, activation="silu")


def conv_state_commit(x, path, state, options: RuntimeOptions):
    """The conv window along the accepted path."""
    tri = _tree_ops(options, x)
    if tri is not None:
        return tri.conv_state_commit(x, path, state)
    return conv_ref.conv_state_commit(x, path, state)


def build_tree_structure(parents: torch.Tensor, options: RuntimeOptions):
    """Kernel-side tree structure built once per verify and shared by every GDN layer (None for the references)."""
    tri = _tree_ops(options, parents)
    return tri.build_tree_structure(parents) if tri is not None else None
