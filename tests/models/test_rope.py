"""`weaver.models.rope.apply_rope` / `rotate` against the textbook rotate-half written with torch.cat (HF's form).

They must give the same values bit for bit (full and partial rotation, fp32 and bf16), and compiled they must stay
one pointwise pass: inductor realises a torch.cat into a buffer of its own (on CUDA, extra copy kernels), which is
why they are written without one.
"""

from __future__ import annotations

import pytest
import torch
from helpers.inductor import compiled_call

from weaver.models.rope import apply_rope


def textbook(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first rot dims of x [B, H, T, D] with rotate_half = cat(-x2, x1); pass the rest (a cat)."""
    rot = cos.shape[-1]
    cos, sin = cos[:, None], sin[:, None]
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    rotated = torch.cat((-x_rot[..., rot // 2 :], x_rot[..., : rot // 2]), dim=-1)
    return torch.cat((x_rot * cos + rotated * sin, x_pass), dim=-1)


@pytest.mark.parametrize("rot", [64, 16, 2], ids=["full", "quarter", "two-dims"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_apply_rope_equals_the_textbook_form(rot: int, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(rot)
    x = torch.randn(2, 3, 5, 64, generator=gen).to(dtype)
    cos, sin = (torch.randn(2, 5, rot, generator=gen).to(dtype) for _ in range(2))
    assert torch.equal(apply_rope(x, cos, sin), textbook(x, cos, sin))


@pytest.mark.parametrize("rot", [64, 16], ids=["full", "quarter"])
@torch.no_grad()
def test_compiled_rope_writes_one_buffer(rot: int) -> None:
    """Compiled (then scaled, so the rope is not the graph's output alone), one kernel and one buffer: the
    textbook form needs more (its cats)."""
    x = torch.randn(1, 4, 17, 64)
    cos, sin = torch.randn(1, 17, rot), torch.randn(1, 17, rot)

    def count(fn) -> tuple[int, int]:
        torch._dynamo.reset()
        _, call = compiled_call(torch.compile(lambda *a: fn(*a) * 2.0, fullgraph=True), x, cos, sin)
        return call.count("empty_strided"), call.count("cpp_fused")

    assert count(apply_rope) == (1, 1)
    assert count(textbook) != (1, 1)  # the test can tell the two forms apart
