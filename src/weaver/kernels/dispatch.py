"""How a tensor op reaches its Triton kernel: whether it may (CUDA and triton, asked once) and through what.

`triton_ready` is folded into torch.compile'd code as a constant (no trace of the import), so a compiled
round stage calls the kernels' custom ops on GPU and the torch paths on CPU. `launch` calls the custom op
under torch.compile (one opaque kernel for inductor) and the launcher itself in eager code (no op dispatch:
~20 us less host time a call).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import torch

from weaver.options import RuntimeOptions

_READY: list[bool] = []  # the answer of triton_ready, once known


@torch.compiler.assume_constant_result
def triton_ready() -> bool:
    """CUDA and triton both present; asked once per process."""
    if not _READY:
        from weaver.kernels.triton import triton_available

        _READY.append(triton_available())
    return _READY[0]


def launch(op: Callable, module: str, launcher: str, *args):
    """`op(*args)` while torch.compile traces, else `module.launcher(*args)` (the module imports triton)."""
    if torch.compiler.is_compiling():
        return op(*args)
    return getattr(importlib.import_module(module), launcher)(*args)


def use_kernel(options: RuntimeOptions, *tensors: torch.Tensor) -> bool:
    """Whether an op runs its Triton kernel: never with kernels="torch", always with "triton" (the interpreter
    on CPU tensors), and with "auto" when every tensor is on CUDA and triton is there."""
    if options.torch_only:
        return False
    if options.force_triton:
        return True
    return all(t.is_cuda for t in tensors) and triton_ready()
