"""weaver.ops.dispatch.launch: the custom op while torch.compile traces, the launcher itself in eager code."""

from __future__ import annotations

import torch
from triton_env import DEVICE  # sets TRITON_INTERPRET before triton loads

from weaver.ops.dispatch import launch
from weaver.ops.topk import small_topk_op


def test_launch_eager_calls_the_launcher() -> None:
    def op(*_args):
        raise AssertionError("the op is for traced code")

    assert launch(op, "math", "sqrt", 16.0) == 4.0


def test_launch_compiled_calls_the_op() -> None:
    x = torch.randn(3, 9, generator=torch.Generator().manual_seed(0)).to(DEVICE)
    calls = []

    def f(t: torch.Tensor):
        calls.append(torch.compiler.is_compiling())
        return launch(small_topk_op, "weaver.ops.triton.topk", "no_such_launcher", t, 2)  # traced: never looked up

    torch._dynamo.reset()
    values, indices = torch.compile(f, backend="aot_eager", fullgraph=True)(x)
    assert calls == [True]
    want = torch.topk(x, 2, dim=1)
    assert torch.equal(values, want.values) and torch.equal(indices, want.indices)
