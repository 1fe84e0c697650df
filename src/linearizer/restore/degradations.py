"""Degradations with known operators: ``y = H(x) + sigma * n`` on image batches ``[N, C, S, S]``.

Each :class:`Degradation` applies ``H``, ``H^T`` and ``H^+`` matrix-free (tests compare them with
the dense matrices in float64). Linear ones:

* ``inpaint-box``: the centre square (side 7/16 of the image: 14 px of 32) is missing.
  ``H = diag(M)`` for the 0/1 mask ``M`` (a row selection written in image form, missing
  pixels read as 0, so an observation keeps the image's shape); ``H = H^T = H^+``.
* ``inpaint-random``: 70 % of the pixels missing, a fresh mask per image (seeded); as above.
* ``sr2``, ``sr4``: average pooling by ``s``; ``H^T`` = nearest upsampling / ``s^2`` and
  ``H^+ = s^2 H^T`` (because ``H H^T = I / s^2``).
* ``denoise-0.2``, ``denoise-0.4``: ``H = I`` with Gaussian measurement noise of that std.
* ``deblur``: circular Gaussian blur (std 2 px), diagonal in the 2-D DFT with eigenvalues
  ``h(w)``. ``H^+`` is the *truncated* pseudo-inverse: frequencies with ``|h(w)| <= tau``
  (``tau = 0.01``, 1 % of the largest) count as unobserved, i.e. ``H^+`` is the exact
  Moore-Penrose pseudo-inverse of ``H_tau`` (``H`` with those eigenvalues set to 0). Without
  the truncation the blur is invertible in exact arithmetic but its inverse amplifies float32
  rounding by up to 1e9. Data consistency is exact for ``H_tau``; against ``H`` it is bounded by
  ``tau`` times the unobserved part of the error.

One non-linear degradation:

* ``blur-gamma``: the same blur followed by a signed gamma curve, ``y = s(Bx)`` with
  ``s(u) = sign(u) |u|^2`` (contrast loss in the dark strokes' edges). ``s`` is invertible, so
  ``H^+(y) = B^+ s^-1(y)`` is a right inverse on the observed frequencies and the consistency
  step ``x <- x + B^+(s^-1(y) - Bx)`` is exact in the linear variable ``Bx`` (``H^T`` is the
  adjoint of the Jacobian at ``x``, :meth:`Degradation.vjp`).

>>> import torch
>>> deg = make_degradation("sr2", (1, 8, 8))
>>> x = torch.rand(2, 1, 8, 8, dtype=torch.float64)
>>> y = deg.H(x)
>>> bool(torch.allclose(deg.H(deg.pinv(y)), y, rtol=1e-12, atol=0))
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import LinearizerError

BOX_FRACTION = 7 / 16
RANDOM_MISSING = 0.7
BLUR_SIGMA = 2.0
BLUR_TAU = 0.01
GAMMA = 2.0

TASKS = (
    "inpaint-box",
    "inpaint-random",
    "sr2",
    "sr4",
    "denoise-0.2",
    "denoise-0.4",
    "deblur",
    "blur-gamma",
)


@dataclass
class Degradation:
    """Base: ``H`` linear, square, identity. Subclasses override the four maps.

    ``sigma``: std of the Gaussian measurement noise (0: noiseless); ``linear``: whether ``H``
    is linear (``blur-gamma`` is not); ``image_shape``: ``(C, S, S)``.
    """

    name: str
    image_shape: tuple[int, int, int]
    sigma: float = 0.0
    linear: bool = True

    def H(self, x: Tensor) -> Tensor:
        """The forward operator (no noise)."""
        return x

    def Ht(self, y: Tensor) -> Tensor:
        """The adjoint ``H^T`` (of the Jacobian at 0 for a non-linear ``H``)."""
        return y

    def pinv(self, y: Tensor) -> Tensor:
        """``H^+ y`` (see the module docstring for the truncated blur and ``blur-gamma``)."""
        return y

    def obs_shape(self) -> tuple[int, ...]:
        """Shape of one observation."""
        return self.image_shape

    def measure(self, x: Tensor, gen: torch.Generator | None = None) -> Tensor:
        """``y = H(x) + sigma * n`` with ``n`` drawn from ``gen``."""
        y = self.H(x)
        if self.sigma > 0:
            y = y + self.sigma * torch.randn(y.shape, generator=gen, dtype=torch.float64).to(y)
        return y

    def consistency_step(self, x: Tensor, y: Tensor, weight: float = 1.0) -> Tensor:
        """``x + weight * H^+(y - H x)``: with ``weight = 1`` the exact projection onto
        ``{x : H x = y}`` along the null space (linear ``H``), so ``H`` of it is ``y``."""
        return x + weight * self.pinv(y - self.H(x))

    def null_project(self, x: Tensor) -> Tensor:
        """``(I - H^+ H) x``: the part of ``x`` the observation does not see."""
        return x - self.pinv(self.H(x))

    def model_residual(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """``(r, ref)``: the residual of ``x`` in the operator the solvers use, and the quantity
        it is relative to. ``(H x - y, y)`` here; the blurs use their truncated operator."""
        return self.H(x) - y, y

    def fit_shape(self, n: int) -> None:
        """Prepare per-image state (masks) for a batch of ``n`` images; nothing by default."""

    def select(self, index: slice) -> Degradation:
        """The degradation of a sub-batch (per-image state sliced); ``self`` by default."""
        return self


@dataclass
class Inpaint(Degradation):
    """``H = diag(mask)``; ``mask [N or 1, C, S, S]`` of 0/1 (1 = observed)."""

    mask: Tensor | None = None

    def _m(self, x: Tensor) -> Tensor:
        if self.mask is None:
            raise LinearizerError(f"{self.name}: no mask set (call fit_shape(n) first)")
        if self.mask.shape[0] not in (1, x.shape[0]):
            raise LinearizerError(
                f"{self.name}: mask for {self.mask.shape[0]} images, batch of {x.shape[0]}"
            )
        return self.mask.to(x)

    def H(self, x: Tensor) -> Tensor:
        return x * self._m(x)

    Ht = H
    pinv = H

    def select(self, index: slice) -> Inpaint:
        if self.mask is None or self.mask.shape[0] == 1:
            return self
        return Inpaint(self.name, self.image_shape, self.sigma, True, self.mask[index])


@dataclass
class RandomInpaint(Inpaint):
    """A fresh random mask per image, ``missing`` of the pixels dropped, from ``seed``."""

    missing: float = RANDOM_MISSING
    seed: int = 0

    def fit_shape(self, n: int) -> None:
        gen = torch.Generator().manual_seed(int(self.seed) + 7)
        u = torch.rand(n, *self.image_shape, generator=gen)
        self.mask = (u >= self.missing).to(torch.float32)


@dataclass
class AvgPool(Degradation):
    """Average pooling by ``factor`` (image side divisible by it)."""

    factor: int = 2

    def H(self, x: Tensor) -> Tensor:
        return torch.nn.functional.avg_pool2d(x, self.factor)

    def Ht(self, y: Tensor) -> Tensor:
        return self.pinv(y) / (self.factor * self.factor)

    def pinv(self, y: Tensor) -> Tensor:
        s = self.factor
        return y.repeat_interleave(s, -2).repeat_interleave(s, -1)

    def obs_shape(self) -> tuple[int, ...]:
        c, h, w = self.image_shape
        return (c, h // self.factor, w // self.factor)


def gaussian_spectrum(size: int, sigma: float) -> Tensor:
    """Eigenvalues ``h [size, size]`` (float64, real, ``h[0, 0] = 1``) of the circular Gaussian
    blur: the DFT of the normalised kernel on circular distances (positive for 32 px at std 2;
    on tiny grids some can be negative, hence |h| in the truncation)."""
    d = torch.arange(size, dtype=torch.float64)
    d = torch.minimum(d, size - d)  # circular distance
    k1 = torch.exp(-0.5 * (d / sigma) ** 2)
    k2 = k1[:, None] * k1[None, :]
    k2 = k2 / k2.sum()
    return torch.fft.fft2(k2).real  # the kernel is even, so its DFT is real


@dataclass
class Blur(Degradation):
    """Circular Gaussian blur with std ``blur_sigma``; ``H^+`` truncated at ``tau``."""

    blur_sigma: float = BLUR_SIGMA
    tau: float = BLUR_TAU

    def _spec(self, x: Tensor) -> Tensor:
        return gaussian_spectrum(self.image_shape[-1], self.blur_sigma).to(x.device)

    def _apply(self, x: Tensor, gain: Tensor) -> Tensor:
        # float64 spectra: the blur's small eigenvalues would lose digits in float32 FFTs.
        out = torch.fft.ifft2(torch.fft.fft2(x.to(torch.float64)) * gain).real
        return out.to(x.dtype)

    def H(self, x: Tensor) -> Tensor:
        return self._apply(x, self._spec(x))

    Ht = H  # symmetric kernel: H is symmetric

    def pinv(self, y: Tensor) -> Tensor:
        h = self._spec(y)
        keep = h.abs() > self.tau * h.abs().max()
        inv = torch.where(keep, 1.0 / torch.where(keep, h, torch.ones_like(h)), torch.zeros_like(h))
        return self._apply(y, inv)

    def H_tau(self, x: Tensor) -> Tensor:
        """The truncated blur whose exact pseudo-inverse :meth:`pinv` is."""
        h = self._spec(x)
        keep = h.abs() > self.tau * h.abs().max()
        return self._apply(x, torch.where(keep, h, torch.zeros_like(h)))

    def model_residual(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        # In the linear variable: H_tau x against H_tau H^+ y (= the observed part of Bx).
        ref = Blur.H_tau(self, self.pinv(y))
        return Blur.H_tau(self, x) - ref, ref


def signed_power(u: Tensor, p: float) -> Tensor:
    """``sign(u) |u|^p`` (invertible for p > 0: its inverse is ``signed_power(., 1/p)``)."""
    return torch.sign(u) * u.abs().pow(p)


@dataclass
class BlurGamma(Blur):
    """``y = s(B x)``, ``s(u) = sign(u)|u|^gamma``: non-linear, invertible after the blur."""

    gamma: float = GAMMA

    def H(self, x: Tensor) -> Tensor:
        return signed_power(super().H(x), self.gamma)

    def pinv(self, y: Tensor) -> Tensor:
        return super().pinv(signed_power(y, 1.0 / self.gamma))

    def vjp(self, x: Tensor, v: Tensor) -> Tensor:
        """``J_H(x)^T v``: the adjoint of the Jacobian of ``H`` at ``x``."""
        u = Blur.H(self, x)
        return Blur.Ht(self, self.gamma * u.abs().pow(self.gamma - 1) * v)

    def consistency_step(self, x: Tensor, y: Tensor, weight: float = 1.0) -> Tensor:
        # Correct the linear variable Bx (the gamma curve is inverted exactly first).
        target = signed_power(y, 1.0 / self.gamma)
        return x + weight * Blur.pinv(self, target - Blur.H(self, x))

    def null_project(self, x: Tensor) -> Tensor:
        return x - Blur.pinv(self, Blur.H(self, x))


def make_degradation(task: str, image_shape: tuple[int, ...], seed: int = 0) -> Degradation:
    """The degradation named ``task`` (one of :data:`TASKS`) for images of ``image_shape``."""
    shape = tuple(int(s) for s in image_shape)
    if len(shape) != 3 or shape[1] != shape[2]:
        raise LinearizerError(f"degradations need square images (C, S, S), got {shape}")
    c, s, _ = shape
    if task == "inpaint-box":
        side = max(1, round(BOX_FRACTION * s))
        lo = (s - side) // 2
        mask = torch.ones(1, *shape)
        mask[..., lo : lo + side, lo : lo + side] = 0.0
        return Inpaint(task, shape, mask=mask)
    if task == "inpaint-random":
        return RandomInpaint(task, shape, seed=seed)
    if task in ("sr2", "sr4"):
        factor = int(task[2:])
        if s % factor:
            raise LinearizerError(f"{task}: image side {s} is not divisible by {factor}")
        return AvgPool(task, shape, factor=factor)
    if task.startswith("denoise-"):
        try:
            sigma = float(task.split("-", 1)[1])
        except ValueError:
            sigma = math.nan
        if not sigma > 0:
            raise LinearizerError(f"{task}: the noise std must be a positive number")
        return Degradation(task, shape, sigma=sigma)
    if task == "deblur":
        return Blur(task, shape)
    if task == "blur-gamma":
        return BlurGamma(task, shape, linear=False)
    raise LinearizerError(f"unknown task {task!r}; choose from {', '.join(TASKS)}")
