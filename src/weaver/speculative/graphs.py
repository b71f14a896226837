"""CUDA-graph capture of a fixed-shape step, applied from outside the model code (gpt-fast style)."""

from __future__ import annotations

from collections.abc import Callable

import torch


def capture(fn: Callable[[], object], warmup: int = 2) -> tuple[torch.cuda.CUDAGraph, object]:
    """Run `fn` `warmup` times on a side stream (as PyTorch requires before capture), then capture one call.

    Returns the graph and that call's output (static tensors every replay rewrites). `fn` must have static
    shapes and no host syncs; the warm-up runs are real, so callers reset any state they advanced.
    """
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


class GraphedStep:
    """Capture `fn(*static_inputs) -> tensor` once; each call copies the inputs in and replays the graph."""

    def __init__(self, fn: Callable[..., torch.Tensor], *examples: torch.Tensor, warmup: int = 3) -> None:
        self.static_in = [x.clone() for x in examples]
        self.graph, self.static_out = capture(lambda: fn(*self.static_in), warmup)

    def __call__(self, *inputs: torch.Tensor) -> torch.Tensor:
        for static, x in zip(self.static_in, inputs, strict=True):
            if x.data_ptr() != static.data_ptr():
                static.copy_(x)
        self.graph.replay()
        return self.static_out
