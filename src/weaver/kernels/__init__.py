"""weaver.kernels: the fast paths of `weaver.ops`, one module per op, importable without triton.

Each module here is the public function and its custom op (what torch.compile'd stages see); it calls the
Triton launcher in `weaver.kernels.triton` on CUDA and the torch reference in `weaver.ops` elsewhere.
"""
