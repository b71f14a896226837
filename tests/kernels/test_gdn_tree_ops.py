"""The GDN tree kernels as custom ops (`weaver::tree_structure`, `weaver::tree_conv1d`, `weaver::gdn_tree`): what a
torch.compile'd hybrid verify calls instead of tracing the Triton kernels (traced by inductor, the compiled verify
hit an illegal memory access at the Qwen3.6-27B widths on the H200). Their fake impls pass opcheck, and one
GDN layer's tree path compiled (structure, conv, delta rule writing a view of a stacked scratch) equals the same
path eager, with the views of the scratch written in place. CPU: interpreted at small sizes; GPU
(`--triton-full`): compiled at the Qwen3.6-27B GDN widths.
"""

from __future__ import annotations

import pytest
import torch
from helpers.trees import random_batch
from helpers.triton_env import DEVICE, FULL  # sets TRITON_INTERPRET before triton loads

from weaver.kernels import gdn as backend
from weaver.ops.gdn import GDNTreeAux
from weaver.options import RuntimeOptions
from weaver.testing import assert_close

TRITON = RuntimeOptions(kernels="triton")
SHAPE = dict(H=16, HV=48, K=128, V=128) if FULL else dict(H=2, HV=6, K=16, V=16)


def make_layer(B: int, T: int, seed: int, dtype: torch.dtype, H: int, HV: int, K: int, V: int, W: int = 4):
    """One GDN layer's tree inputs: pre-conv x [B, T, C], conv weight and window, raw gates (a and b as column views
    of one projection output, as the fused in-projection leaves them; A_log, dt_bias), committed state, parents."""
    gen = torch.Generator().manual_seed(seed)
    C = 2 * H * K + HV * V
    x = torch.randn(B, T, C, generator=gen).to(dtype)
    weight = (0.5 * torch.randn(C, W, generator=gen)).to(dtype)
    conv = torch.randn(B, C, W - 1, generator=gen).to(dtype)
    proj = torch.randn(B, T, 2 * HV + 3, generator=gen).to(dtype).to(DEVICE)
    gate_params = (0.5 * torch.randn(HV, generator=gen), torch.randn(HV, generator=gen))
    gates = (proj[..., 1 : HV + 1], proj[..., HV + 2 : 2 * HV + 2], *(t.to(DEVICE) for t in gate_params))
    state = 0.1 * torch.randn(B, HV, K, V, generator=gen)
    parents = random_batch(B, T, seed)
    return [*(t.to(DEVICE) for t in (x, weight, conv)), gates, *(t.to(DEVICE) for t in (state, parents))]


def layer_tree(x, weight, conv, gates, state, parents, layers: int, index: int, H: int, HV: int, K: int, V: int):
    """A GDN layer's verify as the model runs it: shared structure, tree conv and delta rule writing layer `index`
    of stacked scratch tensors allocated here (as the verify allocates them); returns (o, y, scratch)."""
    B, T, C = x.shape
    f32 = dict(device=x.device, dtype=torch.float32)
    scratch = (torch.empty(layers, B, T, H, K, **f32), torch.empty(layers, B, T, HV, V, **f32),
               torch.empty(layers, B, T, HV, **f32), torch.empty(layers, B, T, C, device=x.device, dtype=x.dtype))
    structure = backend.build_tree_structure(parents, TRITON)
    y = backend.tree_conv1d(x, weight, parents, conv, structure, TRITON, x_out=scratch[3][index])
    q, k, v = y.split([H * K, H * K, HV * V], dim=-1)
    aux_out = GDNTreeAux(scratch[0][index], scratch[1][index], scratch[2][index])
    o, _ = backend.gdn_tree(q.reshape(B, T, H, K), k.reshape(B, T, H, K), v.reshape(B, T, HV, V), *gates, parents,
                            state, structure, TRITON, aux_out=aux_out)  # fmt: skip
    return o, y, scratch


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@torch.no_grad()
def test_compiled_tree_layer_equals_eager(dtype) -> None:
    x, weight, conv, gates, state, parents = make_layer(2, 17, seed=3, dtype=dtype, **SHAPE)
    args = (x, weight, conv, gates, state, parents, 3, 1)
    want_o, want_y, want_scratch = layer_tree(*args, **SHAPE)
    torch._dynamo.reset()
    compiled = torch.compile(layer_tree, backend="inductor" if FULL else "aot_eager", fullgraph=True)
    o, y, scratch = compiled(*args, **SHAPE)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert_close("o", want_o.float(), o.float(), tol)
    assert_close("conv out", want_y.float(), y.float(), tol)
    for name, want, got in zip(("k", "delta", "G", "x"), want_scratch, scratch, strict=True):
        assert_close(f"scratch {name} (layer 1)", want[1].float(), got[1].float(), tol)
    assert torch.equal(scratch[3][1], x)  # the conv kernel's copy of its inputs landed in the layer's slot


@torch.no_grad()
def test_custom_ops_pass_opcheck() -> None:
    """Schema, fake impl (shapes / dtypes of the outputs) and mutation declarations of the three ops."""
    dims = dict(H=2, HV=6, K=16, V=16) if not FULL else SHAPE
    x, weight, conv, gates, state, parents = make_layer(1, 9, seed=1, dtype=torch.float32, **dims)
    torch.library.opcheck(backend.tree_structure_op, (parents,))
    anc, depth = backend.tree_structure_op(parents)
    p32 = parents.to(torch.int32)
    torch.library.opcheck(backend.tree_conv1d_op, (x, weight, p32, conv, torch.empty_like(x)))
    B, T, _ = x.shape
    H, HV, K, V = dims["H"], dims["HV"], dims["K"], dims["V"]
    q, k = (torch.randn(B, T, H, K, device=x.device) for _ in range(2))
    v = torch.randn(B, T, HV, V, device=x.device)
    aux = [torch.empty(B, T, H, K, device=x.device), torch.empty(B, T, HV, V, device=x.device),
           torch.empty(B, T, HV, device=x.device)]
    torch.library.opcheck(backend.gdn_tree_op, (q, k, v, *gates, p32, anc, depth, state, *aux))
