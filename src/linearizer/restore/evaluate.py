"""Run every restoration method on one task and score it: PSNR, SSIM, LeNet accuracy against the
true labels, data consistency, FID (LeNet), time per image.

Scores (per method, keys of :func:`score`):

* ``psnr``, ``ssim``: mean over images, outputs clamped to [0, 1] as they are shown.
* ``lenet_accuracy``: the MNIST classifier's accuracy on the (clamped) restorations against the
  true labels.
* ``consistency_max`` / ``consistency_mean``: ``|H x - y| / |y|`` per image on the raw float32
  outputs; ``model_consistency_max``: the same in the operator the solvers use (differs only
  for the blurs, whose pseudo-inverse is truncated; see :mod:`.degradations`).
* ``fid_lenet``: FID (LeNet) of the restorations against the reference digits.
* ``seconds_per_image``: wall time of the method on the batch divided by its size.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..flow.spec import SamplerSpec
from .algorithms import (
    CoordPrior,
    History,
    InducedOperator,
    alternating,
    consistency,
    noise_optimisation,
    range_map,
    range_null_induced,
    rel_norm,
    wiener_weight,
)
from .degradations import Degradation
from .spec import DEFAULT, RestoreSpec

BATCH = 500
METHODS = ("pinv", "project", "ign", "noise-opt", "ddnm", "alternating", "induced-rns", "range-map")
EXACT = ("ddnm", "alternating", "induced-rns", "range-map")  # end with an exact consistency step


@dataclass
class Prior:
    """The models a restoration uses. ``ours``: a projective model (``forward`` = P, ``encode`` =
    g, ``decode`` = g^-1); ``ign``: the IGN baseline (or None); ``flow``: a one-step flow model
    (or None); ``prior_mse``: ours' mean squared reconstruction error on training digits."""

    ours: nn.Module
    ign: nn.Module | None = None
    flow: nn.Module | None = None
    prior_mse: float = 0.0
    coord_prior: CoordPrior | None = None
    flow_spec: SamplerSpec | None = None  # the flow's sampler (default SamplerSpec())

    def P(self, x: Tensor) -> Tensor:
        return batched(self.ours, x)

    def encode(self, x: Tensor) -> Tensor:
        with torch.no_grad():
            return torch.cat([self.ours.encode(c) for c in x.split(BATCH)])

    def decode(self, w: Tensor) -> Tensor:
        with torch.no_grad():
            return torch.cat([self.ours.decode(c) for c in w.split(BATCH)])

    def coords(self, x: Tensor) -> Tensor:
        with torch.no_grad():
            return torch.cat([self.ours.coords(self.ours.encode(c)) for c in x.split(BATCH)])

    def decode_coords(self, c: Tensor) -> Tensor:
        """``g^-1(basis c)``, differentiable in ``c``."""
        return self.ours.decode(self.ours.from_coords(c))

    def generator(self) -> Callable[[Tensor], Tensor]:
        """``f(z) = g_data^-1(B g_noise(z))``, differentiable in ``z``."""
        from ..flow.model import DATA, NOISE

        flow = self.flow
        b = flow.one_step_matrix(self.flow_spec).to(torch.float32)
        return lambda z: flow.decode(flow.encode(z, NOISE) @ b.T, DATA)


def noise_weight(sigma: float) -> float:
    """``lam`` of the noise optimisation: ``sigma^2`` with measurement noise (the MAP weight for
    a unit-Gaussian ``z``), else 0.003 (chosen among 0.001, 0.01, 0.1, 1 on 20 *training*
    digits: 0.001 was best for sr4, 0.01 for box inpainting)."""
    return float(sigma**2) if sigma > 0 else 0.003


def batched(model: nn.Module, x: Tensor) -> Tensor:
    """``model(x)`` without gradients in batches of one kind of input (IGN's BatchNorm runs on
    batch statistics, the map it was trained as)."""
    from ..projective.evaluate import apply

    return apply(model, x, BATCH)


def prior_mse(model: nn.Module, images: Tensor) -> float:
    """Mean squared error of ``P(x)`` against ``x`` per pixel (the prior's error scale)."""
    return float((batched(model, images) - images).double().square().mean())


def restore(
    prior: Prior,
    deg: Degradation,
    y: Tensor,
    *,
    methods: tuple[str, ...] = METHODS,
    spec: RestoreSpec = DEFAULT,
    noise_n: int | None = None,
    induced: InducedOperator | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[dict[str, Tensor], dict[str, float], dict[str, Any]]:
    """Every requested method on observations ``y``: ``(outputs, seconds_per_image, extras)``.

    ``spec``: the solvers' iterations, steps and noise weight (:class:`.spec.RestoreSpec`).
    Methods whose model is missing (``ign``, ``noise-opt``, ``induced-rns`` without an
    operator) are skipped. ``noise_n``: run the (slow) noise optimisation on the first
    ``noise_n`` observations only (its output then has that many rows).
    ``extras["history"]``: the residuals of :func:`alternating` per iteration;
    ``extras["noise_trace"]``, ``extras["map_trace"]``: the mean objectives per step.
    """
    outs: dict[str, Tensor] = {}
    secs: dict[str, float] = {}
    extras: dict[str, Any] = {}
    n = y.shape[0]
    iters, noise_lam = spec.iters, spec.noise_lam
    weight = wiener_weight(prior.prior_mse, deg.sigma)

    def timed(name: str, fn: Callable[[], Tensor]) -> None:
        if progress:
            progress(name)
        t0 = time.perf_counter()
        outs[name] = fn().detach()
        secs[name] = (time.perf_counter() - t0) / len(outs[name])

    def alt(k: int) -> tuple[Tensor, Tensor, History]:
        return alternating(prior.P, deg, y, iters=k, weight=weight, check_idempotence=False)

    x_pinv = deg.pinv(y)
    if "pinv" in methods:
        timed("pinv", lambda: deg.pinv(y))
    if "project" in methods:
        timed("project", lambda: prior.P(x_pinv))
    if "ign" in methods and prior.ign is not None:
        timed("ign", lambda: batched(prior.ign, x_pinv))
    if "noise-opt" in methods and prior.flow is not None:

        def run_noise() -> Tensor:
            k = n if noise_n is None else min(n, noise_n)
            lam = noise_weight(deg.sigma) if noise_lam is None else noise_lam
            extras["noise_lam"] = lam
            x, trace = noise_optimisation(
                prior.generator(), deg.select(slice(0, k)), y[:k], steps=spec.noise_steps, lam=lam
            )
            extras["noise_trace"] = trace
            return x

        timed("noise-opt", run_noise)
    if "ddnm" in methods:
        timed("ddnm", lambda: alt(1)[0])
    prior_point = None
    if "alternating" in methods or "induced-rns" in methods or "range-map" in methods:

        def run_alt() -> Tensor:
            nonlocal prior_point
            x, prior_point, hist = alt(iters)
            extras["history"] = hist.as_dict()
            return x

        timed("alternating", run_alt)
        alt_secs = secs["alternating"]
        # Idempotence of P along the iterations, on a sub-batch (one more P per iteration).
        k = min(n, 100)
        _, _, h2 = alternating(prior.P, deg.select(slice(0, k)), y[:k], iters=iters, weight=weight)
        extras["history"]["idempotence_max"] = h2.idempotence_max
        if "alternating" not in methods:
            del outs["alternating"], secs["alternating"]
    if "range-map" in methods and prior.coord_prior is not None:

        def run_map() -> Tensor:
            c0 = prior.coords(prior_point)
            noise_var = prior.prior_mse + deg.sigma**2
            xs, traces = [], []
            for i in range(0, n, BATCH):
                sl = slice(i, i + BATCH)
                x, tr = range_map(
                    prior.decode_coords,
                    deg.select(sl),
                    y[sl],
                    c0[sl],
                    prior.coord_prior,
                    noise_var=noise_var,
                    steps=spec.map_steps,
                )
                xs.append(x)
                traces.append(tr)
            extras["map_trace"] = [sum(t) / len(t) for t in zip(*traces, strict=True)]
            return deg.consistency_step(torch.cat(xs), y, weight)

        timed("range-map", run_map)
        secs["range-map"] += alt_secs
    if "induced-rns" in methods and induced is not None:

        def run_rns() -> Tensor:
            return range_null_induced(
                prior.encode, prior.decode, deg, y, prior_point, induced, weight
            )

        timed("induced-rns", run_rns)
        secs["induced-rns"] += alt_secs  # it starts from the alternating projections' prior
    extras["weight"] = weight
    return outs, secs, extras


def consistency_scores(x: Tensor, deg: Degradation, y: Tensor) -> dict[str, float]:
    """``consistency_max``/``_mean`` (``|H x - y| / |y|``) and ``model_consistency_max``."""
    c = consistency(deg, x, y)
    r, ref = deg.model_residual(x, y)
    return {
        "consistency_max": float(c.max()),
        "consistency_mean": float(c.mean()),
        "model_consistency_max": float(rel_norm(r, ref).max()),
    }


@torch.no_grad()
def score(
    x: Tensor,
    truth: Tensor,
    labels: Tensor,
    deg: Degradation,
    y: Tensor,
    lenet: nn.Module | None = None,
    ref_features: Tensor | None = None,
    consistency: bool = True,
) -> dict[str, float]:
    """The scores of one method's outputs ``x`` (module docstring); without a classifier
    (``lenet`` None) no accuracy and no FID, and ``consistency=False`` leaves out the
    consistency scores (for an observation shown as an image)."""
    from ..metrics import accuracy, fid_from_features, lenet_features, psnr, ssim

    shown = x.clamp(0, 1).float()
    out = {"psnr": float(psnr(shown, truth)), "ssim": float(ssim(shown, truth))}
    if lenet is not None:
        out["lenet_accuracy"] = accuracy(lenet, shown, labels)
    if consistency:
        out |= consistency_scores(x, deg, y)
    if lenet is not None:
        out["fid_lenet"] = fid_from_features(lenet_features(shown, lenet), ref_features)
    return out
