"""Writes into the static K/V caches as opaque in-place ops, so a compiled step touches only the slots it writes.

Under torch.compile a `scatter_` (or `index_put_`) into a view of a graph input is functionalised: inductor writes a
copy of the whole view with the new rows, then copies it back. The caches are such views (one layer of the stacked
[L, B, Hkv, S, D] buffer), so every compiled decode step and verify read and wrote each attention layer's whole
cache twice: at the Qwen3.6-27B shape with a 32k-slot cache 32 x ~45 us a step on an H100
(benchmarks/results/scale/h100_session45_profile). A custom op that declares its mutation is re-inplaced instead:
inductor calls it on the caches themselves, and it writes the T new slots (eager torch inside).

    write_slots(cache_k, cache_v, slots, k, v)       # K/V [B, ..., T, D] at slots [B, T] of [B, ..., S, D]
    move_slots(big_k, big_v, src_slots, dst_slots)   # slots src -> dst [B, P] of stacked [L, B, H, S, D]
"""

from __future__ import annotations

import torch

__all__ = ["move_slots", "write_slots"]


def _write(cache_k: torch.Tensor, cache_v: torch.Tensor, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    index = slots.view(slots.shape[0], *[1] * (k.dim() - 3), slots.shape[1], 1).expand_as(k)
    cache_k.scatter_(k.dim() - 2, index, k.to(cache_k.dtype))
    cache_v.scatter_(k.dim() - 2, index, v.to(cache_v.dtype))


@torch.library.custom_op("weaver::write_slots", mutates_args=("cache_k", "cache_v"))
def write_slots_op(
    cache_k: torch.Tensor, cache_v: torch.Tensor, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> None:
    """`write_slots` as one opaque op (what a torch.compile'd forward calls)."""
    _write(cache_k, cache_v, slots, k, v)


@write_slots_op.register_fake
def _write_slots_fake(cache_k, cache_v, slots, k, v) -> None:
    return None


def write_slots(
    cache_k: torch.Tensor, cache_v: torch.Tensor, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> None:
    """Write k, v [B, ..., T, D] into the caches [B, ..., S, D] at slots [B, T] (device indices: capturable)."""
    if torch.compiler.is_compiling():
        write_slots_op(cache_k, cache_v, slots, k, v)
    else:
        _write(cache_k, cache_v, slots, k, v)


def _move(big_k: torch.Tensor, big_v: torch.Tensor, src_slots: torch.Tensor, dst_slots: torch.Tensor):
    for big in (big_k, big_v):
        n, b, h, _, d = big.shape
        shape = (n, b, h, src_slots.shape[1], d)
        src = src_slots[None, :, None, :, None].expand(shape)
        big.scatter_(3, dst_slots[None, :, None, :, None].expand(shape), big.gather(3, src))


@torch.library.custom_op("weaver::move_slots", mutates_args=("big_k", "big_v"))
def move_slots_op(big_k: torch.Tensor, big_v: torch.Tensor, src_slots: torch.Tensor, dst_slots: torch.Tensor) -> None:
    """`move_slots` as one opaque op (what a torch.compile'd commit calls)."""
    _move(big_k, big_v, src_slots, dst_slots)


@move_slots_op.register_fake
def _move_slots_fake(big_k, big_v, src_slots, dst_slots) -> None:
    return None


def move_slots(big_k: torch.Tensor, big_v: torch.Tensor, src_slots: torch.Tensor, dst_slots: torch.Tensor) -> None:
    """Copy slots src [B, P] to dst [B, P] in every layer of the stacked caches [L, B, H, S, D] (all gathers
    first: overlapping ranges are safe)."""
    if torch.compiler.is_compiling():
        move_slots_op(big_k, big_v, src_slots, dst_slots)
    else:
        _move(big_k, big_v, src_slots, dst_slots)
