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


def gdn_tree(q, k, v, a_raw, b_raw, A_log, dt_bias, parents, state: torch.Tensor, structure,
             options: RuntimeOptions, aux_out: gdn_ref.GDNTreeAux | None = None):
    """Tree verify from the committed `state` (read only) with the gates of the in-projection's raw a and b
    (`weaver.ops.gdn.gdn_gates`; the Triton prep kernel computes them itself); returns (o, aux for the commit).
    With `aux_out` (the layer's slot of the stacked factors) the factors land there and aux is aux_out."""
    tri = _tree_ops(options, q)
    if tri is not None and torch.compiler.is_compiling():  # one opaque op: inductor never traces the kernels
        structure = structure if structure is not None else build_tree_structure(parents, options)
        if aux_out is None:
            aux_out = _empty_aux(q, v)
        o = gdn_tree_op(q, k, v, a_raw, b_raw, A_log, dt_bias, *structure, state, *aux_out)
        return o, aux_out
    if tri is not None:
        return tri.gdn_tree(
            q, k, v, a_raw, b_raw, structure if structure is not None else parents,
            initial_state=state, use_qk_l2norm=True, aux_out=aux_out, gates=tri.RawGates(A_log, dt_bias),
        )
    g, beta = gdn_ref.gdn_gates(a_raw, b_raw, A_log, dt_bias)
    o, aux = gdn_ref.gdn_tree(q, k, v, g, beta, parents, initial_state=state, use_qk_l2norm=True)
    if aux_out is None:
        return o, aux
    for dst, src in zip(aux_out, aux, strict=True):
        dst.copy_(src)
    return o, aux_out


def _empty_aux(q: torch.Tensor, v: torch.Tensor) -> gdn_ref.GDNTreeAux:
    """Uninitialised fp32 factors of one layer's tree verify (where no stacked slot was handed in)."""
    (b, t, h, dk), (hv, dv) = q.shape, v.shape[2:]
    f32 = dict(device=q.device, dtype=torch.float32)
    return gdn_ref.GDNTreeAux(k=torch.empty(b, t, h, dk, **f32), delta=torch.empty(b, t, hv, dv, **f32),
                              G=torch.empty(b, t, hv, **f32))


# The tree kernels as custom ops: under torch.compile each is one opaque call that runs the launcher on real
# tensors, so inductor neither traces the Triton kernels nor plans memory around its own reading of them (traced,
# the compiled hybrid verify hit an illegal memory access at the Qwen3.6-27B widths on the H200, session 30).


@torch.library.custom_op("weaver::tree_structure", mutates_args=())
def tree_structure_op(parents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`build_tree_structure`'s ancestor mask (int8 [B, T, T]) and depths (int32 [B, T])."""
    from weaver.kernels.triton.structure import build_tree_structure as kernel

    structure = kernel(parents)
    return structure.anc, structure.depth


@tree_structure_op.register_fake
def _tree_structure_fake(parents):
    b, t = parents.shape
    return parents.new_empty(b, t, t, dtype=torch.int8), parents.new_empty(b, t, dtype=torch.int32)


@torch.library.custom_op("weaver::gdn_tree", mutates_args=("aux_k", "aux_delta", "aux_G"))
def gdn_tree_op(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a_raw: torch.Tensor, b_raw: torch.Tensor, A_log: torch.Tensor,
    dt_bias: torch.Tensor, parents: torch.Tensor, anc: torch.Tensor, depth: torch.Tensor, state: torch.Tensor | None,
    aux_k: torch.Tensor, aux_delta: torch.Tensor, aux_G: torch.Tensor,
) -> torch.Tensor:
    """`weaver.kernels.triton.gdn_tree.gdn_tree` (raw gates, l2norm, from `state`) writing its factors into aux_*."""
    from weaver.kernels.triton.gdn_tree import RawGates
    from weaver.kernels.triton.gdn_tree import gdn_tree as kernel
    from weaver.kernels.triton.structure import TreeStructure

    o, _ = kernel(q, k, v, a_raw, b_raw, TreeStructure(parents, anc, depth), initial_state=state, use_qk_l2norm=True,
                  aux_out=gdn_ref.GDNTreeAux(aux_k, aux_delta, aux_G), gates=RawGates(A_log, dt_bias))  # fmt: skip
    return o


@gdn_tree_op.register_fake
def _gdn_tree_fake(q, k, v, a_raw, b_raw, A_log, dt_bias, parents, anc, depth, state, aux_k, aux_delta, aux_G):
    return v.new_empty(v.shape)


@torch.library.custom_op("weaver::tree_conv1d", mutates_args=("x_out",))
def tree_conv1d_op(
    x: torch.Tensor, weight: torch.Tensor, parents: torch.Tensor, state: torch.Tensor | None, x_out: torch.Tensor
) -> torch.Tensor:
    """`weaver.kernels.triton.conv.tree_conv1d` (silu) that also copies x into `x_out`."""
    from weaver.kernels.triton.conv import tree_conv1d as kernel

    return kernel(x, weight, parents, state, x_out=x_out)


@tree_conv1d_op.register_fake
def _tree_conv1d_fake(x, weight, parents, state, x_out):
    return x.new_empty(x.shape)


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
    if tri is not None and torch.compiler.is_compiling():  # one opaque op (see tree_structure_op)
        structure = structure if structure is not None else build_tree_structure(parents, options)
        x_out = x_out if x_out is not None else torch.empty_like(x)
        return tree_conv1d_op(x, weight, structure.parents, state, x_out)
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
    if tri is not None and torch.compiler.is_compiling():  # one opaque op (see tree_structure_op)
        return tri.TreeStructure(parents.to(torch.int32).contiguous(), *tree_structure_op(parents))
    return tri.build_tree_structure(parents) if tri is not None else None
