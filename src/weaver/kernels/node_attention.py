"""Masked attention of the Weaver drafter's few new tree nodes, on CUDA through one Triton program per
(batch row, head) (weaver.kernels.triton.node_attention).

    out = attend_nodes(q, k, v, mask, options)   # = weaver.ops.node_attention.masked_attention(q, k, v, mask)

q [B, H, W, D] (W = 4..16 rows: Weaver nodes or a drafter block), k/v [B, Hkv, S, D] (S = prefix + node
slots, or the drafter's context slots), out [B, H, W, D]. On the H200
each such SDPA call is a ~9 us cuDNN kernel for a tiny problem; the Triton kernel is the replacement. It is
exposed as the custom op `weaver::node_attention` so code compiled with torch.compile (the round stages,
before CUDA-graph capture) calls it as one opaque kernel; its fake impl gives the output shape. Eager calls
skip the op's dispatch and launch the kernel directly. This module imports without triton: the kernel
module is loaded on first use, and `attend_nodes` runs the torch reference (`weaver.ops.node_attention`, masked
SDPA) wherever `use_kernel(options, ...)` says no or the shapes are outside the kernel's range.
"""

from __future__ import annotations

import torch

from weaver.kernels.dispatch import launch, use_kernel
from weaver.ops.node_attention import masked_attention
from weaver.options import RuntimeOptions

__all__ = ["NODE_ATTENTION_MAX_W", "attend_nodes", "node_attention_op"]

NODE_ATTENTION_MAX_W = 64  # the W rows of a head live in one block (BLOCK_W = next pow2 >= max(W, 16))
_MAX_D = 256  # = weaver.kernels.triton.node_attention.NODE_ATTENTION_MAX_D (that module needs triton)
_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@torch.library.custom_op("weaver::node_attention", mutates_args=())
def node_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`weaver.kernels.triton.node_attention.node_attention` as a custom op: q [B, H, W, D], k/v [B, H, S, D],
    mask [B, W, S] bool -> out [B, H, W, D] (a view of a contiguous [B, W, H, D]), q's dtype."""
    from weaver.kernels.triton.node_attention import node_attention

    return node_attention(q, k, v, mask)


@node_attention_op.register_fake
def _node_attention_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    b, h, w, d = q.shape
    return q.new_empty(b, w, h, d).transpose(1, 2)  # the kernel's token-major layout, q's dtype and device


def _kernel_fits(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> bool:
    """The shapes and dtypes the kernel takes (anything else goes to the reference)."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or mask.dim() != 3:
        return False
    b, h, w, d = q.shape
    hkv, s = k.shape[1], k.shape[2]
    return (
        q.dtype in _DTYPES
        and k.dtype == q.dtype
        and v.dtype == q.dtype
        and mask.dtype == torch.bool
        and k.shape == (b, hkv, s, d)
        and hkv >= 1
        and h % hkv == 0
        and v.shape == k.shape
        and mask.shape == (b, w, s)
        and 1 <= w <= NODE_ATTENTION_MAX_W
        and 1 <= d <= _MAX_D
        and s >= 1
        and b * h >= 1
    )


def attend_nodes(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, options: RuntimeOptions
) -> torch.Tensor:
    """`masked_attention(q, k, v, mask)` = `SDPA(q, k, v, attn_mask=mask[:, None])` (scale D**-0.5): q [B, H, W, D];
    k, v [B, Hkv, S, D] with H % Hkv == 0 (grouped-query attention: query head h reads kv head h // (H / Hkv));
    mask [B, W, S] bool, True = attend, at least one True a row -> [B, H, W, D].

    The Triton kernel for bf16/fp16/fp32 inputs with W <= NODE_ATTENTION_MAX_W and D <= 256 where
    `use_kernel(options, q)` (output token-major: a view of [B, W, H, D]), else the reference. The kernel rounds
    the probabilities to the input dtype before the value product, as flash attention does; fp32 inputs are
    exact fp32 FMAs throughout.
    """
    if _kernel_fits(q, k, v, mask) and use_kernel(options, q, k, v, mask):
        return launch(node_attention_op, "weaver.kernels.triton.node_attention", "node_attention", q, k, v, mask)
    return masked_attention(q, k, v, mask)
