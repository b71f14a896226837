"""weaver.kernels.triton.node_attention (one program per batch row and head) vs its torch reference in float64
(`weaver.ops.node_attention.masked_attention`, masked SDPA).

CPU: the kernel runs under TRITON_INTERPRET=1 at small sizes. GPU (`--triton-full`): compiled, at
the Weaver step's sizes (H = 8, hd = 64, w = 4..8 nodes, S up to a few hundred) and past them. Inputs are
laid out as in `WeaverAdapter.step`: q a permuted view of the qkv projection, k/v `buf[layer]` slices of a
[L, B, H, S, D] buffer, the mask a bool [B, w, S] with at least one True a row.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers.triton_env import DEVICE, FULL  # sets TRITON_INTERPRET before triton loads
from hypothesis import given, settings
from hypothesis import strategies as st

from weaver.kernels.node_attention import attend_nodes, node_attention_op
from weaver.kernels.triton.node_attention import node_attention
from weaver.ops.node_attention import masked_attention
from weaver.options import RuntimeOptions

AUTO, TORCH, TRITON = RuntimeOptions(), RuntimeOptions(kernels="torch"), RuntimeOptions(kernels="triton")

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# (B, H, W, S, D)
SHAPES = [(1, 1, 1, 1, 16), (1, 2, 4, 20, 64), (2, 3, 8, 150, 64), (1, 2, 5, 300, 40), (2, 1, 3, 65, 128)]
SHAPES += [(1, 1, 20, 70, 128)]  # BLOCK_W 32: the smaller S tiles (node_attention_config)
if FULL:
    SHAPES += [(1, 8, 4, 300, 64), (4, 8, 8, 300, 64), (2, 8, 16, 1000, 64), (3, 4, 64, 777, 256), (1, 8, 7, 33, 80)]


def tol(dtype: torch.dtype) -> dict:
    """fp32: exact FMAs (exp2 and summation order only); 16-bit: rounded operands, probabilities, output."""
    return dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-2, rtol=1e-2)


def make_inputs(B: int, H: int, W: int, S: int, D: int, dtype: torch.dtype, seed: int, density: float = 0.4,
                layers: int = 2):  # fmt: skip
    """q a permuted view of a [B, W, 3 H D] projection; k, v `buf[layer]` of [L, B, H, S, D] buffers (k, v
    from different buffers, the v buffer wider along S); mask [B, W, S] a slice of a wider bool tensor, at
    least one True a row (a random column forced)."""
    gen = torch.Generator().manual_seed(seed)
    qkv = torch.randn(B, W, 3 * H * D, generator=gen).to(dtype)
    q = qkv.view(B, W, 3, H, D).permute(2, 0, 3, 1, 4)[0]  # [B, H, W, D], strides (W 3HD, D, 3HD, 1)
    k_buf = torch.randn(layers, B, H, S, D, generator=gen).to(dtype)
    v_buf = torch.randn(layers, B, H, S + 5, D, generator=gen).to(dtype)
    k, v = k_buf[layers - 1], v_buf[layers - 1][:, :, :S]
    wide = torch.rand(B, W + 1, S + 3, generator=gen) < density
    must = torch.randint(0, S, (B, W), generator=gen)
    wide[torch.arange(B)[:, None], torch.arange(W)[None, :], must] = True
    mask = wide[:, :W, :S]
    return tuple(t.to(DEVICE) for t in (q, k, v, mask))


def sdpa64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return masked_attention(q.double(), k.double(), v.double(), mask)


def check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, **launch) -> None:
    out = node_attention(q, k, v, mask, **launch)
    assert out.shape == q.shape and out.dtype == q.dtype and out.transpose(1, 2).is_contiguous()  # token-major
    torch.testing.assert_close(out.double().cpu(), sdpa64(q, k, v, mask).cpu(), **tol(q.dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("B,H,W,S,D", SHAPES, ids=lambda v: str(v))
def test_node_attention_matches_sdpa(B: int, H: int, W: int, S: int, D: int, dtype: torch.dtype) -> None:
    check(*make_inputs(B, H, W, S, D, dtype, seed=B * 1000 + H * 100 + W * 10 + S + D))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_node_attention_hidden_tiles(dtype: torch.dtype) -> None:
    """Whole tiles hidden for some rows (the online softmax starts late or meets nothing after its start):
    a row seeing only its last entry, one seeing only the first, one seeing only a middle tile; small
    tiles so that S spans several of them; contiguous inputs and an expanded (stride-0) mask too."""
    B, H, W, S, D = 2, 2, 4, 100, 32
    q, k, v, mask = make_inputs(B, H, W, S, D, dtype, seed=7)
    mask = torch.zeros_like(mask)
    mask[:, 0, S - 1] = True
    mask[:, 1, 0] = True
    mask[:, 2, 40:50] = True
    mask[:, 3] = True
    for block_s in (16, 32, None):
        check(q, k, v, mask, block_s=block_s)
    check(q.contiguous(), k.contiguous(), v.contiguous(), mask[:, :1].expand(B, W, S))


@settings(max_examples=12 if FULL else 25, deadline=None)
@given(
    B=st.integers(1, 4 if FULL else 2),
    H=st.integers(1, 8 if FULL else 2),
    W=st.integers(1, 8),
    S=st.integers(1, 1000 if FULL else 300),
    D=st.sampled_from([16, 64, 48] + ([128, 256] if FULL else [])),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    density=st.floats(0.0, 1.0),
    seed=st.integers(0, 10_000),
)
def test_node_attention_random(B: int, H: int, W: int, S: int, D: int, dtype: torch.dtype, density: float,
                               seed: int) -> None:  # fmt: skip
    check(*make_inputs(B, H, W, S, D, dtype, seed, density))


def test_node_attention_strided_last_dim() -> None:
    """A last dim of stride > 1 is copied first; the result is the same."""
    q, k, v, mask = make_inputs(1, 2, 3, 40, 16, torch.float32, seed=3)
    qt = q.transpose(2, 3).contiguous().transpose(2, 3)  # same values, last-dim stride W
    kt = k.transpose(2, 3).contiguous().transpose(2, 3)
    assert qt.stride(3) != 1 and kt.stride(3) != 1
    check(qt, kt, v, mask)


def test_node_attention_rejects() -> None:
    q, k, v, mask = make_inputs(1, 2, 3, 10, 16, torch.float32, seed=4)
    with pytest.raises(ValueError, match="mask must be bool"):
        node_attention(q, k, v, mask.float())
    with pytest.raises(ValueError, match="mask must be bool"):
        node_attention(q, k, v, mask[:, :2])
    with pytest.raises(ValueError, match="k and v must be"):
        node_attention(q, k, v[:, :, :5], mask)
    with pytest.raises(ValueError, match="share one of"):
        node_attention(q, k.half(), v, mask)
    with pytest.raises(ValueError, match="share one of"):
        node_attention(q.double(), k.double(), v.double(), mask)
    with pytest.raises(ValueError, match="head dim"):
        z = torch.zeros(1, 1, 1, 300, device=DEVICE)
        node_attention(z, z, z, torch.ones(1, 1, 1, dtype=torch.bool, device=DEVICE))
    with pytest.raises(ValueError, match="block_s"):
        node_attention(q, k, v, mask, block_s=24)
    out = node_attention(q[:, :, :0], k, v, mask[:, :0])
    assert out.shape == (1, 2, 0, 16)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_attend_nodes_is_the_reference_or_the_kernel(dtype: torch.dtype) -> None:
    """kernels="torch" (and "auto" on CPU): the reference itself; "triton" (and "auto" on CUDA): the kernel,
    within its tolerance of the float64 reference, output token-major."""
    q, k, v, mask = make_inputs(2, 3, 6, 90, 64, dtype, seed=5)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])
    assert torch.equal(attend_nodes(q, k, v, mask, TORCH), ref)
    for options in ([AUTO, TRITON] if FULL else [TRITON]):
        got = attend_nodes(q, k, v, mask, options)
        assert got.transpose(1, 2).is_contiguous()
        torch.testing.assert_close(got.double().cpu(), sdpa64(q, k, v, mask).cpu(), **tol(dtype))
    if not FULL:
        assert torch.equal(attend_nodes(q, k, v, mask, AUTO), ref)
    # outside the kernel's range (float64, W > 64): the reference whatever the options
    q, k, v, mask = make_inputs(1, 1, 65, 20, 16, torch.float64, seed=6)
    for options in (AUTO, TRITON):
        assert torch.equal(attend_nodes(q, k, v, mask, options), masked_attention(q, k, v, mask))


def test_node_attention_op_compiles() -> None:
    """The custom op (fake impl for tracing, kernel at run time) inside a torch.compile'd function, as in
    the compiled round stages. CPU: aot_eager (inductor's C++ build takes ~25 s here); CUDA: inductor."""
    dtype = torch.float32
    q, k, v, mask = make_inputs(1, 2, 4, 37, 16, dtype, seed=8)
    torch.library.opcheck(node_attention_op, (q, k, v, mask))

    def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        a = attend_nodes(q * 2, k, v, mask, AUTO)
        b = node_attention_op(q, k, v, mask)
        return a + b

    torch._dynamo.reset()
    got = torch.compile(f, backend="inductor" if FULL else "aot_eager", fullgraph=True)(q, k, v, mask)
    want = sdpa64(q * 2, k, v, mask) + sdpa64(q, k, v, mask)
    torch.testing.assert_close(got.double().cpu(), want.cpu(), atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("heads, kv_heads", [(6, 2), (9, 3), (4, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_node_attention_grouped_query_heads(heads: int, kv_heads: int, dtype: torch.dtype) -> None:
    """Grouped-query attention (the drafter's block: 9 query heads on 3 kv heads): query head h reads kv head
    h // (H / Hkv); equals SDPA with enable_gqa."""
    q, _, _, mask = make_inputs(2, heads, 16 if FULL else 5, 70, 64 if FULL else 16, dtype, seed=heads)
    _, k, v, _ = make_inputs(2, kv_heads, 16 if FULL else 5, 70, 64 if FULL else 16, dtype, seed=kv_heads + 1)
    out = node_attention(q, k, v, mask)
    want = sdpa64(q, k, v, mask)  # grouped-query heads
    torch.testing.assert_close(out.double().cpu(), want.cpu(), **tol(dtype))
    with pytest.raises(ValueError, match="Hkv"):
        node_attention(q, k[:, :1].expand(2, 4, 70, k.shape[3])[:, : heads - 1 if heads > 4 else 3], v, mask)
