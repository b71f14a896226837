"""CUDA-graph capture of a fixed-shape step, applied from outside the model code (gpt-fast style)."""

from __future__ import annotations

from collections.abc import Callable

import torch


class GraphedStep:
    """Capture `fn(*static_inputs) -> tensor` once; each call copies the inputs in and replays the graph.

    `fn` must have static shapes and no host syncs. Warm-up runs execute `fn` for real (on a side
    stream, as PyTorch requires before capture), so callers reset any state it advanced.
    """

    def __init__(self, fn: Callable[..., torch.Tensor], *examples: torch.Tensor, warmup: int = 3) -> None:
        self.static_in = [x.clone() for x in examples]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                fn(*self.static_in)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_out = fn(*self.static_in)

    def __call__(self, *inputs: torch.Tensor) -> torch.Tensor:
        for static, x in zip(self.static_in, inputs, strict=True):
            if x.data_ptr() != static.data_ptr():
                static.copy_(x)
        self.graph.replay()
        return self.static_out
