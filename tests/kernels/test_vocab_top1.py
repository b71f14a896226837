"""weaver.kernels.triton.vocab_top1 (two-stage max log-softmax + argmax) vs torch.log_softmax(...).max and argmax.

CPU: the kernels run under TRITON_INTERPRET=1 at small sizes. GPU (`--triton-full`): compiled, at the
drafter's and target's vocabularies (49152, 151936) and 1 / 16 / 65 rows. Values are compared with a float64
reference (relative to max(|log p|, 1)); indices exactly, with the lowest index winning among equal maxima.
"""

from __future__ import annotations

import pytest
import torch
from helpers.triton_env import DEVICE, FULL  # sets TRITON_INTERPRET before triton loads
from helpers.vocab import NEG_INF, logits, random_rows
from hypothesis import given, settings
from hypothesis import strategies as st

from weaver.kernels.triton.vocab_top1 import vocab_top1, vocab_top1_config
from weaver.kernels.vocab_top1 import VOCAB_TOP1_MIN_V, argmax_last, top1_logprob, vocab_top1_op
from weaver.options import DEFAULT_OPTIONS, RuntimeOptions
from weaver.testing import assert_close

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
SHAPES = [(1, 1), (2, 7), (3, 128), (1, 2048), (2, 2049), (4, 5000)]
if FULL:
    SHAPES += [(r, v) for r in (1, 16, 65) for v in (49152, 151936)]


def reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 max log-softmax and torch.argmax (the lowest index among equal maxima)."""
    return torch.log_softmax(x.double(), dim=-1).amax(dim=-1), x.argmax(dim=-1)


def assert_top1(got: tuple[torch.Tensor, torch.Tensor], x: torch.Tensor, name: str = "logp") -> None:
    (logp, index), (ref_logp, ref_index) = got, reference(x)
    assert logp.dtype == torch.float32 and index.dtype == torch.int64
    assert logp.shape == index.shape == x.shape[:-1]
    assert_close(name, ref_logp, logp, rtol=2e-6 if x.shape[-1] <= 5000 else 1e-5, floor=1.0)
    assert torch.equal(index.cpu(), ref_index.cpu()), f"{name}: index {index.tolist()} != {ref_index.tolist()}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("R,V", SHAPES, ids=lambda v: str(v))
def test_vocab_top1_matches_torch(R: int, V: int, dtype: torch.dtype) -> None:
    x = logits(R, V, dtype, seed=R * 100_000 + V)
    assert_top1(vocab_top1(x), x)


def test_vocab_top1_ties_take_the_lowest_index() -> None:
    """The max repeated later in the same chunk, in a later chunk, and in the row's last (partial) chunk."""
    chunk, C, _ = vocab_top1_config(5000)
    assert C >= 3  # the ties below cross chunks
    x = logits(4, 5000, torch.float32, seed=1)
    x[0, [700, 900]] = 50.0  # same chunk
    x[1, [chunk + 5, 1]] = 50.0  # lower index in an earlier chunk than the higher one
    x[2, [4999, chunk * 2 + 3, chunk + 9]] = 50.0  # three chunks, the last partial
    x[3] = 0.0  # the whole row ties
    logp, index = vocab_top1(x)
    assert index.tolist() == [700, 1, chunk + 9, 0]
    assert_top1((logp, index), x)
    bf = x.bfloat16()
    assert vocab_top1(bf)[1].tolist() == [700, 1, chunk + 9, 0]


def test_vocab_top1_neg_inf() -> None:
    """Masked logits: -inf entries, whole -inf chunks (before and after the max), one finite entry; a row of
    only -inf gives index 0 (and a NaN logp, as the torch path) without failing."""
    chunk, _, _ = vocab_top1_config(5000)
    x = logits(5, 5000, torch.float32, seed=2)
    x[0, ::3] = NEG_INF
    x[1, : 2 * chunk] = NEG_INF
    x[2, chunk:] = NEG_INF
    x[3] = NEG_INF
    x[3, 4321] = -7.0  # the only finite entry: log p = 0
    x[4] = NEG_INF
    logp, index = vocab_top1(x)
    assert_top1((logp[:4], index[:4]), x[:4])
    assert index[3].item() == 4321 and logp[3].item() == 0.0
    assert index[4].item() == 0 and torch.isnan(logp[4]).item()
    for dtype in (torch.bfloat16, torch.float16):
        assert_top1(tuple(t[:4] for t in vocab_top1(x.to(dtype))), x[:4].to(dtype), name=str(dtype))


def test_vocab_top1_strided_rows() -> None:
    """A column slice (rows of a wider tensor) is read in place; a transpose (last stride > 1) is copied."""
    wide = logits(3, 3001, torch.float32, seed=3)
    x = wide[:, 1:]
    assert x.stride() == (3001, 1)
    assert_top1(vocab_top1(x), x)
    xt = logits(2500, 3, torch.bfloat16, seed=4).t()  # [3, 2500], strides (1, 3)
    assert_top1(vocab_top1(xt), xt)


@settings(max_examples=10 if FULL else 25, deadline=None)
@given(
    R=st.integers(1, 5),
    V=st.integers(1, 5000),
    dtype=st.sampled_from(DTYPES),
    kind=st.sampled_from(["random", "ties", "neg_inf"]),
    seed=st.integers(0, 10_000),
)
def test_vocab_top1_random(R: int, V: int, dtype: torch.dtype, kind: str, seed: int) -> None:
    x = random_rows(R, V, dtype, kind, seed)
    assert_top1(vocab_top1(x), x)


def test_vocab_top1_rejects() -> None:
    x = torch.zeros(2, 5, device=DEVICE)
    with pytest.raises(ValueError, match=r"\[R, V\]"):
        vocab_top1(x[None])
    with pytest.raises(ValueError, match="float32, bfloat16 or float16"):
        vocab_top1(x.double())
    with pytest.raises(ValueError, match="at least one"):
        vocab_top1(x[:, :0])
    logp, index = vocab_top1(torch.zeros(0, 5, device=DEVICE))
    assert logp.shape == index.shape == (0,)


@pytest.mark.parametrize("kernels", ["auto", "triton"])
@pytest.mark.parametrize("V", [40, VOCAB_TOP1_MIN_V, 3000])
def test_top1_logprob_and_argmax_last_are_the_torch_path(V: int, kernels: str) -> None:
    """Any leading dims, and a depth slice as the chain builder takes it. auto on CPU: the torch path itself;
    on CUDA, or with kernels="triton" (the interpreter on CPU): the kernel from VOCAB_TOP1_MIN_V on."""
    options = RuntimeOptions(kernels=kernels)
    x = logits(6, V, torch.float32, seed=V).view(2, 3, V)
    x[1, 2, V // 2] = x[1, 2].max()  # a tie: the lower index wins on both paths
    for t in (x, x[:, :2], x[0, 0], x.bfloat16()):
        best, index = top1_logprob(t, options)
        want_best, want_index = torch.log_softmax(t.float(), dim=-1).max(dim=-1)
        assert best.dtype == torch.float32 and best.shape == index.shape == t.shape[:-1]
        assert_close("top1_logprob", want_best, best, rtol=2e-6, floor=1.0)
        assert torch.equal(index, want_index) and torch.equal(argmax_last(t, options), t.argmax(dim=-1))
    assert index[1, 2].item() == int(x[1, 2].argmax())


def test_vocab_top1_op_compiles() -> None:
    """The custom op (fake impl for tracing, kernel at run time) inside a torch.compile'd function, as in the
    compiled round stages; on CPU `top1_logprob` traces its torch path. CPU: aot_eager; CUDA: inductor."""
    x = logits(3, 2100, torch.float32, seed=5)
    torch.library.opcheck(vocab_top1_op, (x[:, :2000],))

    def f(s: torch.Tensor) -> tuple[torch.Tensor, ...]:
        best, index = top1_logprob(s[None, :, :2000] * 2, DEFAULT_OPTIONS)
        logp, first = vocab_top1_op(s[:, 1:])
        return best + 1, index, argmax_last(s, DEFAULT_OPTIONS), logp, first

    torch._dynamo.reset()
    got = torch.compile(f, backend="inductor" if FULL else "aot_eager", fullgraph=True)(x)
    want = f(x)
    assert_close("compiled top1_logprob", want[0], got[0], rtol=2e-6, floor=1.0)
    assert_close("compiled vocab_top1_op", want[3], got[3], rtol=2e-6, floor=1.0)
    for a, b in zip(got[1:3] + got[4:], want[1:3] + want[4:]):
        assert torch.equal(a, b)
    assert got[1].shape == (1, 3) and torch.equal(got[4], x[:, 1:].argmax(dim=-1))
