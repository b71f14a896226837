"""Comparison helpers shared by the tests and the GPU check scripts."""

from __future__ import annotations

import torch


def relative_error(ref: torch.Tensor, out: torch.Tensor) -> float:
    """max |out - ref| / max |ref| in float64 (inf when out has NaN/inf)."""
    ref64, out64 = ref.detach().double().cpu(), out.detach().double().cpu()
    if not torch.isfinite(out64).all():
        return float("inf")
    denom = ref64.abs().max().clamp_min(1e-30)
    return float((out64 - ref64).abs().max() / denom)


def assert_close(name: str, ref: torch.Tensor, out: torch.Tensor, rtol: float) -> None:
    """Fail with absolute and relative error in the message when `out` is not within rtol of `ref`."""
    assert ref.shape == out.shape, f"{name}: shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    err = relative_error(ref, out)
    abs_err = float((out.detach().double().cpu() - ref.detach().double().cpu()).abs().max())
    assert err <= rtol, f"{name}: max abs err {abs_err:.3e}, relative {err:.3e} > {rtol:.1e}"
