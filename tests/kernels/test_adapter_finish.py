"""The Weaver block's fused output projection + MLP (weaver.kernels.triton.adapter_finish) vs its torch reference
(`weaver.ops.adapter_finish`, which `WeaverBlock.finish` is).

Both MLP forms: GELU fc1/fc2 (the older adapter) and SwiGLU gate_up_proj/down_proj (the released one). CPU: the
GEMV kernel runs under TRITON_INTERPRET=1 at small sizes. GPU (`--triton-full`): compiled, at the benchmark's
adapter (d_rank 512, MLP 1024, 4-8 node rows), also through the custom op.
"""

from __future__ import annotations

import pytest
import torch
from helpers.triton_env import DEVICE, FULL, pinned  # sets TRITON_INTERPRET before triton loads
from hypothesis import given, settings
from hypothesis import strategies as st

from weaver.kernels.adapter_finish import adapter_finish_op, fused_finish
from weaver.kernels.triton.adapter_finish import adapter_finish
from weaver.kernels.triton.decode import fused_gemv
from weaver.ops import adapter_finish as reference
from weaver.options import RuntimeOptions
from weaver.speculative.weaver import WeaverBlock, WeaverConfig
from weaver.testing import assert_close

TOL = {torch.float32: 1e-5, torch.bfloat16: 3e-2}


MLPS = ["gelu", "swiglu"]


def _block(d: int, mlp: int, bias: bool, dtype: torch.dtype, seed: int, kind: str = "gelu") -> WeaverBlock:
    """A WeaverBlock with random weights (norm weights and biases away from 1 / 0); kind: its MLP."""
    block = WeaverBlock(WeaverConfig(target_hidden=8, d_rank=d, num_heads=2, mlp_dim=mlp, norm_bias=bias, mlp=kind))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in block.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(noise / p.shape[1] ** 0.5 if p.ndim == 2 else (1 + 0.1 * noise if "norm" in name else 0.1 * noise))
    return block.to(DEVICE, dtype)


def _weights(block: WeaverBlock) -> tuple:
    """The finish's weights in the launcher's (and the reference's) argument order, the MLP form last."""
    return block.finish_weights()


@pinned(  # SwiGLU in both dtypes, with norm bias and without, an MLP width that is no multiple of the GEMV tile
    dict(rows=3, d=24, mlp=20, dtype=torch.bfloat16, bias=True, kind="swiglu", seed=1),
    dict(rows=1, d=8, mlp=40, dtype=torch.float32, bias=False, kind="swiglu", seed=2),
)
@settings(max_examples=6 if FULL else 15, deadline=None)
@given(
    rows=st.sampled_from([4, 8]) if FULL else st.integers(1, 5),
    d=st.sampled_from([512]) if FULL else st.sampled_from([8, 16, 24]),
    mlp=st.sampled_from([1024]) if FULL else st.sampled_from([8, 20, 40]),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    bias=st.booleans(),
    kind=st.sampled_from(MLPS),
    seed=st.integers(0, 10_000),
)
def test_adapter_finish_matches_the_block(rows, d, mlp, dtype, bias, kind, seed) -> None:
    """Three GEMV launches give the reference (its rounding points, within the dtype's tolerance), which is
    `WeaverBlock.finish` on the heads concatenated; GELU and SwiGLU."""
    block = _block(d, mlp, bias, dtype, seed, kind)
    gen = torch.Generator().manual_seed(seed + 1)
    x = (torch.randn(rows, d, generator=gen) * 2).to(DEVICE, dtype)
    attn = torch.randn(rows, d, generator=gen).to(DEVICE, dtype)
    with torch.no_grad():
        want = reference.adapter_finish(x, attn, *_weights(block))
        assert torch.equal(want, block.finish(x[None], attn.view(1, rows, 2, d // 2).transpose(1, 2))[0])
        got = adapter_finish(x, attn, *_weights(block))
    assert got.dtype == dtype and got.shape == (rows, d)
    assert_close("block output", want, got, TOL[dtype])


@pytest.mark.parametrize("kind", MLPS)
def test_fused_finish_runs_what_the_options_say(kind: str) -> None:
    """kernels="torch": the reference itself; "triton": the launches (the interpreter on CPU), both MLP forms."""
    block = _block(16, 20, True, torch.float32, 5, kind)
    gen = torch.Generator().manual_seed(6)
    x, attn = (torch.randn(3, 16, generator=gen).to(DEVICE) for _ in range(2))
    with torch.no_grad():
        want = reference.adapter_finish(x, attn, *_weights(block))
        assert torch.equal(fused_finish(block, x, attn, RuntimeOptions(kernels="torch")), want)
        assert torch.equal(fused_finish(block, x, attn, RuntimeOptions(kernels="triton")),
                           adapter_finish(x, attn, *_weights(block)))  # fmt: skip


@pytest.mark.skipif(not FULL, reason="the custom op launches compiled kernels (GPU run)")
@pytest.mark.parametrize("kind", MLPS)
def test_adapter_finish_op_is_the_launcher(kind: str) -> None:
    block = _block(512, 1024, True, torch.bfloat16, 3, kind)
    x, attn = (torch.randn(4, 512, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
    args = (x, attn, *_weights(block))
    assert torch.equal(adapter_finish_op(*args), adapter_finish(*args))


def test_fused_gemv_adapter_options_are_checked() -> None:
    x, w = torch.randn(2, 16, device=DEVICE), torch.randn(8, 16, device=DEVICE)
    with pytest.raises(ValueError, match="per-row GEMV"):
        fused_gemv(x, w, bias=torch.zeros(8, device=DEVICE), row_tiles=True)
    with pytest.raises(ValueError, match="per-row GEMV"):
        fused_gemv(x, torch.randn(16, 16, device=DEVICE), gelu=True, swiglu=True)
    with pytest.raises(ValueError, match="norm_bias needs"):
        fused_gemv(x, w, torch.ones(16, device=DEVICE), norm_bias=torch.zeros(16, device=DEVICE))
    with pytest.raises(ValueError, match="bias must be"):
        fused_gemv(x, w, bias=torch.zeros(4, device=DEVICE), swiglu=True)
    # bias alone: x @ W^T + b (the per-row GEMV, even at 16+ rows)
    x16 = torch.randn(16, 16, device=DEVICE)
    b = torch.randn(8, device=DEVICE)
    assert_close("x W^T + b", x16 @ w.T + b, fused_gemv(x16, w, bias=b), 1e-5)
    # with swiglu the bias is [gate; up], each half added before the activation
    gate, up = (x16 @ w.T + b).chunk(2, dim=-1)
    assert_close("silu(gate) * up", torch.nn.functional.silu(gate) * up, fused_gemv(x16, w, bias=b, swiglu=True), 1e-5)
