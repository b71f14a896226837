"""weaver.kernels.dispatch.launch: the custom op while torch.compile traces, the launcher itself in eager code."""

from __future__ import annotations

import os
import subprocess
import sys

import torch
from helpers.triton_env import DEVICE  # sets TRITON_INTERPRET before triton loads

from weaver.kernels.dispatch import launch
from weaver.kernels.topk import small_topk_op


def test_launch_eager_calls_the_launcher() -> None:
    def op(*_args):
        raise AssertionError("the op is for traced code")

    assert launch(op, "math", "sqrt", 16.0) == 4.0


def test_launch_compiled_calls_the_op() -> None:
    x = torch.randn(3, 9, generator=torch.Generator().manual_seed(0)).to(DEVICE)
    calls = []

    def f(t: torch.Tensor):
        calls.append(torch.compiler.is_compiling())
        return launch(small_topk_op, "weaver.kernels.triton.topk", "no_such_launcher", t, 2)  # traced: never looked up

    torch._dynamo.reset()
    values, indices = torch.compile(f, backend="aot_eager", fullgraph=True)(x)
    assert calls == [True]
    want = torch.topk(x, 2, dim=1)
    assert torch.equal(values, want.values) and torch.equal(indices, want.indices)


def test_kernels_run_after_dispatch_imported_torch_dynamo_first() -> None:
    """weaver.kernels.dispatch's torch.compile decorator imports torch._dynamo, which imports triton: the
    interpreter switch (CPU) must already be set by then, or every kernel after it fails to launch."""
    code = (
        "import torch, weaver.kernels.dispatch; from weaver.kernels.triton.topk import small_topk; "
        "x = torch.randn(2, 9, device='cuda' if torch.cuda.is_available() else 'cpu'); "
        "v, i = small_topk(x, 3); assert torch.equal(v, torch.topk(x, 3).values)"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
