"""weaver.kernels.triton.vocab_topk (two-stage top-k log-probabilities) vs a float64 stable sort minus logsumexp.

CPU: the kernels run under TRITON_INTERPRET=1 at small sizes. GPU (`--triton-full`): compiled, at the
drafter's vocabulary (49152) and the ddtree builder's row counts and k. Indices exactly (ties: the lowest
index first, as a stable descending sort), log-probabilities to fp32 accuracy.
"""

from __future__ import annotations

import pytest
import torch
from helpers.triton_env import DEVICE, FULL  # sets TRITON_INTERPRET before triton loads
from helpers.vocab import NEG_INF, logits, random_rows
from hypothesis import given, settings
from hypothesis import strategies as st

from weaver.kernels.triton.vocab_topk import vocab_topk, vocab_topk_config
from weaver.kernels.vocab_topk import VOCAB_TOPK_MAX_K, VOCAB_TOPK_MIN_V, top_logprobs
from weaver.options import DEFAULT_OPTIONS, RuntimeOptions
from weaver.testing import assert_close

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
CASES = [(1, 1, 1), (2, 7, 3), (3, 128, 16), (1, 2048, 15), (2, 2049, 8), (4, 5000, 16), (2, 5000, 64)]
if FULL:
    CASES += [(r, 49152, k) for r in (15, 16, 64) for k in (15, 16, 64)] + [(16, 151936, 16)]


def reference(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 top-k log-softmax by a stable descending sort (ties: the lowest index first)."""
    x64 = x.double()
    values, index = torch.sort(x64, dim=-1, descending=True, stable=True)
    return values[..., :k] - torch.logsumexp(x64, dim=-1, keepdim=True), index[..., :k]


def assert_topk(got: tuple[torch.Tensor, torch.Tensor], x: torch.Tensor, k: int, name: str = "logp") -> None:
    (logp, index), (ref_logp, ref_index) = got, reference(x, k)
    assert logp.dtype == torch.float32 and index.dtype == torch.int64
    assert logp.shape == index.shape == (*x.shape[:-1], k)
    assert torch.equal(index.cpu(), ref_index.cpu()), f"{name}: index {index.tolist()} != {ref_index.tolist()}"
    finite = ref_logp.isfinite()
    assert torch.equal(finite.cpu(), logp.isfinite().cpu()), f"{name}: -inf / NaN entries differ"
    assert_close(name, ref_logp[finite], logp[finite], rtol=2e-6 if x.shape[-1] <= 5000 else 1e-5, floor=1.0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("R,V,k", CASES, ids=lambda v: str(v))
def test_vocab_topk_matches_a_stable_sort(R: int, V: int, k: int, dtype: torch.dtype) -> None:
    x = logits(R, V, dtype, seed=R * 100_000 + V + k)
    assert_topk(vocab_topk(x, k), x, k)


def test_vocab_topk_ties_take_the_lowest_index() -> None:
    """Equal values in one chunk, across chunks (the later chunk holding the lower index's twin), in the partial
    last chunk, and a whole row of ties."""
    chunk, C, _, _ = vocab_topk_config(5000, 4)
    assert C >= 3  # the ties below cross chunks
    x = logits(4, 5000, torch.float32, seed=1)
    x[0, [700, 900, 20]] = 50.0
    x[1, [chunk + 5, 1, 2 * chunk + 1]] = 50.0
    x[2, [4999, chunk * 2 + 3, chunk + 9]] = 50.0
    x[3] = 0.0
    logp, index = vocab_topk(x, 4)
    assert index[:, :3].tolist() == [[20, 700, 900], [1, chunk + 5, 2 * chunk + 1], [chunk + 9, 2 * chunk + 3, 4999],
                                     [0, 1, 2]]  # fmt: skip
    assert_topk((logp, index), x, 4)
    assert_topk(vocab_topk(x.bfloat16(), 4), x.bfloat16(), 4, name="bf16")


def test_vocab_topk_neg_inf() -> None:
    """Masked logits: -inf entries, whole -inf chunks, fewer finite entries than k (the rest of the top k are the
    lowest -inf indices, never a partial chunk's empty slots), and a row of only -inf (NaN log-probs, as the
    torch expression) without failing."""
    chunk, _, _, _ = vocab_topk_config(5000, 8)
    x = logits(5, 5000, torch.float32, seed=2)
    x[0, ::3] = NEG_INF
    x[1, : 2 * chunk] = NEG_INF
    x[2, :] = NEG_INF
    x[2, [4321, 4999, 17]] = torch.tensor([-7.0, -8.0, -9.0], device=DEVICE)  # three finite entries, k = 8
    x[3, chunk:] = NEG_INF
    x[4] = NEG_INF
    logp, index = vocab_topk(x, 8)
    assert_topk((logp[:4], index[:4]), x[:4], 8)
    assert index[2].tolist() == [4321, 4999, 17, 0, 1, 2, 3, 4]
    assert torch.isnan(logp[4]).all().item() and index[4].tolist() == list(range(8))


def test_vocab_topk_strided_rows() -> None:
    """A column slice (rows of a wider tensor) is read in place; a transpose (last stride > 1) is copied."""
    wide = logits(3, 3001, torch.float32, seed=3)
    x = wide[:, 1:]
    assert x.stride() == (3001, 1)
    assert_topk(vocab_topk(x, 5), x, 5)
    xt = logits(2500, 3, torch.bfloat16, seed=4).t()
    assert_topk(vocab_topk(xt, 5), xt, 5)


@settings(max_examples=10 if FULL else 20, deadline=None)
@given(
    R=st.integers(1, 4),
    V=st.integers(1, 5000),
    k=st.integers(1, VOCAB_TOPK_MAX_K),
    dtype=st.sampled_from(DTYPES),
    kind=st.sampled_from(["random", "ties", "neg_inf"]),
    seed=st.integers(0, 10_000),
)
def test_vocab_topk_random(R: int, V: int, k: int, dtype: torch.dtype, kind: str, seed: int) -> None:
    k = min(k, V)
    x = random_rows(R, V, dtype, kind, seed)
    assert_topk(vocab_topk(x, k), x, k)


def test_vocab_topk_rejects() -> None:
    x = torch.zeros(2, 5, device=DEVICE)
    with pytest.raises(ValueError, match=r"\[R, V\]"):
        vocab_topk(x[None], 1)
    with pytest.raises(ValueError, match="float32, bfloat16 or float16"):
        vocab_topk(x.double(), 1)
    for k in (0, 6):
        with pytest.raises(ValueError, match="1 <= k"):
            vocab_topk(x, k)
    logp, index = vocab_topk(torch.zeros(0, 5, device=DEVICE), 2)
    assert logp.shape == index.shape == (0, 2)


@pytest.mark.parametrize("kernels", ["auto", "triton"])
@pytest.mark.parametrize("V", [40, VOCAB_TOPK_MIN_V, 3000])
def test_top_logprobs_is_the_torch_expression(V: int, kernels: str) -> None:
    """Any leading dims ([B, D, V] as the ddtree builder passes). auto on CPU: the torch expression itself; on
    CUDA, or with kernels="triton" (the interpreter on CPU): the kernel from VOCAB_TOPK_MIN_V on, k <= 64."""
    options = RuntimeOptions(kernels=kernels)
    x = logits(6, V, torch.float32, seed=V).view(2, 3, V)
    for t, k in ((x, 16), (x[:, :2], 5), (x.bfloat16(), 16), (x, min(V, VOCAB_TOPK_MAX_K + 1))):
        logp, index = top_logprobs(t, k, options)
        want_logp, want_index = top_logprobs(t.cpu(), k, DEFAULT_OPTIONS)  # CPU tensors: always torch
        assert logp.shape == index.shape == (*t.shape[:-1], k)
        if t.dtype == torch.float32:  # distinct random values: one order
            assert torch.equal(index.cpu(), want_index)
        else:  # bf16 has ties, which torch.topk orders its own way: the same values at the chosen indices
            assert torch.equal(t.gather(-1, index).cpu(), t.cpu().gather(-1, want_index))
        assert_close(f"V={V} k={k}", want_logp, logp.cpu(), rtol=2e-6, floor=1.0)
