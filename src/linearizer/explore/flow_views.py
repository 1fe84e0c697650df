"""What the explorer computes for a one-step flow run: generate, walk, invert, interpolate.

The generator is ``f = g_data^-1 B g_noise`` with the collapsed matrix ``B`` (float64). ``B`` and
its SVD ``B = U S V^T`` are computed once when the explorer opens (``B`` is also cached by the
model per ``(T, method)``), so an interaction costs a few network passes and small matrix
products. Each handler returns uint8 pictures and a Markdown line; bad input raises
:class:`~linearizer.errors.LinearizerError`.

A walk moves the noise's latent along the top right singular vectors, ``z0 + sum_i c_i s_i v_i``
(``s_i``: the spread of the coordinate ``v_i . g_noise(x0)`` over Gaussian noise, so ``c_i`` is
in standard deviations); because ``f`` is linear in the induced spaces, the output latent is
exactly ``B z0 + sum_i c_i s_i sigma_i u_i``, which the walk reports alongside the image.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from ..errors import LinearizerError
from ..flow.inversion import interpolate, round_trip, round_trip_note
from ..flow.model import DATA, NOISE, OneStepFlow
from ..flow.spec import SamplerSpec, sample_spec
from .images import noise_picture, picture, to_model_image

F64 = torch.float64
METHODS = ("euler", "rk4")
MAX_COUNT = 16
MAX_STEPS = 1000
MAX_FRAMES = 16


def _psnr(a: Tensor, b: Tensor) -> float:
    mse = float(((a.clamp(0, 1) - b.clamp(0, 1)).double() ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(1 / mse)


def _noise(seed: int, count: int, shape: tuple[int, ...], like: Tensor) -> Tensor:
    gen = torch.Generator().manual_seed(int(seed))
    return torch.randn(count, *shape, generator=gen).to(like)


class FlowViews:
    """Handlers of the Generate, Walk and Invert & edit tabs over one :class:`OneStepFlow`.

    ``k`` singular directions are offered as sliders; ``spec`` (default: the run's sampler)
    is the sampler of Generate, and with its last interval skipped (invertible) the B that the
    walk and the inversion use; noise is drawn at its temperature.
    """

    def __init__(
        self,
        model: OneStepFlow,
        spec: SamplerSpec | None = None,
        *,
        k: int = 6,
        n_scale: int = 256,
    ) -> None:
        self.model = model
        self.spec = sample_spec(spec, dtype="float64")
        self.walk_spec = self.spec.invertible()
        self.shape = model.image_shape
        self.steps, self.method = self.spec.steps, self.spec.method
        self.param = next(model.parameters())
        with torch.no_grad():
            self.b = model.one_step_matrix(self.walk_spec)
            u, s, vh = torch.linalg.svd(self.b)
            self.k = max(1, min(int(k), model.dim))
            self.sigma = s
            self.u, self.v = u[:, : self.k].T.contiguous(), vh[: self.k].contiguous()
            z0 = self._encode_noise(self._x0(0, n_scale))
            self.spread = (z0 @ self.v.T).std(dim=0)

    # -- helpers -----------------------------------------------------------------------------
    def _x0(self, seed: int, count: int) -> Tensor:
        return self.spec.temperature * _noise(seed, count, self.shape, self.param)

    def _encode_noise(self, x0: Tensor) -> Tensor:
        return self.model.encode(x0, NOISE).to(F64)

    def _decode_data(self, z1: Tensor) -> Tensor:
        return self.model.decode(z1.to(self.param), DATA)

    def _check(self, steps: int, method: str, count: int = 1) -> tuple[int, str, int]:
        steps, count = int(steps), int(count)
        if not 1 <= steps <= MAX_STEPS:
            raise LinearizerError(f"T must be in 1..{MAX_STEPS}, got {steps}")
        if method not in METHODS:
            raise LinearizerError(f"method must be one of {METHODS}, got {method!r}")
        if not 1 <= count <= MAX_COUNT:
            raise LinearizerError(f"count must be in 1..{MAX_COUNT}, got {count}")
        return steps, method, count

    def model_input(self, array: np.ndarray) -> Tensor:
        return to_model_image(array, self.shape).to(self.param)

    # -- Generate ----------------------------------------------------------------------------
    @torch.no_grad()
    def generate(
        self, seed: int, count: int, steps: int, method: str
    ) -> tuple[np.ndarray, np.ndarray, str]:
        """One-step (``x = g_data^-1(B g_noise(x0))``) and multi-step samples of the same noise,
        their PSNR and the time each took."""
        steps, method, count = self._check(steps, method, count)
        spec = self.spec.replace(steps=steps, method=method)
        x0 = self._x0(seed, count)
        t0 = time.perf_counter()
        cached = self.model.is_cached(spec)
        self.model.one_step_matrix(spec)
        t1 = time.perf_counter()
        one = self.model.sample(x0, spec)
        t2 = time.perf_counter()
        multi = self.model.sample(x0, spec, one_step=False)
        t3 = time.perf_counter()
        psnr = _psnr(one, multi)
        gap = float((one - multi).abs().max())
        collapse = "cached" if cached else f"collapsed in {1e3 * (t1 - t0):.0f} ms, now cached"
        text = (
            f"**{spec.describe()}**, temperature {spec.temperature:g}, {count} samples, "
            f"seed {seed}. One step (B {collapse}): "
            f"{1e3 * (t2 - t1):.1f} ms; multi-step ({steps} steps): {1e3 * (t3 - t2):.1f} ms. "
            f"One-step vs multi-step: PSNR {'∞' if math.isinf(psnr) else f'{psnr:.1f}'} dB, "
            f"max |difference| {gap:.1e} (float64 latents; equal up to rounding)."
        )
        nrow = min(count, 4)
        return picture(one, nrow), picture(multi, nrow), text

    # -- Walk --------------------------------------------------------------------------------
    @torch.no_grad()
    def walk(self, seed: int, coefficients: Sequence[float]) -> tuple[np.ndarray, np.ndarray, str]:
        """The sample of noise ``seed`` moved by ``c_i`` standard deviations along the top
        induced singular directions; returns (walked sample, unmoved sample, the combination)."""
        c = torch.as_tensor([float(x) for x in coefficients], dtype=F64)
        z1, base, predicted = self.walk_latents(seed, c)
        rel = float((z1 - predicted).norm() / z1.norm())
        images = self._decode_data(torch.cat([z1, base]))
        terms = [
            f"{float(ci):+.2f}·{float(s):.3g}·{float(sg):.3g}·u{i + 1}"
            for i, (ci, s, sg) in enumerate(zip(c, self.spread, self.sigma))
            if ci != 0
        ]
        combo = " ".join(terms) if terms else "+ 0"
        text = (
            f"g_data(x) = B g_noise(x0) {combo} (c_i · s_i · σ_i · u_i); "
            f"relative difference from B (g_noise(x0) + Σ c_i s_i v_i): {rel:.1e}. "
            f"σ_1..{self.k} = {', '.join(f'{float(s):.3g}' for s in self.sigma[: self.k])}."
        )
        return picture(images[:1]), picture(images[1:]), text

    @torch.no_grad()
    def walk_latents(self, seed: int, c: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Data latents of the walk: ``B (z0 + sum_i c_i s_i v_i)``, ``B z0``, and the induced
        combination ``B z0 + sum_i c_i s_i sigma_i u_i`` (equal to the first up to rounding)."""
        if c.numel() != self.k or not torch.isfinite(c).all():
            raise LinearizerError(f"the walk takes {self.k} finite coefficients, got {c.numel()}")
        z0 = self._encode_noise(self._x0(seed, 1))
        step = c.to(F64) * self.spread
        z1 = (z0 + step @ self.v) @ self.b.T  # the generator applied to the moved noise
        base = z0 @ self.b.T
        return z1, base, base + (step * self.sigma[: self.k]) @ self.u

    # -- Invert & edit -----------------------------------------------------------------------
    @torch.no_grad()
    def invert(self, array: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
        """A picture -> its noise ``x0 = g_noise^-1(B^-1 g_data(x))`` -> regenerated ``f(x0)``."""
        x1 = self.model_input(array)
        x0, again = round_trip(self.model, x1, self.b)
        err = float((again - x1).abs().max())
        note = round_trip_note(x1, again)
        text = (
            f"noise x0 = g_noise^-1(B^-1 g_data(x)) with B = {self.walk_spec.describe()}: "
            f"mean {float(x0.mean()):+.2f}, std {float(x0.std()):.2f}. "
            f"max |f(x0) − x| = {err:.1e} "
            + ("(exact up to rounding)." if note is None else "**(not exact: this picture lies "
               "far from the training digits, where B^-1 and the noise side amplify rounding)**.")
        )
        return picture(x1), noise_picture(x0), picture(again), text

    @torch.no_grad()
    def interpolate(
        self, first: np.ndarray, second: np.ndarray, frames: int = 8
    ) -> tuple[np.ndarray, np.ndarray, str]:
        """``frames`` images from one picture to another: along the straight line between their
        inverted noises, and along the straight line in the data network's induced space."""
        frames = int(frames)
        if not 2 <= frames <= MAX_FRAMES:
            raise LinearizerError(f"frames must be in 2..{MAX_FRAMES}, got {frames}")
        xa, xb = self.model_input(first), self.model_input(second)
        in_noise = interpolate(self.model, xa, xb, self.b, n=frames, space="noise")
        in_latent = interpolate(self.model, xa, xb, self.b, n=frames, space="latent")
        text = (
            f"{frames} frames. Top: (1−a) x0_A + a x0_B in noise, each generated. Bottom: "
            f"g_data^-1((1−a) g_data(A) + a g_data(B)), the straight line where f is linear."
        )
        return picture(in_noise, nrow=frames), picture(in_latent, nrow=frames), text

    def sample_picture(self, seed: int) -> np.ndarray:
        """A one-step sample of noise ``seed`` (an input when nothing was drawn or uploaded)."""
        with torch.no_grad():
            x0 = self._x0(seed, 1)
            z1 = self._encode_noise(x0) @ self.b.T
            x = self._decode_data(z1).clamp(0, 1)
        return np.rint(x[0, 0].double().cpu().numpy() * 255).astype(np.uint8)
