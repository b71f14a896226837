"""Shared pieces of the Triton kernels: interpreter check, dot helpers, precision names, small checks, PDL.

(The CPU tests set TRITON_INTERPRET=1 before triton is imported: @triton.jit reads it at decoration time.)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from weaver.kernels.launch_config import settings
from weaver.options import triton_interpreting

# fp32 x fp32 dot precision (the solve, Delta and decay-weighted products):
#   ieee   exact fp32 FMAs (slow; the fp32-input path, error ~1e-7)
#   tf32   one tensor-core pass, operands rounded to 10 mantissa bits (~3e-4 relative)
#   tf32x3 three tf32 passes (Triton's split; ~fp32 accuracy)
#   bf16x3 hi/lo bf16 split, three bf16 passes (~2^-16 relative; state products take two passes)
PRECISIONS = {"ieee": 0, "tf32": 1, "tf32x3": 2, "bf16x3": 3}


def interpreting() -> bool:
    """True when triton runs kernels in its interpreter (CPU tests)."""
    return triton_interpreting()


def precision_code(precision: str, dtype: torch.dtype) -> int:
    """Map a precision name ('auto' = ieee for fp32 inputs, bf16x3 for 16-bit inputs) to its code."""
    if precision == "auto":
        precision = "ieee" if dtype == torch.float32 else "bf16x3"
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be 'auto' or one of {sorted(PRECISIONS)}, got {precision!r}")
    return PRECISIONS[precision]


def check_device(*tensors: torch.Tensor) -> None:
    """Triton kernels need CUDA tensors, or CPU tensors under the interpreter."""
    for t in tensors:
        if t is None:
            continue
        if t.device.type == "cpu" and not interpreting():
            raise ValueError("weaver.kernels.triton on CPU tensors needs TRITON_INTERPRET=1 (set it before import)")


@triton.jit
def dot_lp(a, b, INTERPRET: tl.constexpr):
    """a @ b for 16-bit (or fp32) operands with an fp32 result; the interpreter gets fp32 operands
    because it stores bf16 as raw uint16 and would multiply the bit patterns."""
    if INTERPRET:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        return tl.dot(a, b)


@triton.jit
def split_bf16(x, INTERPRET: tl.constexpr):
    """fp32 x -> (hi, lo) bf16 with hi + lo = x up to ~2^-16 relative."""
    hi = x.to(tl.bfloat16)
    lo = (x - hi.to(tl.float32)).to(tl.bfloat16)
    return hi, lo


@triton.jit
def mm(a, b, PREC: tl.constexpr, INTERPRET: tl.constexpr):
    """a @ b for fp32 operands with an fp32 result, at precision PREC (see PRECISIONS)."""
    if PREC == 0:
        return tl.dot(a, b, input_precision="ieee")
    elif PREC == 1:
        return tl.dot(a, b, input_precision="tf32")
    elif PREC == 2:
        return tl.dot(a, b, input_precision="tf32x3")
    else:
        a_hi, a_lo = split_bf16(a, INTERPRET)
        b_hi, b_lo = split_bf16(b, INTERPRET)
        acc = dot_lp(a_lo, b_hi, INTERPRET)
        acc += dot_lp(a_hi, b_lo, INTERPRET)
        acc += dot_lp(a_hi, b_hi, INTERPRET)
        return acc


@triton.jit
def prefetch_l2(ptrs):
    """Ask L2 for the 128-byte line of each address: a hint (no data comes back, nothing is ordered), so it is
    safe before `griddepcontrol.wait` on data that nothing in flight writes (weights, an earlier round's cache)."""
    tl.inline_asm_elementwise("prefetch.global.L2 [$1]; // $0", "=r,l", [ptrs], dtype=tl.int32, is_pure=False,
                              pack=1)  # fmt: skip


@triton.jit
def prefetch_rows(p_rows, K, K_LINES: tl.constexpr):
    """Ask L2 for the K elements at each row pointer of p_rows [R, 1]: K_LINES addresses a row, a 128-byte line
    apart and clamped to its last element (a row of L lines that may start mid-line needs L + 1)."""
    PER_LINE: tl.constexpr = 1024 // p_rows.dtype.element_ty.primitive_bitwidth  # 64 16-bit elements
    prefetch_l2(p_rows + tl.minimum(tl.arange(0, K_LINES) * PER_LINE, K - 1)[None, :])


PREFETCH_SLOTS = tl.constexpr(128)  # cache slots a prefetch round covers


@triton.jit
def prefetch_prefix(p_k, p_v, length, stride_cs, D: tl.constexpr):
    """L2 prefetch of slots 0 .. length-1 of one kv head's K and V cache rows (each D 16-bit values)."""
    LINES: tl.constexpr = (2 * D + 127) // 128
    o_l = tl.arange(0, LINES) * 64
    for s0 in range(0, length, PREFETCH_SLOTS):
        o_s = tl.minimum(s0 + tl.arange(0, PREFETCH_SLOTS), length - 1)
        rows = o_s[:, None] * stride_cs + o_l[None, :]
        prefetch_l2(p_k + rows)
        prefetch_l2(p_v + rows)


@triton.jit
def pdl_wait():
    """Programmatic dependent launch: wait for the previous kernel in the stream to finish (its writes
    visible), then let the next one launch."""
    tl.extra.cuda.gdc_wait()
    tl.extra.cuda.gdc_launch_dependents()


def pdl_launch(device: torch.device, itemsize: int = 2) -> dict:
    """Launch options for a kernel with a `PDL` constexpr: programmatic dependent launch when compiled, on Hopper
    or later, and when `launch_config` allows it (RuntimeOptions.pdl); else `PDL=False`, always passed: torch
    2.11's inductor launches a user Triton kernel whose defaulted constexpr was left out with one argument too
    few ("launcher() missing ... '_grid_2'", the hybrid verify on the H200), so the value is never left to the
    default. A kernel that prefetches rows before its wait passes their itemsize: the prefetches count 64 values
    a line, so only 16-bit data qualifies. A kernel without prefetches reads nothing before its wait. Off while
    torch.compile traces a launcher: the compiled graph launches the kernel through inductor's own wrapper, and
    the capability query goes through a device-properties object that dynamo may not be able to wrap."""
    off = torch.compiler.is_compiling() or device.type != "cuda" or interpreting() or not settings().pdl
    if off or itemsize != 2 or torch.cuda.get_device_capability(device)[0] < 9:
        return {"PDL": False}
    return {"PDL": True, "launch_pdl": True}


def next_pow2(n: int, minimum: int = 16) -> int:
    return max(minimum, triton.next_power_of_2(int(n)))
