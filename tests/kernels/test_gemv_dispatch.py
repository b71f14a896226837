"""One-row projections of large weights through weaver's GEMV (`weaver.kernels.gemv`) against F.linear."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers.triton_env import DEVICE, FULL  # sets TRITON_INTERPRET before triton loads

from weaver.kernels import gemv
from weaver.kernels.triton.decode import fused_gemv, gemv_config
from weaver.options import RuntimeOptions
from weaver.testing import assert_close

TRITON, TORCH = RuntimeOptions(kernels="triton"), RuntimeOptions(kernels="torch")
# interpreted: a narrow weight at the long-tile K; compiled: the Qwen3.6-27B GDN out_proj and a SwiGLU block
SHAPES = [(5120, 6144), (2 * 8704, 5120)] if FULL else [(48, 4096)]


def _weights(n: int, k: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 1, k, generator=gen).to(DEVICE, torch.bfloat16)
    w = (torch.randn(n, k, generator=gen) * k**-0.5).to(DEVICE, torch.bfloat16)
    return x, w


@pytest.mark.parametrize("swiglu", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_gemv_linear_matches_f_linear(shape, swiglu):
    x, w = _weights(*shape)
    got = gemv.linear(x, w, TRITON, swiglu=swiglu, min_bytes=0)
    want = F.linear(x.float(), w.float())
    if swiglu:
        gate, up = want.chunk(2, dim=-1)
        want = F.silu(gate) * up
    assert got.shape == want.shape and got.dtype == torch.bfloat16
    assert_close("gemv", want, got, 2e-2)


@pytest.mark.parametrize(
    "case",
    ["two rows", "short K", "long K", "fp32", "kernels=torch", "small weight"],
)
def test_gemv_linear_keeps_f_linear_outside_its_range(case, monkeypatch):
    """Outside one row of a large 16-bit weight with gemv.GEMV_MIN_K <= K <= GEMV_MAX_K, `linear` is F.linear
    exactly (the kernel is never reached: it raises if it is)."""
    k = {"short K": gemv.GEMV_MIN_K // 2, "long K": gemv.GEMV_MAX_K * 2}.get(case, gemv.GEMV_MIN_K)
    x, w = _weights(16, k)
    if case == "two rows":
        x = torch.cat([x, x], dim=1)
    if case == "fp32":
        x, w = x.float(), w.float()
    options = TORCH if case == "kernels=torch" else TRITON
    min_bytes = gemv.GEMV_MIN_BYTES if case == "small weight" else 0

    def no_kernel(*args):
        raise AssertionError("the GEMV kernel ran")

    monkeypatch.setattr(gemv, "launch", no_kernel)
    got = gemv.linear(x, w, options, min_bytes=min_bytes)
    assert torch.equal(got, F.linear(x, w))


def test_project_keeps_a_biased_linear():
    layer = torch.nn.Linear(gemv.GEMV_MIN_K, 8, bias=True).to(DEVICE, torch.bfloat16)
    x = torch.randn(1, 1, gemv.GEMV_MIN_K).to(DEVICE, torch.bfloat16)
    assert torch.equal(gemv.project(layer, x, TRITON), layer(x))


def test_long_tile_rule_for_one_row_of_a_large_weight():
    """The rule of the 27B shapes (one or two weight rows a program, whole input rows up to 8,192) and the old
    ones elsewhere: a SwiGLU's gate and up rows count double, so it takes one."""
    cuda = torch.device("cuda")
    assert gemv_config(34816, 5120, 1, cuda) == (2, 8192, 8)
    assert gemv_config(17408, 5120, 1, cuda, swiglu=True) == (1, 8192, 4)
    assert gemv_config(5120, 6144, 1, cuda) == (1, 8192, 4)
    assert gemv_config(5120, 6144, 4, cuda, block_m=4)[2] == 2  # the adapter's several-row rule
    assert gemv_config(49152, 576, 1, cuda) == (16, 64, 1)  # SmolLM2's LM head: short rows, the tuned rule


def test_gemv_op_passes_opcheck():
    x, w = _weights(*SHAPES[0])
    torch.library.opcheck(gemv.gemv_op, (x.view(1, -1), w, False))


@pytest.mark.parametrize("swiglu", [False, True])
def test_unrolled_k_loop_matches_the_loop(swiglu):
    """fused_gemv(unroll_k=True) (gemv_wide_ab.py's A/B: every K tile's loads before one reduction) computes what
    the K loop does, with a last tile that is part mask."""
    n, k = (2 * 8704, 5120) if FULL else (48, 1000)
    x, w = _weights(n, k)
    gen = torch.Generator().manual_seed(1)
    residual = torch.randn(1, n // 2 if swiglu else n, generator=gen).to(DEVICE, torch.bfloat16)
    config = (1, 2048, 8) if FULL else (16, 256, 1)
    loop = fused_gemv(x.view(1, -1), w, residual=residual, swiglu=swiglu, config=config)
    unrolled = fused_gemv(x.view(1, -1), w, residual=residual, swiglu=swiglu, config=config, unroll_k=True)
    want = F.linear(x.view(1, -1).float(), w.float())
    if swiglu:
        gate, up = want.chunk(2, dim=-1)
        want = F.silu(gate) * up
    assert_close("unrolled K loop", want + residual.float(), unrolled, 2e-2)
    assert_close("unrolled against the loop", loop.float(), unrolled, 1e-2)


@pytest.mark.parametrize("rows", [1, 2])
def test_conv_epilogue_matches_linear_then_conv(rows):
    """fused_gemv's GDN decode conv (`linear_conv` at one row): outputs below C are silu(causal conv) of the
    linear's, continuing the window, which advances in place; the others are the linear's. Against F.linear and
    weaver.ops.conv, with C not a multiple of the tile."""
    from weaver.ops.conv import causal_conv1d

    n, k, c, w = (16480, 5120, 10240, 4) if FULL else (48, 4096, 37, 4)
    x, weight = _weights(n, k)
    x = x.expand(rows, 1, k).contiguous() * torch.arange(1, rows + 1, device=DEVICE, dtype=x.dtype)[:, None, None]
    gen = torch.Generator().manual_seed(3)
    conv_w = (torch.randn(c, w, generator=gen) * 0.5).to(DEVICE, torch.bfloat16)
    state = torch.randn(rows, c, w - 1, generator=gen).to(DEVICE, torch.bfloat16)
    linear = F.linear(x.float(), weight.float()).to(torch.bfloat16)
    want_conv, want_state = causal_conv1d(linear[..., :c], conv_w, state)
    want = torch.cat([want_conv, linear[..., c:]], dim=-1)
    got_state = state.clone()
    if rows == 1:
        got = gemv.linear_conv(x, weight, conv_w, got_state, TRITON, min_bytes=0)
    else:
        got = fused_gemv(x.view(rows, k), weight, conv_weight=conv_w, conv_state=got_state).view(rows, 1, n)
    assert got.shape == want.shape and got.dtype == torch.bfloat16
    assert_close("conv outputs", want[..., :c].float(), got[..., :c].float(), 2e-2)
    assert_close("other outputs", want[..., c:].float(), got[..., c:].float(), 2e-2)
    assert_close("window", want_state.float(), got_state.float(), 2e-2)
    assert torch.equal(got_state[..., :-1], state[..., 1:])  # the older columns move exactly


def test_conv_epilogue_fallback_and_bad_state():
    """Outside the GEMV's range `linear_conv` is F.linear and the torch conv; a conv window of the wrong shape is a
    ValueError of the kernel's launcher."""
    from weaver.ops.conv import causal_conv1d

    x, weight = _weights(24, 64)
    conv_w = torch.ones(8, 4, device=DEVICE, dtype=torch.bfloat16)
    state = torch.ones(1, 8, 3, device=DEVICE, dtype=torch.bfloat16)
    got_state = state.clone()
    got = gemv.linear_conv(x, weight, conv_w, got_state, TRITON)
    y = F.linear(x, weight)
    want_conv, want_state = causal_conv1d(y[..., :8], conv_w, state)
    assert torch.equal(got, torch.cat([want_conv, y[..., 8:]], dim=-1)) and torch.equal(got_state, want_state)
    with pytest.raises(ValueError, match="conv_state must be"):
        fused_gemv(x.view(1, -1), weight, conv_weight=conv_w, conv_state=state[:, :, :2].contiguous())
    with pytest.raises(ValueError, match="the conv epilogue needs"):
        fused_gemv(x.view(1, -1), weight, conv_weight=conv_w, conv_state=state, swiglu=True)
    with pytest.raises(ValueError, match="an option of the per-row GEMV"):  # 16 rows take the row tiles
        fused_gemv(x.view(1, -1).expand(16, -1), weight, conv_weight=conv_w, conv_state=state.expand(16, -1, -1))


def test_gemv_conv_op_passes_opcheck():
    x, weight = _weights(*SHAPES[0])
    conv_w = torch.ones(8, 4, device=DEVICE, dtype=torch.bfloat16)
    state = torch.ones(1, 8, 3, device=DEVICE, dtype=torch.bfloat16)
    torch.library.opcheck(gemv.gemv_conv_op, (x.view(1, -1), weight, conv_w, state))
