"""ChunkReadback: chunks come back in submission order, at most two in flight."""

from __future__ import annotations

import pytest
import torch

from weaver.speculative.readback import ChunkReadback


def test_chunks_come_back_in_order_and_buffers_alternate():
    rb = ChunkReadback(4, 2, torch.device("cpu"))
    first = rb.ring()
    first[:3] = torch.tensor([[1, -1], [2, 5], [3, -1]])
    rb.submit(3)
    second = rb.ring()
    assert second.data_ptr() != first.data_ptr()
    second[:2] = torch.tensor([[7, -1], [8, 9]])
    rb.submit(2)
    with pytest.raises(RuntimeError, match="collect a chunk"):
        rb.submit(1)
    first[:3] = 0  # the ring is reused only after its chunk was copied out
    assert rb.collect() == [[1, -1], [2, 5], [3, -1]]
    assert rb.collect() == [[7, -1], [8, 9]]
    assert not rb.pending
