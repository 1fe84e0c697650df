"""The one-step flow-matching Linearizer: one invertible network shared through a flag, and a
time-dependent low-rank operator A(t).

``g_data = G(., tau=1)`` encodes images x1, ``g_noise = G(., tau=0)`` encodes noise x0; the model
predicts the data latent from the interpolated latent, ``A(t) ((1-t) g_noise(x0) + t g_data(x1))``.
Sampling integrates the induced linear ODE (see :mod:`linearizer.flow.solvers`) and decodes with
``g_data^-1``; the whole sampler collapses into one matrix B, so a sample costs two network passes.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ..algebra import Linearizer
from ..errors import LinearizerError
from ..image_model import ImageModel
from ..operators.base import LinearOperator
from ..operators.dense import Dense
from . import factored, solvers
from .calibration import LatentCalibration

DATA, NOISE = 1.0, 0.0


class OneStepFlow(ImageModel):
    """``net``: a conditioned invertible network on images ``[B, *image_shape]``;
    ``op``: a time-dependent operator on the flattened latent (``D = prod(image_shape)``).
    ``memory_saving``: back-propagate through ``net`` by recomputing its activations from its
    exact inverse (:mod:`linearizer.invertible.memsave`) instead of storing them.

    The sampler's generator is a :class:`Linearizer`: ``model.generator(steps=100).svd(8)``,
    ``.pinv(x)`` and the rest of its algebra apply to ``g_data^-1(B g_noise(.))`` directly.

    ``calibration``: an optional :class:`~linearizer.flow.calibration.LatentCalibration` K that
    the sampler it was fitted for applies after B (``z1 = K B z0``), and its latent transport
    tau, if any, before decoding (``x1 = g_data^-1(tau(K B z0))``: the data side's network of
    that sampler is ``tau^-1 o g_data``); ``None`` samples the trained map as is.
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

    def calibrates(self, steps: int, method: str, final: str) -> bool:
        """Whether this sampler applies the model's calibration K (the one it was fitted for)."""
        cal = self._calibration
        return cal is not None and cal.applies_to(steps, method, final)

    def _with_k(self, b, steps: int, method: str, final: str):
        """``K B`` (dense or factored) when K belongs to this sampler, else ``b``."""
        return self._calibration.compose(b) if self.calibrates(steps, method, final) else b

    def _transport(self, steps: int, method: str, final: str) -> nn.Module | None:
        if not self.calibrates(steps, method, final):
            return None
        return self._calibration.transport

    # --- the two induced spaces -------------------------------------------------------------
    @property
    def g_data(self) -> nn.Module:
        """``G(., 1)``: encodes data."""
        return self.side(DATA)

    @property
    def g_noise(self) -> nn.Module:
        """``G(., 0)``: encodes noise."""
        return self.side(NOISE)

    def encode(self, x: Tensor, flag: float | Tensor) -> Tensor:
        """Flattened latents ``[B, D]`` of images under ``G(., flag)`` (flag per sample allowed)."""
        return self.encode_at(x, flag)

    def decode(self, z: Tensor, flag: float | Tensor) -> Tensor:
        """Images ``G^-1(z, flag)`` of latents ``[B, D]``."""
        return self.decode_at(z, flag)

    def generator(
        self,
        steps: int = 100,
        method: str = "euler",
        final: str = "skip",
        *,
        dtype: torch.dtype | None = None,
    ) -> Linearizer:
        """The one-step generator ``f = g_data^-1(B g_noise(.))`` as a :class:`Linearizer`.

        ``B`` is the collapsed sampler (:meth:`one_step_matrix`, computed in float64 and cached),
        held in ``dtype`` (default: the model's), so ``f(x0)`` is :meth:`sample` and
        ``f.svd(k)`` / ``f.pinv(x1)`` are its induced SVD and inverse. Cached per setting until
        the operator's weights change.
        """
        dtype = dtype or next(self.parameters()).dtype
        key = ("generator", steps, method, final, dtype)
        version = _weights_version(self.op)
        hit = self._cache.get(key)
        if hit is not None and hit[0] == version:
            return hit[1]
        b = self.one_step_matrix(steps=steps, method=method, final=final, dtype=torch.float64)
        op = Dense(b.to(dtype), trainable=False)
        tau = self._transport(steps, method, final)
        if tau is None:
            f = self.linearizer_of(op, NOISE, DATA)
        else:
            g_y = TransportedSide(self.side(DATA), tau, self.image_shape)
            f = Linearizer(self.side(NOISE), op, g_y, self.image_shape,
                           x_latent_shape=self.image_shape)  # fmt: skip
        self._cache[key] = (version, f)
        return f

    # --- sampling ---------------------------------------------------------------------------
    @torch.no_grad()
    def sample(
        self,
        x0: Tensor,
        *,
        steps: int = 100,
        method: str = "euler",
        final: str = "skip",
        one_step: bool = True,
        dtype: torch.dtype | None = None,
        callback: solvers.Callback | None = None,
        form: str = "auto",
    ) -> Tensor:
        """Images from noise ``x0``: one matrix product (``one_step``) or the multi-step solver.

        Both share this signature and agree to rounding. ``dtype`` is the latent working precision;
        ``form`` the one-step matrix's (:func:`one_step_operator`).
        Runs without autograd (as samplers do); differentiate through ``encode``/``decode`` and
        ``solvers.integrate`` directly if you need gradients.
        """
        self.check_images(x0, "noise")
        z0 = self.encode(x0, NOISE)
        work = dtype or z0.dtype
        if one_step:
            b = self.one_step_operator(
                steps=steps, method=method, final=final, dtype=work, form=form
            )
            z1 = factored.apply_rows(b, z0.to(work))
        else:
            z1 = self.integrate(z0, steps=steps, method=method, final=final, dtype=work,
                                callback=callback)  # fmt: skip
        tau = self._transport(steps, method, final)
        if tau is not None:
            z1 = tau(z1)
        return self.decode(z1.to(z0.dtype), DATA)

    def integrate(
        self,
        z0: Tensor,
        *,
        steps: int = 100,
        method: str = "euler",
        final: str = "skip",
        dtype: torch.dtype | None = None,
        callback: solvers.Callback | None = None,
    ) -> Tensor:
        """Data latents ``z(1)`` of noise latents ``z0`` by the multi-step solver
        (:func:`linearizer.flow.solvers.integrate`), then ``K`` if it belongs to this sampler."""
        z1 = solvers.integrate(self.op, z0, steps=steps, method=method, final=final,
                               dtype=dtype, callback=callback)  # fmt: skip
        return self._calibration.apply_rows(z1) if self.calibrates(steps, method, final) else z1

    def one_step_matrix(
        self,
        *,
        steps: int = 100,
        method: str = "euler",
        final: str = "skip",
        dtype: torch.dtype = torch.float64,
    ) -> Tensor:
        """The collapsed B (``z1 = B z0``), cached until the operator's weights change."""
        key = (steps, method, final, dtype)
        version = _weights_version(self.op)
        hit = self._cache.get(key)
        if hit is not None and hit[0] == version:
            return hit[1]
        b = solvers.collapse(self.op, steps=steps, method=method, final=final, dtype=dtype)
        b = self._with_k(b, steps, method, final)
        self._cache[key] = (version, b)
        return b

    def one_step_operator(
        self,
        *,
        steps: int = 100,
        method: str = "euler",
        final: str = "skip",
        dtype: torch.dtype = torch.float64,
        form: str = "auto",
    ) -> Tensor | factored.FactoredMatrix:
        """B dense (:meth:`one_step_matrix`) or factored ``c I + U V^T``
        (:mod:`linearizer.flow.factored`); ``form="auto"`` factors large latents."""
        if form == "auto":
            form = "dense" if self.dim < factored.MIN_FACTORED_DIM else "auto"
        if form == "dense":
            return self.one_step_matrix(steps=steps, method=method, final=final, dtype=dtype)
        key = (steps, method, final, dtype, form)
        version = _weights_version(self.op)
        hit = self._cache.get(key)
        if hit is None or hit[0] != version:
            kw = dict(steps=steps, method=method, final=final, dtype=dtype, form=form)
            b = self._with_k(factored.one_step(self.op, **kw), steps, method, final)
            hit = self._cache[key] = (version, b)
        return hit[1]

    def invert(self, x1: Tensor, b: Tensor | factored.FactoredMatrix) -> Tensor:
        """Noise whose one-step sample through ``b`` is ``x1``: ``g_noise^-1(B^-1 g_data(x1))``.

        B is square and full rank (its identity part is 1/T), so the pseudo-inverse is the inverse;
        we solve (LU in B's dtype, or Woodbury in float64 for a factored B) instead of forming B^+.
        """
        self.check_images(x1)
        z1 = self.encode(x1, DATA)
        z0 = factored.solve_rows(b, z1)
        return self.decode(z0.to(z1.dtype), NOISE)


class TransportedSide(nn.Module):
    """``tau^-1 o g``: an induced space ``g`` (images to latents of ``shape``) followed by the
    inverse of a latent transport ``tau`` on flattened latents; invertible like ``g``."""

    def __init__(self, g: nn.Module, tau: nn.Module, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.g, self.tau, self.shape = g, tau, tuple(shape)

    def forward(self, x: Tensor) -> Tensor:
        z = self.g(x)
        return self.tau.inverse(z.reshape(len(z), -1)).reshape(z.shape)

    def inverse(self, z: Tensor) -> Tensor:
        w = self.tau(z.reshape(len(z), -1)).reshape(len(z), *self.shape)
        return self.g.inverse(w)


def _weights_version(module: nn.Module) -> tuple:
    """Changes whenever any parameter is modified in place (optimizer steps, load_state_dict)."""
    return tuple((p.data_ptr(), p._version, p.dtype) for p in module.parameters())
