"""Solvers for ``y = H(x) + n`` with a projective model ``P = g^-1 A g`` (``A^2 = A``) as the prior,
and the baselines they are measured against.

Ours, both built on exact operations:

* :func:`alternating` — alternating projections between the model's fixed-point set
  ``{x : P(x) = x} = g^-1(range A)`` (reached exactly by one application of ``P``, which is
  idempotent to rounding on every input) and the consistency set ``{x : H x = y}`` (reached
  exactly by ``x + H^+(y - H x)`` for linear ``H``). The output is the last consistency step, so
  ``|H x - y| / |y|`` is at rounding level on noiseless tasks; the per-iteration residuals
  (consistency of ``P``'s iterate, distance of the consistent iterate from the fixed-point set,
  idempotence of ``P``) are returned. With measurement noise the consistency step is relaxed
  to ``x = p + w H^+(y - H p)`` with the Wiener weight ``w = e^2 / (e^2 + sigma^2)`` (``e^2``:
  the prior's mean squared error on training digits), a fixed point between the data and the
  prior. One iteration is DDNM's ``H^+ y + (I - H^+ H) x_prior`` with ``x_prior = P(H^+ y)``.
* :func:`range_null_induced` — range/null-space decomposition in the model's *induced* space:
  ``x = g^-1(A_H^+ g(H^+ y) + (I - A_H^+ A_H) g(x_prior))``. ``H`` is not linear in that space,
  so ``A_H`` is its best linear model there (least squares on training pairs
  ``(g(x), g(H^+ H x))``, truncated to the rank of ``H``: :func:`fit_induced_operator`). Its
  data term is exact only for that model, so a final exact pixel-space consistency step
  ``x <- x + H^+(y - H x)`` follows, which makes ``|H x - y|`` exact for linear ``H``.

* :func:`range_map` — a MAP estimate on the fixed-point set itself, which the coordinates
  ``c`` parametrise exactly (``x = g^-1(basis c)`` is a fixed point of ``P`` for every ``c``):
  Gaussian prior on ``c`` (fitted on training digits), Gaussian misfit ``|H x(c) - y|^2``,
  started from the alternating projections; then the same exact (or Wiener-relaxed)
  consistency step. It is the one solver here that needs gradients.

Baselines on the same inputs: ``H^+ y``; one projection ``P(H^+ y)`` (``linearizer project``);
IGN's projection ``IGN(H^+ y)``; and noise optimisation through the one-step generator,
``min_z |H f(z) - y|^2 + lam |z|^2`` (:func:`noise_optimisation`, Asim et al. 2020 / CSGM).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..errors import LinearizerError
from .degradations import Degradation
from .spec import DEFAULT

Map = Callable[[Tensor], Tensor]


def rel_norm(a: Tensor, b: Tensor) -> Tensor:
    """``|a| / |b|`` per sample, in float64."""
    return a.flatten(1).double().norm(dim=1) / b.flatten(1).double().norm(dim=1).clamp_min(1e-300)


def consistency(deg: Degradation, x: Tensor, y: Tensor) -> Tensor:
    """``|H x - y| / |y|`` per sample."""
    return rel_norm(deg.H(x) - y, y)


def wiener_weight(prior_mse: float, sigma: float) -> float:
    """Weight of the data in a noisy consistency step: 1 without noise, ``e^2/(e^2+sigma^2)``."""
    return 1.0 if sigma <= 0 else float(prior_mse / (prior_mse + sigma**2))


@dataclass
class History:
    """Per-iteration means (and maxima) over the batch of the residuals of :func:`alternating`."""

    consistency: list[float] = field(default_factory=list)  # |H p_k - y| / |y|, p_k = P(x_{k-1})
    consistency_max: list[float] = field(default_factory=list)
    distance: list[float] = field(default_factory=list)  # |P(x_k) - x_k| / |x_k|
    idempotence_max: list[float] = field(default_factory=list)  # |P(p_k) - p_k| / |p_k|
    out_consistency_max: list[float] = field(default_factory=list)  # |H x_k - y| / |y|

    def as_dict(self) -> dict[str, list[float]]:
        return {k: list(v) for k, v in self.__dict__.items()}


def alternating(
    P: Map,
    deg: Degradation,
    y: Tensor,
    *,
    iters: int = DEFAULT.iters,
    weight: float = 1.0,
    check_idempotence: bool = True,
) -> tuple[Tensor, Tensor, History]:
    """Alternating projections (module docstring). Returns ``(x, p, history)``: ``x`` the last
    consistent iterate (the output), ``p = P(x_{K-1})`` the last point of the fixed-point set.

    ``iters = 1`` is DDNM with ``x_prior = P(H^+ y)``.
    """
    if iters < 1:
        raise LinearizerError(f"iters must be >= 1, got {iters}")
    hist = History()
    x = deg.pinv(y)
    p = x
    for _ in range(iters):
        p = P(x)
        if hist.consistency:  # distance of the previous consistent iterate from the set
            hist.distance.append(float(rel_norm(p - x, x).mean()))
        c = consistency(deg, p, y)
        hist.consistency.append(float(c.mean()))
        hist.consistency_max.append(float(c.max()))
        if check_idempotence:
            hist.idempotence_max.append(float(rel_norm(P(p) - p, p).max()))
        x = deg.consistency_step(p, y, weight)
        hist.out_consistency_max.append(float(consistency(deg, x, y).max()))
    hist.distance.append(float(rel_norm(P(x) - x, x).mean()))
    return x, p, hist


# --- range / null space in the induced space ------------------------------------------------


@dataclass
class InducedOperator:
    """Rank-``r`` linear model ``A_H = U S V^T`` of a degradation in an induced space (float64)."""

    U: Tensor
    S: Tensor
    V: Tensor
    fit_error: float  # relative least-squares residual on the fitting pairs

    @property
    def rank(self) -> int:
        return int(self.S.numel())

    def pinv(self, w: Tensor) -> Tensor:
        """``A_H^+ w`` for latents ``w [B, D]``."""
        return ((w.double() @ self.U) / self.S) @ self.V.T

    def null(self, w: Tensor) -> Tensor:
        """``(I - A_H^+ A_H) w``."""
        w = w.double()
        return w - (w @ self.V) @ self.V.T


def observed_rank(deg: Degradation, n: int) -> int:
    """Rank of ``H^+ H`` on images of ``deg``'s shape (numerically, from a dense probe; ``n`` =
    the number of pixels)."""
    eye = torch.eye(n, dtype=torch.float64).view(n, *deg.image_shape)
    rows = deg.pinv(deg.H(eye)) if deg.linear else deg.null_project(eye)
    m = rows.reshape(n, n)
    if not deg.linear:
        m = torch.eye(n, dtype=torch.float64) - m
    return int(torch.linalg.matrix_rank(m, rtol=1e-8))


@torch.no_grad()
def fit_induced_operator(
    encode: Map, deg: Degradation, images: Tensor, rank: int, batch: int = 500
) -> InducedOperator:
    """Least-squares ``A_H`` with ``g(H^+ H x) ~ A_H g(x)`` on ``images``, truncated to ``rank``.

    Needs more images than the latent dimension ``D``. Only for degradations that are the same
    for every image (not ``inpaint-random``, whose mask changes per image).
    """
    chunks = [images[i : i + batch] for i in range(0, len(images), batch)]
    w = torch.cat([encode(c).double() for c in chunks])
    seen = torch.cat([encode(deg.pinv(deg.H(c))).double() for c in chunks])
    if w.shape[0] <= w.shape[1]:
        raise LinearizerError(
            f"fitting A_H needs more than D = {w.shape[1]} images, got {w.shape[0]}"
        )
    # Minimum-norm least squares through the pseudo-inverse: latents of digits are rank
    # deficient (pixels that are background in every digit), where LAPACK's lstsq drivers differ.
    at = torch.linalg.pinv(w, rtol=1e-9) @ seen  # [D, D], seen ~ w @ at
    err = float((w @ at - seen).norm() / seen.norm())
    u, s, vh = torch.linalg.svd(at.T)
    r = max(1, min(rank, int((s > s[0] * 1e-10).sum())))
    return InducedOperator(u[:, :r], s[:r], vh[:r].T, err)


@torch.no_grad()
def range_null_induced(
    encode: Map,
    decode: Map,
    deg: Degradation,
    y: Tensor,
    x_prior: Tensor,
    op: InducedOperator,
    weight: float = 1.0,
) -> Tensor:
    """``g^-1(A_H^+ g(H^+ y) + (I - A_H^+ A_H) g(x_prior))`` followed by the exact pixel-space
    consistency step (relaxed by ``weight`` with noise)."""
    w = op.pinv(encode(deg.pinv(y)).double()) + op.null(encode(x_prior))
    x = decode(w.to(y.dtype))
    return deg.consistency_step(x, y, weight)


# --- MAP on the fixed-point set -------------------------------------------------------------


@dataclass
class CoordPrior:
    """Gaussian model ``N(mean, L L^T)`` of the data's coordinates ``c = coords(g(x))`` on the
    fixed-point set (fitted on training digits by :func:`fit_coord_prior`)."""

    mean: Tensor
    chol: Tensor


@torch.no_grad()
def fit_coord_prior(coords_of: Map, images: Tensor) -> CoordPrior:
    """Mean and Cholesky factor of the coordinates of ``images`` (a small ridge keeps it SPD)."""
    c = coords_of(images).double()
    cov = torch.cov(c.T) + 1e-9 * torch.eye(c.shape[1], dtype=c.dtype)
    return CoordPrior(c.mean(0), torch.linalg.cholesky(cov))


def range_map(
    decode_coords: Map,
    deg: Degradation,
    y: Tensor,
    c0: Tensor,
    prior: CoordPrior,
    *,
    noise_var: float,
    steps: int = DEFAULT.map_steps,
    lr: float = 0.1,
) -> tuple[Tensor, list[float]]:
    """MAP estimate on the model's fixed-point set, parametrised *exactly* by its coordinates:
    every ``x = g^-1(basis c)`` satisfies ``P(x) = x``. Minimises
    ``|H x(c) - y|^2 / (2 noise_var) + |u|^2 / 2`` over whitened coordinates
    ``c = mean + L u`` by Adam from ``c0`` (e.g. the alternating projections' last point).
    ``noise_var``: per-pixel variance of the observation's misfit (measurement noise plus the
    prior's own error). ``lr`` 0.1 in whitened units and 50 steps come from 40 *training*
    digits (the objective is within a few per cent of its 150-step value). Returns ``x(c)`` and
    the mean objective per step."""
    mean, chol = prior.mean.to(c0), prior.chol.to(c0)
    u0 = torch.linalg.solve_triangular(chol, (c0 - mean).T, upper=False).T
    u = u0.clone().requires_grad_(True)
    opt = torch.optim.Adam([u], lr=lr)
    trace = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        r = deg.H(decode_coords(mean + u @ chol.T)) - y
        per = r.flatten(1).square().sum(1) / (2 * noise_var) + 0.5 * u.square().sum(1)
        per.sum().backward()
        opt.step()
        trace.append(float(per.detach().mean()))
    with torch.no_grad():
        return decode_coords(mean + u.detach() @ chol.T), trace


# --- noise optimisation through the one-step generator ---------------------------------------


def noise_optimisation(
    generate: Map,
    deg: Degradation,
    y: Tensor,
    *,
    steps: int = DEFAULT.noise_steps,
    lam: float = 0.01,
    lr: float = 0.05,
    z0: Tensor | None = None,
) -> tuple[Tensor, list[float]]:
    """``argmin_z |H f(z) - y|^2 + lam |z|^2`` by Adam from ``z0`` (0 by default), per image
    (the batch's objectives are summed; they do not interact). Returns ``f(z)`` and the mean
    objective per step."""
    z = (torch.zeros_like(deg.pinv(y)) if z0 is None else z0.clone()).requires_grad_(True)
    opt = torch.optim.Adam([z], lr=lr)
    trace = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        r = deg.H(generate(z)) - y
        per = r.flatten(1).square().sum(1) + lam * z.flatten(1).square().sum(1)
        per.sum().backward()
        opt.step()
        trace.append(float(per.detach().mean()))
    with torch.no_grad():
        return generate(z.detach()), trace
