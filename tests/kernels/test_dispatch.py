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


def test_importing_sets_no_interpreter_switch_and_cpu_kernels_say_what_they_need() -> None:
    """Importing weaver sets no environment variable: on a CPU a kernel asked to run without TRITON_INTERPRET=1
    fails with a message naming it; with it set before triton loads (as the test suite does), it runs."""
    code = (
        "import torch, weaver.kernels.dispatch; from weaver.kernels.triton.topk import small_topk; "
        "x = torch.randn(2, 9, device='cuda' if torch.cuda.is_available() else 'cpu'); "
        "v, i = small_topk(x, 3); assert torch.equal(v, torch.topk(x, 3).values)"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    if torch.cuda.is_available():  # compiled kernels on CUDA tensors need no switch (the interpreter is for CPU)
        assert done.returncode == 0, done.stderr[-2000:]
        return
    assert done.returncode != 0 and "needs TRITON_INTERPRET=1" in done.stderr, done.stderr[-2000:]
    env["TRITON_INTERPRET"] = "1"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
