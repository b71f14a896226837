"""Comparison helpers shared by the tests and the GPU check scripts."""

from __future__ import annotations

import torch


def relative_error(ref: torch.Tensor, out: torch.Tensor, floor: float = 0.0) -> float:
    """max |out - ref| / max(max |ref|, floor) in float64 (inf when out has NaN/inf). `floor` is the scale of
    quantities computed as differences of larger ones (log-probs: logit - logsumexp, floor 1)."""
    ref64, out64 = ref.detach().double().cpu(), out.detach().double().cpu()
    if not torch.isfinite(out64).all():
        return float("inf")
    denom = ref64.abs().max().clamp_min(max(floor, 1e-30))
    return float((out64 - ref64).abs().max() / denom)


def norm_relative_error(ref: torch.Tensor, out: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| (Frobenius, float64; inf when out has NaN/inf): the norm-wise metric."""
    ref64, out64 = ref.detach().double().cpu(), out.detach().double().cpu()
    if not torch.isfinite(out64).all():
        return float("inf")
    return float((out64 - ref64).norm() / ref64.norm().clamp_min(1e-30))


def assert_close(name: str, ref: torch.Tensor, out: torch.Tensor, rtol: float, floor: float = 0.0) -> None:
    """Fail with absolute and relative error in the message when `out` is not within rtol of `ref` (relative to
    max(max |ref|, floor): see `relative_error`)."""
    assert ref.shape == out.shape, f"{name}: shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    err = relative_error(ref, out, floor)
    abs_err = float((out.detach().double().cpu() - ref.detach().double().cpu()).abs().max())
    assert err <= rtol, f"{name}: max abs err {abs_err:.3e}, relative {err:.3e} > {rtol:.1e}"


def root_path(parents: list[int], node: int) -> list[int]:
    """Node ids root..node of one tree, by following parent pointers (the slow reference walk)."""
    path = [node]
    while parents[path[-1]] >= 0:
        path.append(parents[path[-1]])
    return path[::-1]


def random_root_paths(
    parents: torch.Tensor, gen: torch.Generator, extra_pad: int = 0, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """One random root-to-node path per row of parents [B, N], right-padded with -1 to a common P."""
    rows = parents.tolist()
    n = parents.shape[1]
    paths = [root_path(row, int(torch.randint(0, n, (1,), generator=gen))) for row in rows]
    width = max(len(p) for p in paths) + extra_pad
    return torch.tensor([p + [-1] * (width - len(p)) for p in paths], device=device)
