"""The caches' in-place slot writes: compiled, they touch only the slots they write (no copy of a whole cache)."""

from __future__ import annotations

import re

import torch
from torch._inductor.utils import run_and_get_code

from weaver.kernels.slots import move_slots, write_slots

S = 1237  # slots: a size no other buffer here has, so a loop over a whole cache shows in inductor's code


def _caches():
    gen = torch.Generator().manual_seed(0)
    return torch.randn(3, 2, 4, S, 8, generator=gen), torch.randn(3, 2, 4, S, 8, generator=gen)


def _step(big_k, big_v, slots, k, v, src, dst):
    write_slots(big_k[1], big_v[1], slots, k, v)  # one layer's view, as AttentionCache holds it
    move_slots(big_k, big_v, src, dst)


def test_compiled_slot_writes_equal_eager_and_copy_no_cache():
    gen = torch.Generator().manual_seed(1)
    slots = torch.tensor([[5, 6, 7], [100, 101, 102]])
    k, v = torch.randn(2, 4, 3, 8, generator=gen), torch.randn(2, 4, 3, 8, generator=gen)
    src, dst = torch.tensor([[6, 7], [101, 102]]), torch.tensor([[9, 10], [0, 1]])
    eager, compiled = _caches(), _caches()
    _step(*eager, slots, k, v, src, dst)
    _, code = run_and_get_code(torch.compile(_step, fullgraph=True), *compiled, slots, k, v, src, dst)
    for got, want in zip(compiled, eager, strict=True):
        assert torch.equal(got, want)
    assert torch.equal(eager[0][1, 0, :, 9:11], k[0, :, 1:])  # written at 6, 7, then moved to 9, 10
    whole = {str(n) for n in (4 * S * 8, 2 * 4 * S * 8, 3 * 2 * 4 * S * 8)}  # a layer's, a batch's, the stack's size
    loops = [line for line in "\n".join(code).splitlines() if re.search(r"\bfor\b|xnumel", line)]
    assert not [line for line in loops if any(n in line for n in whole)], "a compiled write copied a whole cache"


def test_kv_write_kernel_equals_the_scatters():
    """`kernels.triton.kv_write` (interpreted): K/V views [B, Hkv, T, D] of a [B, T, Hkv, D] projection into one
    layer of a stacked cache, the same as the torch scatters; a slot past the cache is dropped."""
    from helpers.triton_env import DEVICE  # sets TRITON_INTERPRET before triton loads

    from weaver.kernels.slots import write_slots_ref
    from weaver.kernels.triton.kv_write import write_kv

    gen = torch.Generator().manual_seed(2)
    big = [torch.randn(3, 2, 4, 40, 16, generator=gen).to(DEVICE, torch.bfloat16) for _ in range(2)]
    k, v = (torch.randn(2, 3, 4, 16, generator=gen).to(DEVICE, torch.bfloat16).transpose(1, 2) for _ in range(2))
    slots = torch.tensor([[5, 6, 7], [30, 2, 39]], device=DEVICE)
    want = [b.clone() for b in big]
    write_slots_ref(want[0][1], want[1][1], slots, k, v)
    write_kv(big[0][1], big[1][1], slots, k, v)
    assert torch.equal(big[0], want[0]) and torch.equal(big[1], want[1])
    before = [b.clone() for b in big]
    write_kv(big[0][1], big[1][1], torch.tensor([[40, 41, 5], [1, 2, 3]], device=DEVICE), k, v)
    assert torch.equal(big[0][2], before[0][2]) and torch.equal(big[1][2], before[1][2])  # slots 40, 41: dropped
    assert torch.equal(big[0][1, 0, :, 39], before[0][1, 0, :, 39])
    assert torch.equal(big[0][1, 0, :, 5], k[0, :, 2]) and torch.equal(big[1][1, 1, :, 3], v[1, :, 2])
