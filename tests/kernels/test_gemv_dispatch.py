"""One-row projections of large weights through weaver's GEMV (`weaver.kernels.gemv`) against F.linear."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers.triton_env import DEVICE, FULL  # sets TRITON_INTERPRET before triton loads

from weaver.kernels import gemv
from weaver.kernels.triton.decode import gemv_config
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
