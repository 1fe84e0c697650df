"""What the explorer computes for a one-step flow run: generate, walk, invert, interpolate.

The generator is ``f = g_data^-1 B g_noise`` with the collapsed matrix ``B``, in float64 like the
networks the views run (a float32 model is copied to float64: inverting ``B`` amplifies float32
rounding of the data latent beyond a usable round trip on a well-trained model). ``B`` and
its SVD ``B = U S V^T`` are computed once when the explorer opens (``B`` is also cached by the
model per ``(T, method)``), so an interaction costs a few network passes and small matrix
products. Each handler returns uint8 pictures and a Markdown line; bad input raises
:class:`~linearizer.errors.LinearizerError`.

A walk moves the noise's latent along the top right singular vectors, ``z0 + sum_i c_i s_i v_i``
(``s_i``: the spread of the coordinate ``v_i . g_noise(x0)`` over Gaussian noise, so ``c_i`` is
in standard deviations); because ``f`` is linear in the induced spaces, the output latent is
exactly ``B z0 + sum_i c_i s_i sigma_i u_i``, which the walk reports alongside the image.

A class-conditional run has one exact generator per class ``c`` and guidance ``w``,
``B_{c,w}`` collapsed from ``(1 + w) A(t, c) - w A(t, null)``; each handler takes the class
(``"mixture"``: classes drawn from the training frequencies) and the guidance, and the
``B_{c,w}`` it needs, with its SVD, is built on first use and kept. The Invert & edit tab
inverts under the image's class and swaps it: the same noise through another class's B.
A mixture found without labels is picked the same way, by component (drawn from its learned
weights), and has no guidance: there is no null class to guide against.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..errors import LinearizerError
from ..flow.inversion import interpolate, psnr_per_image, round_trip, round_trip_note
from ..flow.model import DATA, NOISE, OneStepFlow
from ..flow.spec import SamplerSpec, sample_spec
from ..metrics.image import psnr_from_mse
from .images import in_range, noise_picture, picture, to_model_image

F64 = torch.float64
METHODS = ("euler", "rk4")
MAX_COUNT = 16
MAX_STEPS = 1000
MAX_FRAMES = 16
MIXTURE = "mixture"  # the picker's choice of components drawn from the mixture weights
ALL = "all"  # the swap picker's choice of every component
MAX_GUIDANCE = 4.0  # the guidance slider's range is 0..MAX_GUIDANCE
NOT_EXACT = (
    "**(not exact: this picture lies far from the training digits, where B^-1 and the "
    "noise side amplify rounding)**"
)


def _db(psnr: float) -> str:
    return "∞" if math.isinf(psnr) else f"{psnr:.1f}"


@dataclass(frozen=True)
class Basis:
    """The collapsed ``B`` of one (invertible) sampler and its top singular directions:
    ``sigma`` all singular values, ``u``/``v`` the top ``k`` as rows, ``spread`` the standard
    deviation of each ``v_i . g_noise(x0)`` over Gaussian noise."""

    spec: SamplerSpec
    b: Tensor
    sigma: Tensor
    u: Tensor
    v: Tensor
    spread: Tensor


class FlowViews:
    """Handlers of the Generate, Walk and Invert & edit tabs over one :class:`OneStepFlow`.

    ``k`` singular directions are offered as sliders; ``spec`` (default: the run's sampler)
    is the sampler of Generate, and with its last interval skipped (invertible) the B that the
    walk and the inversion use; noise is drawn at its temperature. On a class-conditional model
    the handlers' ``component`` and ``guidance`` default to the spec's (``component`` None
    there: the mixture), and ``b``/``sigma`` are those of the spec's component (0 for the
    mixture).
    """

    def __init__(
        self, model: OneStepFlow, spec: SamplerSpec | None = None, *, k: int = 6, n_scale: int = 256
    ) -> None:
        if next(model.parameters()).dtype != F64:
            # the networks in float64 too, as the commands run them for a float64 spec: B^-1
            # (condition number up to ~1e4) amplifies float32 rounding of g_data(x) past use
            model = copy.deepcopy(model).double()
        self.model = model
        # a mixture's components are picked like a conditional model's classes; they are
        # called classes only where they are the training labels, and only then guidable
        components = int(getattr(model, "components", 1))
        self.components = components if components > 1 else 0
        self.guided = bool(model.classes)
        self.noun = "class" if self.guided else "component"
        self.nouns = "classes" if self.guided else "components"
        self.spec = sample_spec(spec, dtype="float64")
        self.walk_spec = self.spec.invertible()
        self.shape = model.image_shape
        self.steps, self.method = self.spec.steps, self.spec.method
        self.param = next(model.parameters())
        self.k = max(1, min(int(k), model.dim))
        self._bases: dict[tuple[int | None, float], Basis] = {}
        with torch.no_grad():  # the noise the spreads are measured on, shared by every B
            self._scale_z0 = self._encode_noise(self._x0(0, n_scale))
        # the B the page describes: the spec's class (class 0 when the spec is the mixture)
        first_class = 0 if self.components and self.spec.component is None else self.spec.component
        self.first = first = self.basis(first_class, self.spec.guidance)
        self.b, self.sigma = first.b, first.sigma

    # -- helpers -----------------------------------------------------------------------------
    def _x0(self, seed: int, count: int) -> Tensor:
        gen = torch.Generator().manual_seed(int(seed))
        return self.spec.temperature * torch.randn(count, *self.shape, generator=gen).to(self.param)

    def _encode_noise(self, x0: Tensor) -> Tensor:
        return self.model.encode(x0, NOISE).to(F64)

    def _decode_data(self, z1: Tensor) -> Tensor:
        return self.model.decode(z1.to(self.param), DATA)

    def model_input(self, array: np.ndarray) -> Tensor:
        return to_model_image(array, self.shape).to(self.param)

    # -- components (classes) and guidance ---------------------------------------------------
    @property
    def class_choices(self) -> list[str]:
        """The picker's choices: the mixture, then every component (none for one generator)."""
        return [MIXTURE, *map(str, range(self.components))] if self.components else []

    @property
    def default_class(self) -> str:
        """The class picker's first value: the spec's class, else the mixture."""
        return MIXTURE if self.spec.component is None else str(self.spec.component)

    def parse_class(self, value: int | str | None, *, mixture: bool = True) -> int | None:
        """A picker's value as a class: None (the spec's), ``"mixture"`` (None: classes drawn
        from the training frequencies; refused when ``mixture`` is False) or ``0..C-1``."""
        if value is None:
            value = MIXTURE if self.spec.component is None else self.spec.component
        if not self.components:
            if value == MIXTURE:
                return None
            raise LinearizerError("this run is not class-conditional: it has no class to pick")
        if isinstance(value, str) and value.strip().lower() == MIXTURE:
            if not mixture:
                raise LinearizerError(
                    f"this needs one {self.noun}'s B: pick the image's {self.noun} "
                    f"(0..{self.components - 1}), not the mixture"
                )
            return None
        return self._class_index(value)

    def _class_index(self, value: object) -> int:
        try:
            c = int(str(value).strip()) if not isinstance(value, bool) else None
        except ValueError:
            c = None
        if c is None:
            raise LinearizerError(
                f"{self.noun} must be '{MIXTURE}' or 0..{self.components - 1}, got {value!r}"
            )
        if not 0 <= c < self.components:
            raise LinearizerError(
                f"{self.noun} {c} is out of range: the model has {self.nouns} "
                f"0..{self.components - 1}"
            )
        return c

    def parse_guidance(self, value: float | None) -> float:
        """A slider's guidance w (None: the spec's); a finite number, and 0 when unconditional."""
        if value is None:
            return float(self.spec.guidance)
        try:
            w = float(value)
        except (TypeError, ValueError):
            raise LinearizerError(f"guidance must be a number, got {value!r}") from None
        if not math.isfinite(w):
            raise LinearizerError(f"guidance must be a finite number, got {value!r}")
        if w and not self.guided:
            raise LinearizerError("guidance needs a class-conditional run")
        return w

    @property
    def drawn_from(self) -> str:
        """What a mixture draws its components from."""
        return "training frequencies" if self.guided else "learned mixture weights"

    def _drawn(self, seed: int, count: int) -> Tensor:
        """``count`` classes drawn from the training frequencies, the same for the same seed."""
        return self.model.draw_labels(count, torch.Generator().manual_seed(int(seed)))

    @torch.no_grad()
    def basis(self, component: int | None, guidance: float = 0.0) -> Basis:
        """The invertible ``B`` of ``component`` (None for one generator) at ``guidance``, and
        its SVD; built on first use, then kept."""
        key = (component, float(guidance))
        hit = self._bases.get(key)
        if hit is None:
            spec = self.walk_spec.replace(component=component, guidance=float(guidance))
            b = self.model.one_step_matrix(spec)
            f = self.model.generator(spec)
            top, s = f.svd(self.k), f.singular_values()
            u, v = top.U_lat.T.contiguous(), top.V_lat.T.contiguous()
            spread = (self._scale_z0 @ v.T).std(dim=0)
            hit = self._bases[key] = Basis(spec, b, s, u, v, spread)
        return hit

    def _inversion_basis(self, component: int | str | None) -> Basis:
        """The B an inversion uses: the image's class (the mixture is refused) at the spec's
        guidance."""
        return self.basis(self.parse_class(component, mixture=False), self.parse_guidance(None))

    # -- Generate ----------------------------------------------------------------------------
    @torch.no_grad()
    def generate(
        self,
        seed: int,
        count: int,
        steps: int,
        method: str,
        component: int | str | None = None,
        guidance: float | None = None,
    ) -> tuple[np.ndarray, np.ndarray, str]:
        """One-step (``x = g_data^-1(B g_noise(x0))``) and multi-step samples of the same noise,
        their PSNR and the time each took. A conditional model samples component ``component`` at
        ``guidance``; the mixture draws each sample's class (from ``seed``)."""
        steps, count = int(steps), int(count)
        in_range("T", steps, 1, MAX_STEPS)
        if method not in METHODS:
            raise LinearizerError(f"method must be one of {METHODS}, got {method!r}")
        in_range("count", count, 1, MAX_COUNT)
        c, w = self.parse_class(component), self.parse_guidance(guidance)
        spec = self.spec.replace(steps=steps, method=method, component=c, guidance=w)
        x0 = self._x0(seed, count)
        labels = self._drawn(seed, count) if self.components and c is None else None
        per_class, mixture = [spec], ""
        if labels is not None:
            per_class = [spec.replace(component=int(v)) for v in labels.unique().tolist()]
            mixture = (
                f" A mixture: {self.nouns} {', '.join(map(str, labels.tolist()))} drawn from "
                f"the {self.drawn_from}, each sample through its {self.noun}'s exact generator."
            )
        t0 = time.perf_counter()
        cached = all(self.model.is_cached(s) for s in per_class)
        for s in per_class:
            self.model.one_step_matrix(s)
        t1 = time.perf_counter()
        one = self.model.sample(x0, spec, labels=labels)
        t2 = time.perf_counter()
        multi = self.model.sample(x0, spec, one_step=False, labels=labels)
        t3 = time.perf_counter()
        psnr = psnr_from_mse(float(((one.clamp(0, 1) - multi.clamp(0, 1)).double() ** 2).mean()))
        gap = float((one - multi).abs().max())
        collapse = "cached" if cached else f"collapsed in {1e3 * (t1 - t0):.0f} ms, now cached"
        text = (
            f"**{spec.describe()}**, temperature {spec.temperature:g}, {count} samples, "
            f"seed {seed}.{mixture} One step (B {collapse}): "
            f"{1e3 * (t2 - t1):.1f} ms; multi-step ({steps} steps): {1e3 * (t3 - t2):.1f} ms. "
            f"One-step vs multi-step: PSNR {_db(psnr)} dB, "
            f"max |difference| {gap:.1e} (float64 latents; equal up to rounding)."
        )
        nrow = min(count, 4)
        return picture(one, nrow), picture(multi, nrow), text

    # -- Walk --------------------------------------------------------------------------------
    @torch.no_grad()
    def walk(
        self,
        seed: int,
        coefficients: Sequence[float],
        component: int | str | None = None,
        guidance: float | None = None,
    ) -> tuple[np.ndarray, np.ndarray, str]:
        """The sample of noise ``seed`` moved by ``c_i`` standard deviations along the top
        induced singular directions; returns (walked sample, unmoved sample, the combination).
        A mixture walks ``component``'s B at ``guidance`` (None: the component drawn from
        ``seed``)."""
        c = torch.as_tensor([float(x) for x in coefficients], dtype=F64)
        basis, drawn = self._walk_basis(seed, component, guidance)
        z1, base, predicted = self._walk_latents(seed, c, basis)
        rel = float((z1 - predicted).norm() / z1.norm())
        images = self._decode_data(torch.cat([z1, base]))
        terms = [
            f"{float(ci):+.2f}·{float(s):.3g}·{float(sg):.3g}·u{i + 1}"
            for i, (ci, s, sg) in enumerate(zip(c, basis.spread, basis.sigma))
            if ci != 0
        ]
        combo = " ".join(terms) if terms else "+ 0"
        text = (
            f"g_data(x) = B g_noise(x0) {combo} (c_i · s_i · σ_i · u_i); "
            f"relative difference from B (g_noise(x0) + Σ c_i s_i v_i): {rel:.1e}. "
            f"σ_1..{self.k} = {', '.join(f'{float(s):.3g}' for s in basis.sigma[: self.k])}."
        )
        if self.components:
            drawn_note = f" ({self.noun} drawn from the {self.drawn_from} for seed {seed})"
            text += f" B: **{basis.spec.describe()}**{drawn_note if drawn else ''}."
        return picture(images[:1]), picture(images[1:]), text

    def _walk_basis(
        self, seed: int, component: int | str | None, guidance: float | None
    ) -> tuple[Basis, bool]:
        """The B a walk uses, and whether its class was drawn (the mixture)."""
        c, w = self.parse_class(component), self.parse_guidance(guidance)
        drawn = bool(self.components) and c is None
        if drawn:
            c = int(self._drawn(seed, 1)[0])
        return self.basis(c, w), drawn

    @torch.no_grad()
    def walk_latents(
        self,
        seed: int,
        c: Tensor,
        component: int | str | None = None,
        guidance: float | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Data latents of the walk: ``B (z0 + sum_i c_i s_i v_i)``, ``B z0``, and the induced
        combination ``B z0 + sum_i c_i s_i sigma_i u_i`` (equal to the first up to rounding)."""
        return self._walk_latents(seed, c, self._walk_basis(seed, component, guidance)[0])

    def _walk_latents(self, seed: int, c: Tensor, basis: Basis) -> tuple[Tensor, Tensor, Tensor]:
        if c.numel() != self.k or not torch.isfinite(c).all():
            raise LinearizerError(f"the walk takes {self.k} finite coefficients, got {c.numel()}")
        z0 = self._encode_noise(self._x0(seed, 1))
        step = c.to(F64) * basis.spread
        z1 = (z0 + step @ basis.v) @ basis.b.T  # the generator applied to the moved noise
        base = z0 @ basis.b.T
        return z1, base, base + (step * basis.sigma[: self.k]) @ basis.u

    # -- Invert & edit -----------------------------------------------------------------------
    @torch.no_grad()
    def invert(
        self, array: np.ndarray, component: int | str | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
        """A picture -> its noise ``x0 = g_noise^-1(B^-1 g_data(x))`` -> regenerated ``f(x0)``;
        a conditional model inverts under the image's component ``component``."""
        basis = self._inversion_basis(component)
        x1 = self.model_input(array)
        x0, again = round_trip(self.model, x1, basis.b)
        err = float((again - x1).abs().max())
        note = round_trip_note(x1, again)
        text = (
            f"noise x0 = g_noise^-1(B^-1 g_data(x)) with B = {basis.spec.describe()}: "
            f"mean {float(x0.mean()):+.2f}, std {float(x0.std()):.2f}. "
            f"max |f(x0) − x| = {err:.1e} "
            + ("(exact up to rounding)." if note is None else f"{NOT_EXACT}.")
        )
        return picture(x1), noise_picture(x0), picture(again), text

    @torch.no_grad()
    def swap(
        self, array: np.ndarray, component: int | str | None, to: int | str = ALL
    ) -> tuple[np.ndarray, str]:
        """The exact swap of a picture of ``component``: its noise under that component's B,
        drawn as component ``to`` (``"all"``: every one). Returns the strip (the picture, then
        each swap) and a line with the round trip back to ``component``."""
        basis = self._inversion_basis(component)
        source = basis.spec.component
        targets = list(range(self.components))
        if str(to).strip().lower() != ALL:
            targets = [self._class_index(to)]
        x1 = self.model_input(array)
        swapped = [self.model.swap(x1, basis.spec, t) for t in targets]
        back = torch.cat(
            [
                self.model.swap(y, basis.spec.replace(component=t), source)
                for y, t in zip(swapped, targets)
            ]
        )
        x = x1.expand(len(targets), *x1.shape[1:])
        worst = min(psnr_per_image(x, back))
        note = round_trip_note(x, back)
        text = (
            f"Swap: z0 = B_{source}^-1 g_data(x), then g_data^-1(B_t z0) for t = "
            f"{', '.join(map(str, targets))}: the same noise drawn as each {self.noun} (B = "
            f"{basis.spec.describe()}). Swapped back to {self.noun} {source}: PSNR "
            f"{_db(worst)} dB " + ("(exact up to rounding)." if note is None else f"{NOT_EXACT}.")
        )
        return picture(torch.cat([x1, *swapped]), nrow=1 + len(targets)), text

    @torch.no_grad()
    def interpolate(
        self,
        first: np.ndarray,
        second: np.ndarray,
        frames: int = 8,
        component: int | str | None = None,
    ) -> tuple[np.ndarray, np.ndarray, str]:
        """``frames`` images from one picture to another: along the straight line between their
        inverted noises, and along the straight line in the data network's induced space (a
        conditional model inverts both under component ``component``)."""
        frames = int(frames)
        in_range("frames", frames, 2, MAX_FRAMES)
        b = self._inversion_basis(component).b
        xa, xb = self.model_input(first), self.model_input(second)
        in_noise = interpolate(self.model, xa, xb, b, n=frames, space="noise")
        in_latent = interpolate(self.model, xa, xb, b, n=frames, space="latent")
        text = (
            f"{frames} frames. Top: (1−a) x0_A + a x0_B in noise, each generated. Bottom: "
            f"g_data^-1((1−a) g_data(A) + a g_data(B)), the straight line where f is linear."
        )
        return picture(in_noise, nrow=frames), picture(in_latent, nrow=frames), text

    @torch.no_grad()
    def sample_picture(self, seed: int, component: int | str | None = None) -> np.ndarray:
        """A one-step sample of noise ``seed`` (an input when nothing was drawn or uploaded);
        a conditional model draws component ``component``."""
        b = self._inversion_basis(component).b
        x = self._decode_data(self._encode_noise(self._x0(seed, 1)) @ b.T).clamp(0, 1)
        return np.rint(x[0, 0].double().cpu().numpy() * 255).astype(np.uint8)
