"""Tolerances that scale with the dtype's epsilon and the size of the quantity compared.

A bound tuned on one CPU fails on another whose BLAS kernels round differently; a bound of a few
hundred or thousand epsilons of the reference's own scale does not, and still fails by orders of
magnitude when a property really breaks (a wrong sign, index or dtype gives errors near 1).
"""

from __future__ import annotations

import torch
from torch import Tensor


def eps(dtype: torch.dtype) -> float:
    return float(torch.finfo(dtype).eps)


def scale_of(t: Tensor) -> float:
    """The quantity's size: its largest magnitude (a tiny floor keeps all-zero references sane)."""
    return max(float(t.detach().abs().max()), 1e-30) if t.numel() else 1.0


def rel_err(actual: Tensor, expected: Tensor) -> float:
    """``max |actual - expected| / max |expected|``."""
    a, e = actual.detach(), expected.detach().to(actual.dtype)
    return float((a - e).abs().max()) / scale_of(e)


def assert_near(
    actual: Tensor,
    expected: Tensor,
    *,
    eps_factor: float,
    dtype: torch.dtype | None = None,
    scale: float | None = None,
    what: str = "",
) -> float:
    """Assert ``max|actual - expected| <= eps_factor * eps(dtype) * scale``; return the ratio.

    ``dtype`` defaults to the dtype of ``actual`` (the precision it was computed in); ``scale``
    defaults to ``max |expected|``. The returned ratio (error / bound) lets tests report margins.
    """
    dtype = dtype or actual.dtype
    expected = expected.to(actual.dtype).reshape(actual.shape)
    s = scale_of(expected) if scale is None else scale
    err = float((actual.detach() - expected.detach()).abs().max())
    bound = eps_factor * eps(dtype) * s
    assert err <= bound, f"{what}: error {err:.3g} > {bound:.3g} ({eps_factor} eps x {s:.3g})"
    return err / bound
