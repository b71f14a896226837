"""The new tokens' K and V into their cache slots in one launch: the CUDA path of `weaver.kernels.slots.write_slots`
once a GPU has timed it (session 48's candidate, a72b101; docs/performance.md). Reference: `slots.write_slots_ref`.

    write_kv(cache_k, cache_v, slots, k, v)   # k, v [B, Hkv, T, D] at slots [B, T] of [B, Hkv, S, D]

torch's `scatter_` takes a launch for K and one for V (3.8 us each at the Qwen3.6-27B decode step on an H100,
benchmarks/results/scale/h100_session47_fold); here one program per (row, token) moves every head of both, with
programmatic dependent launch. A slot outside [0, S) is dropped, never written out of bounds (scatter_ raises).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from weaver.kernels.triton._utils import check_device, next_pow2, pdl_launch, pdl_wait

__all__ = ["write_kv"]


@triton.jit
def _write_kv_kernel(
    k_ptr, v_ptr, ck_ptr, cv_ptr, slots_ptr,
    T, S,
    s_kb, s_kh, s_kt, s_vb, s_vh, s_vt, s_cb, s_ch, s_cs, s_sb,
    HKV: tl.constexpr, D: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, PDL: tl.constexpr = False,
):  # fmt: skip
    if PDL:  # programmatic dependent launch: nothing is read before the wait
        pdl_wait()
    i_row = tl.program_id(0)  # b * T + t
    i_b = (i_row // T).to(tl.int64)
    i_t = i_row % T
    o_h = tl.arange(0, BLOCK_H)
    o_d = tl.arange(0, BLOCK_D)
    slot = tl.load(slots_ptr + i_b * s_sb + i_t + 0 * o_h).to(tl.int64)  # [BLOCK_H], one value
    mask = ((o_h < HKV) & (slot >= 0) & (slot < S))[:, None] & (o_d < D)[None, :]
    b_k = tl.load(k_ptr + i_b * s_kb + i_t * s_kt + o_h[:, None] * s_kh + o_d[None, :], mask=mask)
    b_v = tl.load(v_ptr + i_b * s_vb + i_t * s_vt + o_h[:, None] * s_vh + o_d[None, :], mask=mask)
    dst = i_b * s_cb + o_h[:, None] * s_ch + slot[:, None] * s_cs + o_d[None, :]
    tl.store(ck_ptr + dst, b_k.to(ck_ptr.dtype.element_ty), mask=mask)
    tl.store(cv_ptr + dst, b_v.to(cv_ptr.dtype.element_ty), mask=mask)


def kv_write_fits(cache_k: torch.Tensor, cache_v: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """The layouts this kernel writes: 4-D K/V and caches with unit stride along D, the caches alike."""
    return (
        k.dim() == 4
        and k.shape == v.shape
        and cache_k.dim() == 4
        and cache_k.shape == cache_v.shape
        and cache_k.stride() == cache_v.stride()
        and cache_k.shape[:2] == k.shape[:2]
        and cache_k.shape[3] == k.shape[3]
        and k.stride(3) == 1
        and v.stride(3) == 1
        and cache_k.stride(3) == 1
    )


def write_kv(
    cache_k: torch.Tensor, cache_v: torch.Tensor, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> None:
    """cache_k[b, :, slots[b, t]] = k[b, :, t] (and V), every row and token in one launch."""
    check_device(cache_k, cache_v, slots, k, v)
    if not kv_write_fits(cache_k, cache_v, k, v) or slots.shape != (k.shape[0], k.shape[2]) or slots.stride(1) != 1:
        raise ValueError(f"write_kv needs k, v [B, Hkv, T, D] (unit stride along D), caches [B, Hkv, S, D] and "
                         f"slots [B, T]; got k {tuple(k.shape)}, cache {tuple(cache_k.shape)}, slots "
                         f"{tuple(slots.shape)}")  # fmt: skip
    b, hkv, t, d = k.shape
    _write_kv_kernel[(b * t,)](
        k, v, cache_k, cache_v, slots, t, cache_k.shape[2],
        k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2),
        cache_k.stride(0), cache_k.stride(1), cache_k.stride(2), slots.stride(0),
        HKV=hkv, D=d, BLOCK_H=next_pow2(hkv, 1), BLOCK_D=next_pow2(d, 1), num_warps=4,
        **pdl_launch(k.device, k.element_size()),
    )  # fmt: skip
