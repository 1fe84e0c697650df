"""Latent ODE solvers for one-step flow matching, and their collapse into one matrix.

The model predicts x1 in the latent: ``A(t) z`` is the predicted data latent, so the velocity is
``v(z, t) = (A(t) z - z) / (1 - t)`` — a *linear* ODE ``z' = L(t) z``. Every solver step is
therefore a matrix ``M_i`` and T steps collapse into ``B = M_{T-2} ... M_0`` (column convention).

One code path serves both uses: :func:`integrate` propagates a batch of row vectors. Applied to
samples it is the multi-step sampler; applied to the rows of the identity it yields ``B^T`` — so
the collapsed matrix equals the multi-step result by construction, up to rounding, for every
method including RK4 (whose stage products ``(I + h/2 K1) ...`` are nested automatically). Each
step costs O(D^2 r) through the low-rank factors; no D x D x D product is ever formed.

The singularity at t = 1. ``1/(1 - t)`` blows up at t = 1, so like the authors we integrate over
the grid ``t_i = i/T``, ``i = 0 .. T-2`` and stop at ``t = 1 - 1/T`` (``final="skip"``). On the
last interval the Euler coefficient ``h/(1 - t)`` would equal 1, i.e. the step is a jump to the
x1-prediction ``A(1 - h) z`` (rank <= r); ``final="predict"`` takes that jump instead.

Methods (one signature, see :func:`integrate`):

* ``euler``: ``z += h L(t_i) z``.
* ``rk4``: classical Runge-Kutta 4 with stages at ``t_i, t_i + h/2, t_i + h``.
* ``rk4-authors``: the authors' one-step matrix ``I + h/6 [L(t_i) + 4 L(t_i + h/2) + L(t_i + h)]``,
  a first-order (Simpson-averaged generator) step kept only to reproduce their numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ..errors import LinearizerError
from ..operators.base import LinearOperator

METHODS = ("euler", "rk4", "rk4-authors")
FINALS = ("skip", "predict")
Callback = Callable[[dict[str, Any]], None]


def check_schedule(steps: int, method: str, final: str = "skip") -> None:
    if method not in METHODS:
        raise LinearizerError(f"unknown sampling method {method!r}; choose one of {METHODS}")
    if final not in FINALS:
        raise LinearizerError(f"unknown final step {final!r}; choose one of {FINALS}")
    if int(steps) != steps or steps < 2:
        raise LinearizerError(f"steps must be an integer >= 2, got {steps!r}")


def stage_times(steps: int, method: str) -> list[tuple[float, ...]]:
    """The times at which each step evaluates A: one tuple per step."""
    h = 1.0 / steps
    if method == "euler":
        return [(i * h,) for i in range(steps - 1)]
    return [(i * h, i * h + h / 2, (i + 1) * h) for i in range(steps - 1)]


class _Factors:
    """A(t) at a fixed list of times, evaluated once in chunks and cast to the working dtype."""

    def __init__(self, op: LinearOperator, times: list[float], dtype: torch.dtype, chunk: int = 64):
        self.index = {t: k for k, t in enumerate(dict.fromkeys(times))}
        unique = list(self.index)
        ref = next(op.parameters())
        us, vs, mats = [], [], []
        with torch.no_grad():
            for s in range(0, len(unique), chunk):
                tt = torch.tensor(unique[s : s + chunk], dtype=ref.dtype, device=ref.device)
                fac = op.factors(tt)
                if fac is None:
                    mats.extend(op.matrix(float(t)).to(dtype) for t in tt)
                else:
                    # A one-element chunk may come back unbatched ([D, r]).
                    us.append(fac[0].to(dtype).reshape(len(tt), *fac[0].shape[-2:]))
                    vs.append(fac[1].to(dtype).reshape(len(tt), *fac[1].shape[-2:]))
        self.u = torch.cat(us) if us else None
        self.v = torch.cat(vs) if vs else None
        self.mats = mats

    def apply(self, z: Tensor, t: float) -> Tensor:
        """``A(t) z`` for every row of ``z``."""
        k = self.index[t]
        if self.u is not None:
            return (z @ self.v[k]) @ self.u[k].T
        return z @ self.mats[k].T


def _velocity(fac: _Factors, z: Tensor, t: float) -> Tensor:
    return (fac.apply(z, t) - z) / (1.0 - t)


def _step(fac: _Factors, z: Tensor, ts: tuple[float, ...], h: float, method: str) -> Tensor:
    if method == "euler":
        return z + h * _velocity(fac, z, ts[0])
    t0, tm, t1 = ts
    if method == "rk4-authors":
        l1, l2, l4 = (_velocity(fac, z, s) for s in (t0, tm, t1))
        return z + (h / 6.0) * (l1 + 4.0 * l2 + l4)
    k1 = _velocity(fac, z, t0)
    k2 = _velocity(fac, z + (h / 2) * k1, tm)
    k3 = _velocity(fac, z + (h / 2) * k2, tm)
    k4 = _velocity(fac, z + h * k3, t1)
    return z + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)


def integrate(
    op: LinearOperator,
    z: Tensor,
    *,
    steps: int,
    method: str = "euler",
    final: str = "skip",
    callback: Callback | None = None,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """Integrate the latent flow from t = 0 for a batch of flattened latents ``z [B, D]``.

    ``dtype`` is the working precision (default: ``z``'s); A's factors are evaluated in the
    operator's own dtype and cast. ``callback`` receives ``{"i", "t", "steps", "z"}`` after
    each step.

    >>> from linearizer.operators.dense import Dense
    >>> op = Dense(torch.eye(3, dtype=torch.float64) * 0.5)
    >>> z = torch.ones(1, 3, dtype=torch.float64)
    >>> integrate(op, z, steps=4).shape
    torch.Size([1, 3])
    """
    check_schedule(steps, method, final)
    dtype = dtype or z.dtype
    h = 1.0 / steps
    plan = stage_times(steps, method)
    extra = [1.0 - h] if final == "predict" else []
    fac = _Factors(op, [t for ts in plan for t in ts] + extra, dtype)
    z = z.to(dtype)
    for i, ts in enumerate(plan):
        z = _step(fac, z, ts, h, method)
        if callback is not None:
            callback({"i": i, "t": ts[0] + h, "steps": len(plan), "z": z})
    if final == "predict":
        z = fac.apply(z, 1.0 - h)
    return z


def collapse(
    op: LinearOperator,
    *,
    steps: int,
    method: str = "euler",
    final: str = "skip",
    dtype: torch.dtype = torch.float64,
    callback: Callback | None = None,
) -> Tensor:
    """The one-step matrix B (column convention: ``z_T = B z_0``) of ``integrate``.

    Built by integrating the identity basis, so ``B z0`` equals ``integrate(op, z0)`` up to
    rounding for every method. Accumulates in ``dtype`` (float64 by default).
    """
    ref = next(op.parameters())
    eye = torch.eye(op.in_features, dtype=dtype, device=ref.device)
    rows = integrate(op, eye, steps=steps, method=method, final=final, callback=callback)
    return rows.T.contiguous()
