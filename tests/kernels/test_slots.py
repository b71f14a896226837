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
