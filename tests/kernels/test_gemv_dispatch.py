"""One-row projections of large weights through weaver's GEMV (`weaver.kernels.gemv`) against F.linear."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers.triton_env import DEVICE, FULL  # sets TRITON_INTERPRET before triton loads

from weaver.kernels import gemv
from weaver.kernels.triton.decode import gemv_config
from weaver.kernels.triton.gemv_tiles import gemv_long_rows
from weaver.kernels.triton.gemv_tma import TmaTiles, gemv_tma
from weaver.models.norm import RMSNorm
from weaver.options import RuntimeOptions
from weaver.testing import assert_close

TRITON, TORCH = RuntimeOptions(kernels="triton"), RuntimeOptions(kernels="torch")
# interpreted: narrow weights at the long-tile K and past it; compiled: the Qwen3.6-27B GDN out_proj, a SwiGLU
# block and the down projection (K = 17,408: gemv_tiles; with swiglu=True it stays on F.linear)
SHAPES = [(5120, 6144), (2 * 8704, 5120), (5120, 17408)] if FULL else [(48, 4096), (10, 8192 + 1024)]


def _weights(n: int, k: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 1, k, generator=gen).to(DEVICE, torch.bfloat16)
    w = (torch.randn(n, k, generator=gen) * k**-0.5).to(DEVICE, torch.bfloat16)
    return x, w


def _reference(x: torch.Tensor, w: torch.Tensor, swiglu: bool) -> torch.Tensor:
    """F.linear(x, w), or silu(gate) * up of its [gate; up] halves, in x's dtype."""
    y = F.linear(x, w)
    if not swiglu:
        return y
    gate, up = y.chunk(2, dim=-1)
    return F.silu(gate) * up


@pytest.mark.parametrize("route", ["triton", "tma"])
@pytest.mark.parametrize("swiglu", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_gemv_linear_matches_f_linear(shape, swiglu, route):
    x, w = _weights(*shape)
    got = gemv.linear(x, w, TRITON.replace(gemv=route), swiglu=swiglu, min_bytes=0)
    want = _reference(x.float(), w.float(), swiglu)
    assert got.shape == want.shape and got.dtype == torch.bfloat16
    assert_close("gemv", want, got, 2e-2)


@pytest.mark.parametrize(
    "case",
    ["two rows", "short K", "long K, no tiles", "long K, swiglu", "fp32", "kernels=torch", "small weight", "gemv=blas"],
)
def test_gemv_linear_keeps_f_linear_outside_its_range(case, monkeypatch):
    """Outside one row of a large 16-bit weight with gemv.GEMV_MIN_K <= K <= GEMV_MAX_K, or longer rows that
    `long_row_tiles` covers (no SwiGLU), `linear` is F.linear exactly (the kernel is never reached: it raises)."""
    k = {"short K": gemv.GEMV_MIN_K // 2, "long K, no tiles": gemv.GEMV_MAX_K + 960,  # 512 + 256 + 128 + 64
         "long K, swiglu": gemv.GEMV_MAX_K + 1024}.get(case, gemv.GEMV_MIN_K)  # fmt: skip
    x, w = _weights(16, k)
    if case == "two rows":
        x = torch.cat([x, x], dim=1)
    if case == "fp32":
        x, w = x.float(), w.float()
    options = {"kernels=torch": TORCH, "gemv=blas": TRITON.replace(gemv="blas")}.get(case, TRITON)
    min_bytes = gemv.GEMV_MIN_BYTES if case == "small weight" else 0
    swiglu = case == "long K, swiglu"

    def no_kernel(*args):
        raise AssertionError("the GEMV kernel ran")

    monkeypatch.setattr(gemv, "launch", no_kernel)
    got = gemv.linear(x, w, options, swiglu=swiglu, min_bytes=min_bytes)
    assert torch.equal(got, _reference(x, w, swiglu))


def test_gemv_linear_takes_the_long_row_kernel_past_the_tile(monkeypatch):
    """A row longer than GEMV_MAX_K that long_row_tiles covers reaches the kernel (gemv_tiles' launcher)."""
    calls = []
    real = gemv.launch
    monkeypatch.setattr(gemv, "launch", lambda *args: calls.append(args[1:3]) or real(*args))
    x, w = _weights(10, gemv.GEMV_MAX_K + 1024)
    assert_close("long rows", F.linear(x.float(), w.float()), gemv.linear(x, w, TRITON, min_bytes=0), 2e-2)
    assert calls == [("weaver.kernels.triton.gemv_tiles", "gemv")]


@pytest.mark.parametrize(
    ("k", "want"),
    [(17408, (2, (1024,))), (16384, (2, ())), (12288, (1, (4096,))), (14336, (1, (4096, 2048))),
     (8192 + 960, None), (8192 + 32, None), (1024, (0, (1024,))), (0, None)],
)  # fmt: skip
def test_long_row_tiles_cover_k_exactly(k, want):
    got = gemv.long_row_tiles(k)
    assert got == want
    if got is not None:
        assert got[0] * gemv.GEMV_TILE_K + sum(got[1]) == k


@pytest.mark.parametrize(("n", "k", "block_n"), [(5, 3 * 64 + 32 + 16 + 8, 2), (7, 64, 4), (3, 8, 1)])
def test_gemv_long_rows_matches_f_linear(n, k, block_n):
    """Small tiles and pieces (block_k 64, pieces down to 8): full tiles, one to three tail pieces, none; rows
    past N in the last program (block_n > 1) are read but never stored."""
    x, w = _weights(n, k, seed=k)
    got = gemv_long_rows(x.view(1, -1), w, block_k=64, min_piece=8, block_n=block_n, num_warps=1)
    assert_close("gemv_long_rows", F.linear(x.view(1, -1).float(), w.float()), got, 2e-2)


def test_gemv_long_rows_rejects_uncovered_rows():
    x, w = _weights(4, 64 + 8 + 4 + 2 + 1)
    with pytest.raises(ValueError, match="power-of-two pieces"):
        gemv_long_rows(x.view(1, -1), w, block_k=64, min_piece=1)


def test_gemv_linear_takes_the_tma_kernel_when_asked(monkeypatch):
    """RuntimeOptions.gemv="tma" sends one row of a large weight to gemv_tma, SwiGLU included."""
    from weaver.kernels.triton import gemv_tiles

    calls = []
    real = gemv_tiles.gemv_tma
    monkeypatch.setattr(gemv_tiles, "gemv_tma", lambda x, w, swiglu, **kw: calls.append(swiglu) or real(x, w, swiglu,
                                                                                                   **kw))  # fmt: skip
    x, w = _weights(16, gemv.GEMV_MIN_K)
    for swiglu in (False, True):
        gemv.linear(x, w, TRITON.replace(gemv="tma"), swiglu=swiglu, min_bytes=0)
    assert calls == [False, True]


@pytest.mark.parametrize("route", ["triton", "tma", "blas"])
@pytest.mark.parametrize("swiglu", [False, True])
def test_gemv_linear_projects_the_norm_of_x_plus_a_residual(route, swiglu):
    """linear(norm=, residual=): the projection of norm(x), plus residual, on every route; the TMA GEMV takes the
    (offset) norm and the add itself, the others project the normed row and add after (exactly as the layer did)."""
    x, w = _weights(16, gemv.GEMV_MIN_K)
    residual = torch.randn(1, 1, 8 if swiglu else 16).to(DEVICE, torch.bfloat16)
    norm = RMSNorm(gemv.GEMV_MIN_K, offset=True).to(DEVICE, torch.bfloat16)
    with torch.no_grad():
        norm.weight.normal_(0.0, 0.1)
    options = TRITON.replace(gemv=route)
    got = gemv.linear(x, w, options, swiglu=swiglu, min_bytes=0, norm=norm, residual=residual)
    with torch.no_grad():
        normed = norm(x)
        if route == "tma":
            want = _reference(normed.float(), w.float(), swiglu)
            assert_close("linear(norm=, residual=), tma", want + residual.float(), got, 2e-2)
        else:
            assert torch.equal(got, gemv.linear(normed, w, options, swiglu=swiglu, min_bytes=0) + residual)


def test_a_hybrid_decode_step_with_the_norms_in_the_tma_gemvs(monkeypatch):
    """gemv="tma" hands each decoder layer's norms to the projections after them and its residual adds to the
    projections before them (`norm_in_projection`): with every weight of a tiny bf16 Qwen3.5 taken as large, its
    one-row decode step runs its in-projections, q/k/v and gate_up through gemv_tma with the norm inside, out_proj /
    o_proj and down with the add inside; its logits match the default route's (bf16 rounding apart)."""
    import weaver

    monkeypatch.setattr(gemv, "GEMV_MIN_BYTES", 0)
    monkeypatch.setattr(gemv, "GEMV_MIN_K", 8)
    from weaver.kernels.triton import gemv_tiles

    normed_calls = []
    real = gemv_tiles.gemv_tma
    monkeypatch.setattr(gemv_tiles, "gemv_tma", lambda *a, **kw: normed_calls.append(
        (kw["norm_weight"] is not None, kw["residual"] is not None)) or real(*a, **kw))  # fmt: skip
    logits = {}
    for route in ("triton", "tma"):
        llm = weaver.LLM.from_config("tiny-qwen3_5", seed=3, dtype="bf16", options=TRITON.replace(gemv=route))
        cache, device = llm.model.allocate_cache(1, 16), llm.model.device  # cuda on a GPU
        llm.model(torch.tensor([[5, 17, 42]], device=device), cache)
        logits[route] = llm.model(torch.tensor([[8]], device=device), cache).logits.float()
    layers = llm.model.config.num_hidden_layers
    assert normed_calls.count((True, False)) == 2 * layers  # each layer's mixer in-projection and gate_up: the norm
    assert normed_calls.count((False, True)) == 2 * layers  # each layer's out_proj / o_proj and down: the add
    assert_close("tma decode step", logits["triton"], logits["tma"], 5e-2)


def test_norms_inside_the_projections_leave_a_compiled_verify_fused_as_before():
    """A multi-row forward (a verify, a prefill) runs F.linear on every route, so the layers that hand their norms
    and residual adds to the projections (`norm_in_projection`, the TMA route: auto's on an H100) must compile to
    the same inductor kernels, with the same logits, as the layers that run them themselves."""
    from torch._inductor import metrics

    import weaver

    counts, logits = {}, {}
    for route in ("triton", "tma"):
        torch._dynamo.reset()
        metrics.reset()
        llm = weaver.LLM.from_config("tiny-qwen3_5", seed=3, dtype="fp32", options=TORCH.replace(gemv=route))
        cache = llm.model.allocate_cache(1, 16)
        step = torch.compile(lambda tokens, model=llm.model, cache=cache: model(tokens, cache).logits)
        logits[route] = step(torch.tensor([[5, 17, 42, 8, 9, 10, 11, 12]]))
        counts[route] = metrics.generated_kernel_count
    torch._dynamo.reset()
    assert counts["triton"] == counts["tma"] > 0
    assert torch.equal(logits["triton"], logits["tma"])


# interpreted: rows past N in the last program, a K that ends mid-tile (TMA reads zeros past both); compiled: the
# 27B N = 5,120 shapes and a SwiGLU block, at the default tiles
TMA_CASES = ([((5120, 6144), TmaTiles()), ((5120, 17408), TmaTiles(16, 128, 8)), ((2 * 8704, 5120), TmaTiles())]
             if FULL else [((13, 200), TmaTiles(8, 64, 2, 1)), ((16, 128), TmaTiles(4, 32, 3, 1))])  # fmt: skip


@pytest.mark.parametrize("swiglu", [False, True])
@pytest.mark.parametrize(("shape", "tiles"), TMA_CASES)
def test_gemv_tma_matches_f_linear(shape, tiles, swiglu):
    n, k = shape
    x, w = _weights(2 * n if swiglu else n, k, seed=n + k)
    got = gemv_tma(x.view(1, -1), w, swiglu=swiglu, tiles=tiles)
    want = _reference(x.view(1, -1).float(), w.float(), swiglu)
    assert got.shape == want.shape and got.dtype == torch.bfloat16
    assert_close("gemv_tma", want, got, 2e-2)


@pytest.mark.parametrize("swiglu", [False, True])
@pytest.mark.parametrize(("shape", "tiles"), TMA_CASES)
def test_gemv_tma_with_a_norm_and_a_residual_matches_the_model_norm_then_f_linear(shape, tiles, swiglu):
    """norm_weight: the projection of Qwen3.5's offset RMSNorm of x (statistics from the kernel's own x tiles);
    residual: added in the epilogue."""
    n, k = shape
    x, w = _weights(2 * n if swiglu else n, k, seed=n + k + 1)
    norm = RMSNorm(k, offset=True).to(DEVICE)
    with torch.no_grad():
        norm.weight.normal_(0.0, 0.1)
    residual = torch.randn(1, n).to(DEVICE, torch.bfloat16)
    got = gemv_tma(x.view(1, -1), w, swiglu=swiglu, tiles=tiles, norm_weight=norm.weight, eps=norm.eps,
                   residual=residual)  # fmt: skip
    with torch.no_grad():
        want = _reference(norm(x.view(1, -1)).float(), w.float(), swiglu)
    assert_close("gemv_tma + norm + residual", want + residual.float(), got, 2e-2)


@pytest.mark.parametrize("case", ["K not a multiple of 8", "fp32", "two rows", "odd N with swiglu"])
def test_gemv_tma_rejects_what_tma_cannot_read(case):
    x, w = _weights(7 if case == "odd N with swiglu" else 8, 36 if case == "K not a multiple of 8" else 64)
    x = x.view(1, -1)
    if case == "fp32":
        x, w = x.float(), w.float()
    if case == "two rows":
        x = torch.cat([x, x])
    with pytest.raises(ValueError, match="gemv_tma needs|swiglu needs"):
        gemv_tma(x, w, swiglu=case == "odd N with swiglu")


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


@pytest.mark.parametrize("shape", SHAPES)
def test_gemv_op_passes_opcheck(shape):
    x, w = _weights(*shape)
    torch.library.opcheck(gemv.gemv_op, (x.view(1, -1), w, False, False, None, 0.0, None))


@pytest.mark.parametrize(
    ("choice", "name", "path"),
    [("auto", "NVIDIA H200", "blas"), ("auto", "NVIDIA H100 80GB HBM3", "tma"), ("auto", "NVIDIA A100-SXM4-80GB",
     "triton"), ("triton", "NVIDIA H200", "triton"), ("blas", "NVIDIA H100 80GB HBM3", "blas"),
     ("tma", "NVIDIA H200", "tma")],
)  # fmt: skip
def test_route_follows_the_option_then_the_gpu(choice, name, path, monkeypatch):
    """RuntimeOptions.gemv names the route; auto asks the GPU's name (BLAS where GEMV_BLAS_GPUS says it reads
    faster, gemv_tma where GEMV_TMA_GPUS says it does, else the Triton GEMV); under auto a CPU tensor takes neither
    BLAS nor the layers with their norms inside the projections."""
    gemv._AUTO_ROUTE.clear()
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    try:
        assert gemv.route(RuntimeOptions(gemv=choice), cuda) == path
        assert gemv.route(RuntimeOptions(gemv=choice), cpu) == ("triton" if choice == "auto" else choice)
        assert gemv.norm_in_projection(RuntimeOptions(gemv=choice), cuda) is (path == "tma")
        assert gemv.norm_in_projection(RuntimeOptions(gemv=choice), cpu) is (choice == "tma")
    finally:
        gemv._AUTO_ROUTE.clear()


def test_the_route_is_decided_outside_a_compiled_graph(monkeypatch):
    """A compiled step asks the GPU's name at trace time, eagerly (`assume_constant_result`): a name lookup dynamo
    could not trace (here: a graph break) neither breaks a fullgraph compile nor lands in the graph."""
    gemv._AUTO_ROUTE.clear()

    def name(device=None):
        torch._dynamo.graph_break()
        return "NVIDIA H200"

    monkeypatch.setattr(torch.cuda, "get_device_name", name)
    try:
        step = torch.compile(lambda x: x * 2 if gemv.route(RuntimeOptions(), torch.device("cuda", 0)) == "blas" else x,
                             fullgraph=True, backend="eager")  # fmt: skip
        assert torch.equal(step(torch.ones(3)), torch.full((3,), 2.0))
    finally:
        gemv._AUTO_ROUTE.clear()
