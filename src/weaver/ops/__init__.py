"""weaver.ops: pure tensor functions, and (triton/) their Triton kernels."""

from __future__ import annotations

import os

import torch

# Without CUDA, Triton kernels can only run in its interpreter. Triton reads TRITON_INTERPRET when it is
# imported and when a kernel is decorated, so it is set here, before anything below weaver.ops can import
# triton (weaver.ops.triton, or torch._dynamo, which torch.compile's decorators in weaver.ops.dispatch
# import and which imports triton); a preset value wins.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
