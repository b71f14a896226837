"""Whether a tensor op takes its Triton kernel: CUDA tensors and an importable triton, asked once.

The answer is folded into torch.compile'd code as a constant (no trace of the import), so a compiled
round stage calls the kernels' custom ops on GPU and the torch paths on CPU.
"""

from __future__ import annotations

import torch

_READY: list[bool] = []  # the answer of triton_ready, once known


@torch.compiler.assume_constant_result
def triton_ready() -> bool:
    """CUDA and triton both present; asked once per process."""
    if not _READY:
        from weaver.ops.triton import triton_available

        _READY.append(triton_available())
    return _READY[0]
