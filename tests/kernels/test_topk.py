"""weaver.kernels.triton.small_topk (one program per row) vs torch.topk and a stable descending sort.

CPU: the kernel runs under TRITON_INTERPRET=1 at small sizes. GPU (`--triton-full`): compiled, at
the tree builders' sizes and up to N = 8192, k = 64. The oracle for ties and -inf is the stable sort:
among equal values (-inf included) the lowest index comes first, so the k indices are always distinct.
"""

from __future__ import annotations

import pytest
import torch
from helpers.triton_env import DEVICE, FULL  # sets TRITON_INTERPRET before triton loads
from hypothesis import given, settings
from hypothesis import strategies as st

from weaver.kernels.topk import TOPK_MAX_K, TOPK_MAX_N, small_topk_op, topk_last
from weaver.kernels.triton.topk import small_topk
from weaver.options import RuntimeOptions

AUTO, TORCH, TRITON = RuntimeOptions(), RuntimeOptions(kernels="torch"), RuntimeOptions(kernels="triton")

DTYPES = [torch.float32, torch.float64]
SHAPES = [(1, 1, 1), (3, 7, 7), (2, 33, 1), (4, 100, 5), (2, 520, 4), (3, 512, 8), (1, 64, 64)]
if FULL:
    SHAPES += [(32, 520, 4), (256, 512, 8), (5, 5000, 17), (4, TOPK_MAX_N, TOPK_MAX_K), (1, 4097, 64)]


def distinct_rows(R: int, N: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """[R, N] without ties: a random permutation of 0..N-1 plus a fraction < 1/2, centred and scaled."""
    gen = torch.Generator().manual_seed(seed)
    perm = torch.stack([torch.randperm(N, generator=gen) for _ in range(R)]).to(torch.float64)
    x = (perm + 0.5 * torch.rand(R, N, generator=gen, dtype=torch.float64) - N / 2) * 0.37
    return x.to(dtype).to(DEVICE)


def stable_topk(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    values, indices = torch.sort(x, dim=-1, descending=True, stable=True)
    return values[..., :k], indices[..., :k]


def assert_topk(got: tuple[torch.Tensor, torch.Tensor], want: tuple[torch.Tensor, torch.Tensor]) -> None:
    (v, i), (rv, ri) = got, want
    assert v.dtype == rv.dtype and i.dtype == torch.int64 and v.shape == rv.shape == i.shape
    torch.testing.assert_close(v.cpu(), rv.cpu(), rtol=0, atol=0, equal_nan=True)
    assert torch.equal(i.cpu(), ri.cpu())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("R,N,k", SHAPES, ids=lambda v: str(v))
def test_small_topk_matches_torch_topk(R: int, N: int, k: int, dtype: torch.dtype) -> None:
    x = distinct_rows(R, N, dtype, seed=R * 1000 + N + k)
    assert_topk(small_topk(x, k), torch.topk(x, k, dim=1))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_small_topk_strided_rows(dtype: torch.dtype) -> None:
    """A column slice of a wider tensor (the frontier's score[:, :F]) is read in place; a last dim of
    stride > 1 (a transpose) is copied first."""
    wide = distinct_rows(5, 521, dtype, seed=1)
    x = wide[:, :520]
    assert x.stride() == (521, 1)
    assert_topk(small_topk(x, 4), torch.topk(x, 4, dim=1))
    xt = distinct_rows(40, 6, dtype, seed=2).t()  # [6, 40], strides (1, 6)
    assert_topk(small_topk(xt, 8), torch.topk(xt, 8, dim=1))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_small_topk_ties_and_neg_inf(dtype: torch.dtype) -> None:
    inf, nan = float("inf"), float("nan")
    x = torch.tensor(
        [
            [1.0, 2.0, 2.0, 1.0, 2.0, 0.0, 1.0, 2.0],  # ties: the lowest index first
            [-inf, 3.0, -inf, -inf, 1.0, -inf, -inf, -inf],  # some -inf: distinct indices past the finite ones
            [-inf] * 8,  # all -inf: 0, 1, 2, ...
            [0.0, -0.0, -1.0, 0.0, inf, -inf, nan, 5.0],  # +-0 tie; NaN above +inf (as torch.topk)
        ],
        dtype=dtype,
        device=DEVICE,
    )
    for k in (1, 3, 8):
        assert_topk(small_topk(x, k), stable_topk(x, k))
    v, i = small_topk(x, 8)
    assert i[2].tolist() == list(range(8)) and bool(torch.isneginf(v[2]).all())
    assert i[1].tolist() == [1, 4, 0, 2, 3, 5, 6, 7]
    assert i[3].tolist() == [6, 4, 7, 0, 1, 3, 2, 5]


@settings(max_examples=10 if FULL else 20, deadline=None)
@given(
    R=st.integers(1, 64 if FULL else 3),
    N=st.integers(1, TOPK_MAX_N if FULL else 300),
    k_frac=st.floats(0, 1),
    dtype=st.sampled_from(DTYPES),
    kind=st.sampled_from(["distinct", "ties", "neg_inf"]),
    seed=st.integers(0, 10_000),
)
def test_small_topk_random(R: int, N: int, k_frac: float, dtype: torch.dtype, kind: str, seed: int) -> None:
    k = 1 + int(k_frac * (min(N, TOPK_MAX_K) - 1))
    x = distinct_rows(R, N, dtype, seed)
    if kind == "ties":  # few distinct values
        x = x.round() % 5
    elif kind == "neg_inf":  # a random part of each row emptied, whole rows too
        gen = torch.Generator().manual_seed(seed)
        drop = torch.rand(R, N, generator=gen) < torch.rand(R, 1, generator=gen) * 1.5
        x = x.masked_fill(drop.to(DEVICE), float("-inf"))
    assert_topk(small_topk(x, k), stable_topk(x, k))
    if kind == "distinct":
        assert_topk(small_topk(x, k), torch.topk(x, k, dim=1))


def test_small_topk_rejects() -> None:
    x = torch.zeros(2, 5, device=DEVICE)
    for bad in (0, 6):
        with pytest.raises(ValueError, match="k <= min"):
            small_topk(x, bad)
    with pytest.raises(ValueError, match="float32 or float64"):
        small_topk(x.half(), 2)
    with pytest.raises(ValueError, match=r"\[R, N\]"):
        small_topk(x[None], 2)
    v, i = small_topk(torch.zeros(0, 5, device=DEVICE), 2)
    assert v.shape == i.shape == (0, 2)


@pytest.mark.parametrize("options", [AUTO, TORCH, TRITON], ids=["auto", "torch", "triton"])
def test_topk_last_is_torch_topk(options: RuntimeOptions) -> None:
    """3-D input, any leading dims: torch.topk itself with kernels="torch" (and "auto" on CPU), the kernel with
    "triton" (and "auto" on CUDA); the same values and indices on tie-free rows."""
    x = distinct_rows(6, 40, torch.float32, seed=3).view(2, 3, 40)
    for k in (1, 5, 40):
        v, i = topk_last(x, k, options)
        assert v.shape == i.shape == (2, 3, k)
        assert_topk((v, i), torch.topk(x, k, dim=-1))
    # outside the kernel's range (k > 64, float16): torch.topk whatever the options
    big = distinct_rows(2, 100, torch.float32, seed=4)
    assert_topk(topk_last(big, 70, options), torch.topk(big, 70, dim=-1))
    half = big.half()
    v, i = topk_last(half, 3, options)
    assert v.dtype == torch.float16 and torch.equal(i, torch.topk(half, 3, dim=-1).indices)


def test_topk_last_runs_the_kernel_where_the_options_say(monkeypatch) -> None:
    """kernels="torch" never launches the kernel, "triton" always does (the interpreter on CPU)."""
    import weaver.kernels.topk as topk_module

    launched = []
    launch = topk_module.launch
    monkeypatch.setattr(topk_module, "launch", lambda *a: launched.append(1) or launch(*a))
    x = distinct_rows(2, 30, torch.float64, seed=6)
    topk_last(x, 4, TORCH)
    assert not launched
    topk_last(x, 4, TRITON)
    assert launched


def test_small_topk_op_compiles() -> None:
    """The custom op (fake impl for tracing, kernel at run time) inside a torch.compile'd function, as in
    the compiled round stages. CPU: aot_eager (inductor's C++ build takes ~25 s here); CUDA: inductor."""
    x = distinct_rows(4, 11, torch.float64, seed=5)
    torch.library.opcheck(small_topk_op, (x[:, :10], 3))

    def f(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        v, i = topk_last(s[:, :10] * 2, 3, AUTO)
        w, j = small_topk_op(s[:, 1:], 2)
        return v + 1, i, w, j

    torch._dynamo.reset()
    got = torch.compile(f, backend="inductor" if FULL else "aot_eager", fullgraph=True)(x)
    for a, b in zip(got, f(x)):
        assert torch.equal(a, b)
    v, i = torch.topk(x[:, :10] * 2, 3)
    assert torch.equal(got[0], v + 1) and torch.equal(got[1], i)
