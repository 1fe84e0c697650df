"""Small numeric helpers of the reproduction: relative errors, JSON-safe numbers, formatting.

>>> import torch
>>> max_rel_err(torch.tensor([[1.0, 0.0]]), torch.tensor([[2.0, 0.0]]))
0.5
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

F64 = torch.float64


def rel_errs(a: Tensor, b: Tensor) -> Tensor:
    """Per-sample relative errors ``|a_i - b_i| / |b_i|`` (computed in float64, on the CPU)."""
    a, b = a.detach().to(F64).flatten(1), b.detach().to(F64).flatten(1)
    return ((a - b).norm(dim=1) / b.norm(dim=1).clamp_min(1e-300)).cpu()


def max_rel_err(a: Tensor, b: Tensor) -> float:
    """Largest per-sample relative error ``|a_i - b_i| / |b_i|`` (computed in float64)."""
    return float(rel_errs(a, b).max())


def max_abs_err(a: Tensor, b: Tensor) -> float:
    return float((a.detach().to(F64) - b.detach().to(F64)).abs().max())


def finite(x: float | None) -> float | None:
    """JSON-safe number: ``inf`` (identical images) and NaN become None."""
    return None if x is None or not math.isfinite(x) else float(x)


def db(x: float | None) -> str:
    return "identical" if x is None else f"{x:.1f} dB"


def sci(x: float | None, digits: int = 1) -> str:
    return "n/a" if x is None else f"{x:.{digits}e}"


def ssim_window(shape: tuple[int, ...]) -> int:
    """The standard 11x11 SSIM window, shrunk to the largest odd size that fits small images."""
    side = min(shape[-2:])
    return min(11, side if side % 2 else side - 1)
