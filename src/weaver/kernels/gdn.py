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


def gdn_tree(q, k, v, g, beta, parents, state: torch.Tensor, structure, options: RuntimeOptions,
             aux_out: gdn_ref.GDNTreeAux | None = None):
    """Tree verify from the committed `state` (read only); returns (o, aux for the commit). With `aux_out` (the
    layer's slot of the stacked factors) the factors land there and aux is aux_out."""
    tri = _tree_ops(options, q)
    if tri is not None:
        return tri.gdn_tree(
            q, k, v, g, beta, structure if structure is not None else parents,
            initial_state=state, use_qk_l2norm=True, aux_out=aux_out,
        )
    o, aux = gdn_ref.gdn_tree(q, k, v, g, beta, parents, initial_state=state, use_qk_l2norm=True)
    if aux_out is None:
        return o, aux
    for dst, src in zip(aux_out, aux, strict=True):
        dst.copy_(src)
    return o, aux_out


def gdn_tree_commit(aux, path: torch.Tensor, state: torch.Tensor, options: RuntimeOptions) -> torch.Tensor:
    """The committed state after accepting `path` (DESIGN §4.4: no replay of the layer)."""
    tri = _tree_ops(options, state)
    if tri is not None:
        return tri.gdn_tree_commit(aux, path, state)
    return gdn_ref.gdn_tree_commit(aux, path, state)


def causal_conv1d(x, weight, state):
    """The chain conv (prefill / decode): the torch op is already one fused kernel."""
    return conv_ref.causal_conv1d(x, weight, state, activation="silu")


def tree_conv1d(x, weight, parents, state, structure, options: RuntimeOptions, x_out: torch.Tensor | None = None):
    """Each node's window is itself and its 3 nearest ancestors (DESIGN §4.5); `x_out` (the layer's slot of the
    stacked pre-conv inputs) also receives x, for the commit."""
    tri = _tree_ops(options, x)
    if tri is not None:
        return tri.tree_conv1d(x, weight, structure if structure is not None else parents, state, x_out=x_out)
    if x_out is not None:
        x_out.copy_(x)
    return conv_ref.tree_conv1d(x, weight, parents, state, activation="silu")


def conv_state_commit(x, path, state, options: RuntimeOptions):
    """The conv window along the accepted path."""
    tri = _tree_ops(options, x)
    if tri is not None:
        return tri.conv_state_commit(x, path, state)
    return conv_ref.conv_state_commit(x, path, state)


@torch.library.custom_op("weaver::gdn_tree_commit_stacked", mutates_args=("state",))
def gdn_tree_commit_stacked_op(
    k: torch.Tensor, delta: torch.Tensor, G: torch.Tensor, path: torch.Tensor, state: torch.Tensor
) -> None:
    """`weaver.kernels.triton.gdn_commit.gdn_tree_commit_stacked` as a custom op: torch.compile sees the write into
    `state` as a mutation of its input (kept in place) instead of a new tensor copied back."""
    from weaver.kernels.triton.gdn_commit import gdn_tree_commit_stacked as kernel

    kernel(k, delta, G, path, state)


@gdn_tree_commit_stacked_op.register_fake
def _gdn_tree_commit_stacked_fake(k, delta, G, path, state) -> None:
    return None


@torch.library.custom_op("weaver::conv_state_commit_stacked", mutates_args=("state",))
def conv_state_commit_stacked_op(x: torch.Tensor, path: torch.Tensor, state: torch.Tensor) -> None:
    """`weaver.kernels.triton.conv.conv_state_commit_stacked` as a custom op (in place under torch.compile)."""
    from weaver.kernels.triton.conv import conv_state_commit_stacked as kernel

    kernel(x, path, state)


@conv_state_commit_stacked_op.register_fake
def _conv_state_commit_stacked_fake(x, path, state) -> None:
    return None


def commit_stacked(
    k: torch.Tensor,  # [L, B, T, H, K] float32: every GDN layer's tree factors (gdn_tree's aux_out slots)
    delta: torch.Tensor,  # [L, B, T, HV, V] float32
    G: torch.Tensor,  # [L, B, T, HV] float32
    x: torch.Tensor,  # [L, B, T, C]: every GDN layer's pre-conv inputs (tree_conv1d's x_out slots)
    path: torch.Tensor,  # [B, P] accepted node ids root..leaf, -1 padded
    states: torch.Tensor,  # [L, B, HV, K, V] float32, committed states (updated in place)
    convs: torch.Tensor,  # [L, B, C, W-1] committed conv windows (updated in place)
    options: RuntimeOptions,
) -> None:
    """Fold the accepted path into every GDN layer's state and conv window: two launches for all layers (the
    kernels), or per layer with the torch references (their results copied in)."""
    if _tree_ops(options, states) is not None:
        launch(gdn_tree_commit_stacked_op, "weaver.kernels.triton.gdn_commit", "gdn_tree_commit_stacked",
               k, delta, G, path, states)  # fmt: skip
        launch(conv_state_commit_stacked_op, "weaver.kernels.triton.conv", "conv_state_commit_stacked", x, path, convs)
        return
    for layer in range(states.shape[0]):
        aux = gdn_ref.GDNTreeAux(k=k[layer], delta=delta[layer], G=G[layer])
        states[layer].copy_(gdn_ref.gdn_tree_commit(aux, path, states[layer]))
        convs[layer].copy_(conv_ref.conv_state_commit(x[layer], path, convs[layer]))


def build_tree_structure(parents: torch.Tensor, options: RuntimeOptions):
    """Kernel-side tree structure built once per verify and shared by every GDN layer (None for the references)."""
    tri = _tree_ops(options, parents)
    return tri.build_tree_structure(parents) if tri is not None else None
