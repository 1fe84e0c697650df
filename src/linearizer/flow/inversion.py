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


# A round trip at this PSNR or above (pixels in [0, 1]: an RMS error of 1e-4) is exact up to
# the amplification of rounding that B^-1 (condition number ~1e4) and the networks allow.
EXACT_PSNR = 80.0


def psnr_per_image(x: Tensor, back: Tensor) -> list[float]:
    """PSNR in dB of each image of ``back`` against ``x`` (peak 1; inf when equal)."""
    mse = (back.double() - x.double()).pow(2).flatten(1).mean(1)
    return [(-10 * math.log10(m) if m > 0 else math.inf) for m in mse.tolist()]


def round_trip_note(x: Tensor, back: Tensor, min_psnr: float = EXACT_PSNR) -> str | None:
    """One line naming the images whose round trip ``back`` misses ``x`` (PSNR below
    ``min_psnr``), with the worst PSNR and error; None when every image meets it."""
    psnr = psnr_per_image(x, back)
    off = [i for i, p in enumerate(psnr) if not p >= min_psnr]
    if not off:
        return None
    worst = float((back.double() - x.double()).abs().max())
    return (
        f"the round trip of image(s) {', '.join(map(str, off))} is off: PSNR down to "
        f"{min(psnr):.1f} dB, max abs pixel error {worst:.2g} (exact means >= {min_psnr:g} "
        f"dB); such inputs lie far from the training images, where B^-1 and the noise side "
        f"amplify rounding"
    )


def round_trip(model: OneStepFlow, x1: Tensor, b: Tensor | FactoredMatrix) -> tuple[Tensor, Tensor]:
    """Noise ``x0`` with ``sample(x0) = x1``, and the re-generated ``x1`` from that noise."""
    x0 = model.invert(x1, b)
    z0 = model.encode(x0, NOISE)
    return x0, model.decode(apply_rows(b, z0).to(z0.dtype), DATA)  # the networks' latent dtype


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
    return model.decode(apply_rows(b, z0).to(z0.dtype), DATA)
