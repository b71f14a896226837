"""Device -> host token read-back that never stalls the device: double-buffered chunks.

The decode loop queues a chunk of steps, starts an asynchronous copy of that chunk's tokens into
pinned host memory and records an event; it then queues the next chunk *before* waiting for the
previous event, so the device works on chunk n+1 while the host hands chunk n to the caller
(detokenising, stop strings, streaming). On CPU everything is synchronous and this is a plain copy.
"""

from __future__ import annotations

import torch


class ChunkReadback:
    """Two device rings + two pinned host buffers + two events; `submit` then `collect` in FIFO order.

    A ring holds `size` rounds of `width` emitted tokens each (one row a round, -1 padded)."""

    def __init__(self, size: int, width: int, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.rings = [torch.zeros(size, width, dtype=torch.long, device=device) for _ in range(2)]
        self.host = [torch.zeros(size, width, dtype=torch.long, pin_memory=self.cuda) for _ in range(2)]
        self.events = [torch.cuda.Event() if self.cuda else None for _ in range(2)]
        self.pending: list[tuple[int, int]] = []  # (buffer, count) submitted, not yet collected
        self.next_buffer = 0

    def ring(self) -> torch.Tensor:
        """The device ring the next chunk writes its tokens into."""
        return self.rings[self.next_buffer]

    def submit(self, count: int) -> None:
        """The chunk's steps are queued: start copying its `count` tokens to the host."""
        buf = self.next_buffer
        if len(self.pending) == 2:
            raise RuntimeError("collect a chunk before submitting a third")
        self.host[buf][:count].copy_(self.rings[buf][:count], non_blocking=self.cuda)
        if self.cuda:
            self.events[buf].record()
        self.pending.append((buf, count))
        self.next_buffer = 1 - buf

    def collect(self) -> list[list[int]]:
        """Wait for the oldest submitted chunk only (later work keeps running) and return its rows."""
        buf, count = self.pending.pop(0)
        if self.cuda:
            self.events[buf].synchronize()
        return self.host[buf][:count].tolist()
