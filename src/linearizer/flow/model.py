"""The one-step flow-matching Linearizer: one invertible network shared through a flag, and a
time-dependent low-rank operator A(t).

``g_data = G(., tau=1)`` encodes images x1, ``g_noise = G(., tau=0)`` encodes noise x0; the model
predicts the data latent from the interpolated latent, ``A(t) ((1-t) g_noise(x0) + t g_data(x1))``.
Sampling integrates the induced linear ODE (see :mod:`linearizer.flow.solvers`) and decodes with
``g_data^-1``; the whole sampler collapses into one matrix B, so a sample costs two network passes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from ..algebra import Linearizer
from ..errors import LinearizerError
from ..image_model import ImageModel
from ..invertible.base import InvertibleModule
from ..operators.base import LinearOperator
from ..operators.dense import Dense
from . import bcache, factored, solvers
from .calibration import LatentCalibration
from .spec import SamplerSpec, sample_spec

DATA, NOISE = 1.0, 0.0


class OneStepFlow(ImageModel):
    """``net``: a conditioned invertible network on images ``[B, *image_shape]``;
    ``op``: a time-dependent operator on the flattened latent (``D = prod(image_shape)``).
    ``memory_saving``: back-propagate through ``net`` by recomputing its activations from its
    exact inverse (:mod:`linearizer.invertible.memsave`) instead of storing them.

    Every sampling method takes a :class:`~linearizer.flow.spec.SamplerSpec` (or its fields
    as keywords). The sampler's generator is a :class:`Linearizer`:
    ``model.generator(steps=100).svd(8)``, ``.pinv(x)`` and the rest of its algebra apply to
    ``g_data^-1(B g_noise(.))`` directly.

    ``calibration``: an optional :class:`~linearizer.flow.calibration.LatentCalibration` K
    (and latent transport tau) fitted after training; a spec with ``maps="calibration"``
    applies K after B (``z1 = K B z0``), one with ``maps="transport"`` also tau before
    decoding (``x1 = g_data^-1(tau(K B z0))``: the data side's network is then
    ``tau^-1 o g_data``). The default spec samples the trained map alone.
    """

    def __init__(self, net: nn.Module, op: LinearOperator, image_shape: tuple[int, int, int]):
        super().__init__(net, image_shape)
        self.op = op
        if op.in_features != self.dim or op.out_features != self.dim:
            raise LinearizerError(
                f"operator is {op.out_features}x{op.in_features} but images "
                f"{self.image_shape} flatten to {self.dim}"
            )
        self._cache: dict[tuple, tuple[tuple, Any]] = {}
        self._calibration: LatentCalibration | None = None

    # one linear generator; the mixture variant (flow.mixture) has one per component
    classes = 0
    components = 1

    def operator(self, spec: SamplerSpec) -> LinearOperator:
        """The time-dependent operator ``A(t)`` that ``spec`` integrates."""
        component, w = spec.condition
        if component is not None or w:
            raise LinearizerError(
                "--class, --component and --guidance need a class-conditional model (--set "
                "conditional=true) or a mixture (--set components=K)"
            )
        return self.op

    @property
    def calibration(self) -> LatentCalibration | None:
        """The latent calibration K its sampler applies after B (None: none)."""
        return self._calibration

    @calibration.setter
    def calibration(self, cal: LatentCalibration | None) -> None:
        if cal is not None and cal.dim != self.dim:
            raise LinearizerError(
                f"the calibration acts on {cal.dim}-d latents, the model's are {self.dim}-d"
            )
        self._calibration = cal
        self._cache.clear()  # every cached B was built with the former K

    def maps(self, spec: SamplerSpec) -> tuple[LatentCalibration | None, nn.Module | None]:
        """``(K, tau)`` that ``spec`` applies after B (``None`` for each it leaves out);
        one line when it asks for maps the model does not hold for its schedule."""
        if spec.maps == "none":
            return None, None
        cal = self._calibration
        if cal is None:
            raise LinearizerError(
                f"--maps {spec.maps}: the model holds no latent calibration "
                f"(linearizer calibrate RUN fits one)"
            )
        cal.check_spec(spec)
        return cal, (cal.transport if spec.maps == "transport" else None)

    # --- the two induced spaces -------------------------------------------------------------
    @property
    def g_data(self) -> nn.Module:
        """``G(., 1)``: encodes data."""
        return self.side(DATA)

    @property
    def g_noise(self) -> nn.Module:
        """``G(., 0)``: encodes noise."""
        return self.side(NOISE)

    def encode(self, x: Tensor, flag: float | Tensor = DATA) -> Tensor:
        """Flattened latents ``[B, D]`` of images under ``G(., flag)`` (default: the data side;
        flag per sample allowed)."""
        return self.encode_at(x, flag)

    def decode(self, z: Tensor, flag: float | Tensor = DATA) -> Tensor:
        """Images ``G^-1(z, flag)`` of latents ``[B, D]``."""
        return self.decode_at(z, flag)

    def generator(self, spec: SamplerSpec | None = None, **changes: Any) -> Linearizer:
        """The one-step generator ``f = g_data^-1(B g_noise(.))`` of ``spec`` (default
        :class:`SamplerSpec`, ``changes`` applied) as a :class:`Linearizer`.

        ``B`` is the collapsed sampler (:meth:`one_step_matrix`, built in float64 and cached)
        held and applied in ``spec.dtype``, so ``f(x0)`` is :meth:`sample` and ``f.svd(k)`` /
        ``f.pinv(x1)`` are its induced SVD and inverse. With ``spec.maps="transport"`` the data
        side is ``tau^-1 o g_data``. Cached per spec until the operator's weights change.
        """
        spec = sample_spec(spec, **changes)
        self.operator(spec)  # one line for a conditional model without a class

        def build() -> Linearizer:
            b = self.one_step_matrix(spec.replace(dtype="float64"))
            op = Dense(b.to(spec.torch_dtype), trainable=False)
            tau = self.maps(spec)[1]
            if tau is None:
                return self.linearizer_of(op, NOISE, DATA)
            g_y = TransportedSide(self.side(DATA), tau, self.image_shape)
            return Linearizer(
                self.side(NOISE), op, g_y, self.image_shape, x_latent_shape=self.image_shape
            )

        return self._cached(("generator", spec), build)

    # --- sampling ---------------------------------------------------------------------------
    @torch.no_grad()
    def sample(
        self,
        x0: Tensor,
        spec: SamplerSpec | None = None,
        *,
        one_step: bool | None = True,
        callback: solvers.Callback | None = None,
        form: str = "auto",
        labels: Tensor | None = None,
        **changes: Any,
    ) -> Tensor:
        """Images from noise ``x0`` by ``spec`` (default :class:`SamplerSpec`, ``changes``
        applied): one matrix product (``one_step``) or the multi-step solver. ``one_step=None``
        takes B when it is at hand (:meth:`is_cached`) and the solver otherwise, so a few
        samples never wait for a collapse. ``labels``: each row's component, for a mixture
        (:class:`~linearizer.flow.mixture.MixtureFlow`) only.

        Both agree to rounding. ``spec.dtype`` is the latent working precision; ``form`` the
        one-step matrix's (:meth:`one_step_operator`). ``x0`` is used as given: the spec's
        temperature is for callers that draw it (:meth:`~linearizer.flow.spec.SamplerSpec.noise`).
        Runs without autograd (as samplers do); differentiate through ``encode``/``decode``
        and ``solvers.integrate`` directly if you need gradients.
        """
        spec = sample_spec(spec, **changes)
        self.check_images(x0, "noise")
        if labels is not None:
            raise LinearizerError("per-row components need a mixture: this model has one generator")
        z0 = self.encode(x0, NOISE)
        work = z0.to(spec.torch_dtype)
        if self.through_b(spec, one_step, form):
            z1 = factored.apply_rows(self.one_step_operator(spec, form=form), work)
        else:
            z1 = self.integrate(work, spec, callback=callback)
        return self.finish(z1, z0.dtype, spec)

    def through_b(self, spec: SamplerSpec, one_step: bool | None, form: str = "auto") -> bool:
        """Whether :meth:`sample` goes through B: ``one_step``, or for ``None`` whether B of
        ``spec`` is at hand (:meth:`is_cached`)."""
        return self.is_cached(spec, form) if one_step is None else bool(one_step)

    def finish(self, z1: Tensor, dtype: torch.dtype, spec: SamplerSpec) -> Tensor:
        """Images of the data latents ``z1 = K B z0`` a sampler reached: tau applied when the
        spec asks for it, decoded in ``dtype``."""
        tau = self.maps(spec)[1]
        if tau is not None:
            z1 = tau(z1)
        return self.decode(z1.to(dtype), DATA)

    def calibrate(self, z1: Tensor, spec: SamplerSpec) -> Tensor:
        """``K z1`` for every row when the spec applies the latent calibration K, else ``z1``."""
        cal = self.maps(spec)[0]
        return z1 if cal is None else cal.apply_rows(z1)

    def integrate(
        self,
        z0: Tensor,
        spec: SamplerSpec | None = None,
        *,
        callback: solvers.Callback | None = None,
        **changes: Any,
    ) -> Tensor:
        """Data latents ``z(1)`` of noise latents ``z0`` by the multi-step solver
        (:func:`linearizer.flow.solvers.integrate`), then ``K`` if ``spec`` applies it."""
        spec = sample_spec(spec, **changes)
        args = spec.solver_args
        z1 = solvers.integrate(
            self.operator(spec), z0, **args, dtype=spec.torch_dtype, callback=callback
        )
        return self.calibrate(z1, spec)

    def _cached(self, key: tuple, build: Callable[[], Any]) -> Any:
        """``build()``, kept under ``key`` until the operator's weights change."""
        version = _weights_version(self.op)
        hit = self._cache.get(key)
        if hit is None or hit[0] != version:
            hit = self._cache[key] = (version, build())
        return hit[1]

    def is_cached(self, spec: SamplerSpec, form: str = "dense") -> bool:
        """Whether B of ``spec`` is at hand without a collapse: built in this process since the
        weights last changed, or stored in the disk cache (:mod:`linearizer.flow.bcache`)."""
        form = self._form(form)
        hit = self._cache.get(self._memory_key(spec, form))
        fresh = hit is not None and hit[0] == _weights_version(self.op)
        return fresh or bcache.has(self._disk_key(spec, form))

    def one_step_matrix(self, spec: SamplerSpec | None = None, **changes: Any) -> Tensor:
        """The collapsed B of ``spec`` (``z1 = B z0``, K composed in when the spec applies it)
        in ``spec.dtype``, cached until the operator's weights change."""
        return self.one_step_operator(spec, form="dense", **changes)

    def one_step_operator(
        self, spec: SamplerSpec | None = None, *, form: str = "auto", **changes: Any
    ) -> Tensor | factored.FactoredMatrix:
        """B of ``spec`` dense (:meth:`one_step_matrix`) or factored ``c I + U V^T``
        (:mod:`linearizer.flow.factored`); ``form="auto"`` factors large latents."""
        spec = sample_spec(spec, **changes)
        form = self._form(form)
        cal = self.maps(spec)[0]

        def build() -> Tensor | factored.FactoredMatrix:
            args = spec.solver_args
            b = factored.one_step(self.operator(spec), **args, dtype=spec.torch_dtype, form=form)
            return b if cal is None else cal.compose(b)

        def stored() -> Tensor | factored.FactoredMatrix:
            # kept across processes too: a mixture's first call would otherwise build K of them
            device = next(self.op.parameters()).device
            return bcache.cached(self._disk_key(spec, form), build, device=device)

        return self._cached(self._memory_key(spec, form), stored)

    def _form(self, form: str) -> str:
        return "dense" if form == "auto" and self.dim < factored.MIN_FACTORED_DIM else form

    def _memory_key(self, spec: SamplerSpec, form: str) -> tuple:
        cal = self.maps(spec)[0]
        return (form, spec.schedule, spec.dtype, cal is not None, spec.condition)

    def _disk_key(self, spec: SamplerSpec, form: str) -> dict[str, Any]:
        """Everything B depends on: the weights (and K's), the schedule, dtype, form and
        condition, and the device it is built on (its rounding depends on it)."""
        cal = self.maps(spec)[0]
        # hashed from the bytes each time: a version counter misses writes through .data
        parts = (self.op,) if cal is None else (self.op, cal.basis, cal.core)
        return {
            "weights": bcache.weights_digest(*parts),
            "schedule": list(spec.schedule),
            "dtype": spec.dtype,
            "form": form,
            "condition": list(spec.condition),
            "device": next(self.op.parameters()).device.type,
        }

    def invert(self, x1: Tensor, b: Tensor | factored.FactoredMatrix) -> Tensor:
        """Noise whose one-step sample through ``b`` is ``x1``: ``g_noise^-1(B^-1 g_data(x1))``.

        B is square and full rank (its identity part is 1/T), so the pseudo-inverse is the inverse;
        we solve (LU in B's dtype, or Woodbury in float64 for a factored B) instead of forming B^+.
        """
        self.check_images(x1)
        z1 = self.encode(x1, DATA)
        z0 = factored.solve_rows(b, z1)
        return self.decode(z0.to(z1.dtype), NOISE)


class TransportedSide(InvertibleModule):
    """``tau^-1 o g``: an induced space ``g`` (images to latents of ``shape``) followed by the
    inverse of a latent transport ``tau`` on flattened latents; invertible like ``g``. Both are
    fixed-flag views, so ``flag`` is ignored."""

    def __init__(self, g: nn.Module, tau: nn.Module, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.g, self.tau, self.shape = g, tau, tuple(shape)

    def forward(self, x: Tensor, flag: Tensor | None = None) -> Tensor:
        z = self.g(x)
        return self.tau.inverse(z.reshape(len(z), -1)).reshape(z.shape)

    def inverse(self, z: Tensor, flag: Tensor | None = None) -> Tensor:
        w = self.tau(z.reshape(len(z), -1)).reshape(len(z), *self.shape)
        return self.g.inverse(w)


def _weights_version(module: nn.Module) -> tuple:
    """Changes whenever any parameter is modified in place (optimizer steps, load_state_dict)."""
    return tuple((p.data_ptr(), p._version, p.dtype) for p in module.parameters())
