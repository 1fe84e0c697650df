"""Sampling temperature: the samplers draw ``x0 ~ N(0, tau^2 I)`` (Glow's temperature).

A one-step flow trained with the authors' objective comes out under-dispersed: at ``tau = 1``
its samples vary less from image to image than the training images do (on the ``cpu`` preset,
a per-pixel standard deviation of 0.138 against 0.175), with soft, grey strokes.
:func:`calibrate_temperature` picks the ``tau`` at which the samples' per-pixel spread
(:func:`pixel_spread`) matches the training images'. It needs no classifier, so it never looks
at the network behind FID (LeNet).

>>> import torch
>>> from linearizer.flow.build import build_flow
>>> from linearizer.flow.config import SMOKE
>>> model = build_flow(SMOKE, channels=1)
>>> from linearizer.flow.spec import SamplerSpec
>>> spec = SamplerSpec(steps=10)
>>> tau = calibrate_temperature(model, torch.rand(64, 1, 8, 8), n=64, spec=spec)
>>> 0.25 <= tau <= 4.0
True
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..errors import LinearizerError

if TYPE_CHECKING:  # the model stays out of this module's imports
    from .model import OneStepFlow
    from .spec import SamplerSpec


def check_temperature(tau: float, what: str = "--temperature") -> float:
    """``tau`` if it is a finite number > 0, else a one-line error naming ``what``."""
    if not (isinstance(tau, (int, float)) and math.isfinite(tau) and tau > 0):
        raise LinearizerError(f"{what} must be a finite number > 0, got {tau!r}")
    return float(tau)


def pixel_spread(images: Tensor) -> float:
    """Mean over pixels of the standard deviation across the batch ``[N, C, H, W]``, after
    clamping to [0, 1] (how much the images differ from one another, pixel by pixel)."""
    if images.dim() != 4 or len(images) < 2:
        raise LinearizerError(f"need a batch [N >= 2, C, H, W], got {tuple(images.shape)}")
    return float(images.detach().double().clamp(0, 1).std(0).mean())


@torch.no_grad()
def calibrate_temperature(
    model: OneStepFlow,
    images: Tensor,
    *,
    n: int = 2000,
    spec: SamplerSpec | None = None,
    seed: int = 0,
    bounds: tuple[float, float] = (0.25, 4.0),
    iters: int = 12,
) -> float:
    """The ``tau`` at which ``n`` samples match the pixel spread of ``images`` (training data).

    Bisection on ``log tau`` inside ``bounds`` (the spread grows with ``tau``), with the same
    noise at every trial; ``spec`` (default :class:`~linearizer.flow.spec.SamplerSpec`) is the
    sampler calibrated (its own temperature is ignored). Past a bound it returns that bound.
    """
    if n < 2:
        raise LinearizerError(f"calibration needs n >= 2 samples, got {n}")
    target = pixel_spread(images)
    param = next(model.parameters())
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn(n, *model.image_shape, generator=gen).to(param.device, param.dtype)

    def spread(tau: float) -> float:
        x = torch.cat([model.sample(tau * part, spec) for part in noise.split(1000)])
        return pixel_spread(x)

    lo, hi = (math.log(b) for b in bounds)
    if spread(math.exp(lo)) >= target:
        return bounds[0]
    if spread(math.exp(hi)) <= target:
        return bounds[1]
    for _ in range(iters):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if spread(math.exp(mid)) < target else (lo, mid)
    return math.exp((lo + hi) / 2)
