"""Inversion and interpolation of real images through the one-step matrix B.

Both paths are exact up to rounding: inversion solves ``B z0 = g_data(x1)`` (B is square and full
rank), and interpolation either walks the straight line between two inverted noises in pixel
space (the authors' choice) or the straight line in the data network's induced space, which is
where the generator is linear.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .factored import FactoredMatrix, apply_rows
from .model import DATA, NOISE, OneStepFlow


def condition_number(b: Tensor | FactoredMatrix) -> float:
    """2-norm condition number of B (largest over smallest singular value)."""
    s = b.singular_values() if isinstance(b, FactoredMatrix) else torch.linalg.svdvals(b.double())
    return float(s[0] / s[-1]) if s[-1] > 0 else math.inf


def round_trip(model: OneStepFlow, x1: Tensor, b: Tensor | FactoredMatrix) -> tuple[Tensor, Tensor]:
    """Noise ``x0`` with ``sample(x0) = x1``, and the re-generated ``x1`` from that noise."""
    x0 = model.invert(x1, b)
    z0 = model.encode(x0, NOISE)
    return x0, model.decode(apply_rows(b, z0).to(x1.dtype), DATA)


def interpolate(
    model: OneStepFlow,
    xa: Tensor,
    xb: Tensor,
    b: Tensor | FactoredMatrix,
    n: int = 10,
    space: str = "noise",
) -> Tensor:
    """``n`` images from ``xa`` to ``xb`` (``[n, C, H, W]``), for one pair of images.

    ``space="noise"``: invert both, interpolate the noises linearly, generate each.
    ``space="latent"``: interpolate ``g_data(xa)`` and ``g_data(xb)`` linearly and decode —
    the straight line of the generator's output space.
    """
    alphas = torch.linspace(0, 1, n, dtype=xa.dtype, device=xa.device)[:, None, None, None]
    if space == "latent":
        za, zb = model.encode(torch.cat([xa, xb]), DATA).chunk(2)
        path = (1 - alphas.flatten()[:, None]) * za + alphas.flatten()[:, None] * zb
        return model.decode(path, DATA)
    x0 = model.invert(torch.cat([xa, xb]), b)
    noise = (1 - alphas) * x0[:1] + alphas * x0[1:]
    z0 = model.encode(noise, NOISE)
    return model.decode(apply_rows(b, z0).to(xa.dtype), DATA)
