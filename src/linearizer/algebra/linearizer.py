"""The Linearizer ``f(x) = g_y^-1(A g_x(x))`` and the linear algebra it inherits from ``A``.

``f`` is exactly linear from ``(X, (+)_x, (.)_x)`` to ``(Y, (+)_y, (.)_y)``, the spaces induced by
``g_x`` and ``g_y`` (see :class:`~linearizer.algebra.space.InducedSpace`). So:

* pseudo-inverse ``f+(y) = g_x^-1(A+ g_y(y))``, transpose ``fT(y) = g_x^-1(A^T g_y(y))``;
* SVD ``A = U S V^T``: ``f(g_x^-1(v_i)) = s_i (.)_y g_y^-1(u_i)``;
* composition ``f2.compose(f1) = f2 o f1 = L(g_x1, A2 A1, g_y2)`` when ``f1.g_y`` is ``f2.g_x``;
* with ``g_x = g_y``: powers ``f^n = L(g, A^n, g)``, eigenvectors ``g^-1(v)`` with
  ``f(g^-1(v)) = lambda (.) g^-1(v)``, and ``A^2 = A`` makes ``f`` a projector everywhere.

>>> import torch
>>> class Cube(torch.nn.Module):  # an invertible elementwise map
...     def forward(self, x):
...         return x**3
...     def inverse(self, z):
...         return z.sign() * z.abs() ** (1 / 3)
>>> A = torch.tensor([[2.0, 0.0], [0.0, 0.5]], dtype=torch.float64)
>>> f = Linearizer(Cube(), A)
>>> f(torch.tensor([[1.0, 2.0]], dtype=torch.float64))  # (2 * 1, 0.5 * 8) ** (1/3)
tensor([[1.2599, 1.5874]], dtype=torch.float64)
>>> f.svd().S
tensor([2.0000, 0.5000], dtype=torch.float64)
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..errors import LinearizerError
from ..invertible.base import same_network
from ..operators.base import LinearOperator
from ..operators.dense import Dense, Identity, Product, dense_size_ok, param_dtype
from .space import InducedSpace

Time = float | Tensor | None
Shape = tuple[int, ...] | None
_F64 = torch.float64


@dataclass
class InducedSVD:
    """Singular triplets of ``A`` and the induced singular vectors of ``f``.

    ``S [k]`` descending; ``U_lat [D_out, k]`` and ``V_lat [D_in, k]`` are the latent singular
    vectors (columns, float64); ``V_x [k, *x]`` are ``g_x^-1(v_i)`` and ``U_y [k, *y]`` are
    ``g_y^-1(u_i)`` (in the networks' dtype), so ``f(V_x[i]) = S[i] (.) U_y[i]``.
    """

    S: Tensor
    U_lat: Tensor
    V_lat: Tensor
    V_x: Tensor
    U_y: Tensor


@dataclass
class InducedEig:
    """Eigenpairs of a square ``A`` (``g_x = g_y = g``), sorted by ``|lambda|`` descending.

    ``L [n]`` (complex) and ``V_lat [D, n]`` (complex columns) are all computed eigenpairs;
    ``real [n]`` marks the real ones. ``L_real [m]`` and ``V_x [m, *x]`` (``= g^-1(v_i)``) are the
    real eigenpairs, the ones with an induced meaning: ``f(V_x[i]) = L_real[i] (.) V_x[i]``.
    """

    L: Tensor
    V_lat: Tensor
    real: Tensor
    L_real: Tensor
    V_x: Tensor


def _shape_of(shape: tuple[int, ...] | None) -> tuple[int, ...] | None:
    return None if shape is None else tuple(int(s) for s in shape)


def reported_latent_shape(g: nn.Module) -> tuple[int, ...] | None:
    """The per-sample latent shape a network reports (``g.latent_shape``), if any.

    A :class:`Conditioned` view reports its network's. Networks whose latent shape depends on
    the input report nothing (``None``); the shape is then learned from the first encode.
    """
    for m in (g, getattr(g, "net", None)):
        shape = getattr(m, "latent_shape", None)
        if shape is not None and not callable(shape):
            with contextlib.suppress(TypeError, ValueError):
                return tuple(int(s) for s in shape)
    return None


class Linearizer(nn.Module):
    """``f(x) = g_y^-1(A g_x(x))``.

    ``g_x``, ``g_y``: modules with ``forward``/``inverse`` (``g_y`` defaults to ``g_x``; for the
    paper's shared network use ``Conditioned(G, 1.0)`` and ``Conditioned(G, 0.0)``). Latents may
    have any shape; they are flattened per sample (row-major) for ``A``.
    ``A``: a :class:`LinearOperator` or a ``[D_out, D_in]`` tensor (wrapped in ``Dense``; trainable
    only if it is an ``nn.Parameter``).
    ``x_latent_shape``/``y_latent_shape``: per-sample latent shapes, needed only when they cannot
    be inferred (see :meth:`latent_shape`), so ``Linearizer(g_x, A, g_y)(x)`` works on the first
    call.
    ``check_finite``: reject inputs holding NaN/inf (costs one device sync per call).
    """

    def __init__(
        self,
        g_x: nn.Module,
        A: LinearOperator | Tensor,
        g_y: nn.Module | None = None,
        y_latent_shape: tuple[int, ...] | None = None,
        *,
        x_latent_shape: tuple[int, ...] | None = None,
        check_finite: bool = True,
    ) -> None:
        super().__init__()
        for name, g in (("g_x", g_x), ("g_y", g_y)):
            if g is not None and not callable(getattr(g, "inverse", None)):
                raise LinearizerError(f"{name} must be a module with forward(x) and inverse(z)")
        if isinstance(A, Tensor):
            A = Dense(A, trainable=isinstance(A, nn.Parameter))
        if not isinstance(A, LinearOperator):
            raise LinearizerError(
                f"A must be a LinearOperator or a 2-D tensor, got {type(A).__name__}"
            )
        # any modules with forward(x) and inverse(z), not necessarily InvertibleModule
        self.g_x: Any = g_x
        self.g_y: Any = g_x if g_y is None else g_y
        self.A = A
        self.check_finite = check_finite
        self._x_shape = _shape_of(x_latent_shape)
        self._y_shape = _shape_of(y_latent_shape)
        for what, shape, d in (
            ("x", self._x_shape, A.in_features),
            ("y", self._y_shape, A.out_features),
        ):
            if shape is not None and math.prod(shape) != d:
                raise LinearizerError(
                    f"{what}_latent_shape {shape} has {math.prod(shape)} values, A needs {d}"
                )
        self._cache: dict[str, tuple] = {}

    @property
    def space_x(self) -> InducedSpace:
        return InducedSpace(self.g_x)

    @property
    def space_y(self) -> InducedSpace:
        return InducedSpace(self.g_y)

    @property
    def same_space(self) -> bool:
        """True when ``g_x`` and ``g_y`` are the same bijection (powers, eig, projections)."""
        return same_network(self.g_x, self.g_y)

    def _check_input(self, x: Tensor, what: str) -> None:
        if not isinstance(x, Tensor):
            raise LinearizerError(f"{what} must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() < 2:
            raise LinearizerError(
                f"{what} must be a batch [B, ...] with at least 2 dimensions, got {list(x.shape)}"
            )
        if self.check_finite and not bool(torch.isfinite(x).all()):
            raise LinearizerError(f"{what} contains NaN or infinite values")

    def _side(self, side: str) -> tuple[Any, int]:
        """``(g, D)``: ``g_x`` and ``D_in`` for ``side='x'``, ``g_y`` and ``D_out`` for ``'y'``."""
        return (self.g_x, self.A.in_features) if side == "x" else (self.g_y, self.A.out_features)

    def _encode(self, x: Tensor, side: str) -> Tensor:
        """``g(x)`` flattened to ``[B, D]``, checking ``D`` against ``A``; records the shape."""
        g, d = self._side(side)
        self._check_input(x, side)
        try:
            z = g(x)
        except (RuntimeError, IndexError) as e:
            raise LinearizerError(
                f"g_{side} cannot encode {side} of shape {list(x.shape)}: {e}"
            ) from e
        shape = tuple(z.shape[1:])
        if math.prod(shape) != d:
            role = "takes D_in" if side == "x" else "gives D_out"
            raise LinearizerError(
                f"g_{side} maps {side} of shape {list(x.shape[1:])} to a latent of shape "
                f"{list(shape)} ({math.prod(shape)} values), but A {role}={d}"
            )
        setattr(self, f"_{side}_shape", shape)
        return z.reshape(z.shape[0], d)

    def latent_shape(self, side: str) -> tuple[int, ...]:
        """Per-sample latent shape of ``g_x`` (``side='x'``) or ``g_y`` (``'y'``).

        In order: the shape given or last seen when encoding that side; the shape the network
        reports (a ``latent_shape`` attribute of ``g``, or of ``g.net`` for a
        :class:`Conditioned` view) when it has as many values as ``A`` needs; for a square ``A``,
        the other side's latent shape (the same number of values). A later encode of that side
        replaces an inferred shape with the one seen.
        """
        own, other = (self._x_shape, self._y_shape)[:: 1 if side == "x" else -1]
        if own is not None:
            return own
        g, d = self._side(side)
        reported = reported_latent_shape(g)
        if reported is not None and math.prod(reported) == d:
            return reported
        if other is not None and self.A.in_features == self.A.out_features:
            return other  # a square A: both latents hold D values, most often in one layout
        raise LinearizerError(
            f"the latent shape of g_{side} is not known yet: encode a {side} first "
            f"({'f(x)' if side == 'x' else 'pinv(y) or transpose(y)'}) or pass {side}_latent_shape"
        )

    def _decode(self, w: Tensor, side: str) -> Tensor:
        shape = self.latent_shape(side)
        try:
            return self._side(side)[0].inverse(w.reshape(w.shape[0], *shape))
        except (RuntimeError, IndexError) as e:
            raise LinearizerError(
                f"g_{side} cannot decode a latent of shape {list(shape)}: {e} "
                f"(pass {side}_latent_shape if g_{side}'s latent has another layout)"
            ) from e

    def _check_time(self, t: Time) -> None:
        if t is not None and not self.A.time_dependent:
            raise LinearizerError("t was given but A is not time-dependent")

    def forward(self, x: Tensor, t: Time = None) -> Tensor:
        """``f(x) = g_y^-1(A(t) g_x(x))``."""
        self._check_time(t)
        return self._decode(self.A(self._encode(x, "x"), t), "y")

    f = forward

    def transpose(self, y: Tensor, t: Time = None) -> Tensor:
        """``fT(y) = g_x^-1(A^T g_y(y))``, the adjoint: ``<f(x), y>_gy = <x, fT(y)>_gx``."""
        self._check_time(t)
        return self._decode(self.A.transpose_apply(self._encode(y, "y"), t), "x")

    def pinv(self, y: Tensor, t: float | None = None) -> Tensor:
        """``f+(y) = g_x^-1(A+ g_y(y))`` (Moore-Penrose, computed in float64, cached).

        ``A+`` is a constant for autograd; it is recomputed when A's weights change. Low-rank
        operators use their factors (``r x r`` work); others need the dense matrix.
        """
        self._check_time(t)
        z = self._encode(y, "y")
        parts = self._pinv_parts(t)
        z64 = z.to(_F64)
        if parts[0] == "factored":
            _, qu, core_pinv, qv = parts
            w = ((z64 @ qu) @ core_pinv.T) @ qv.T
        else:
            w = z64 @ parts[1].T
        return self._decode(w.to(z.dtype), "x")

    def project(self, x: Tensor, t: Time = None) -> Tensor:
        """``f(x)`` for an idempotent ``A`` with ``g_x = g_y``: a projection of every input."""
        self._require_same_space("project")
        if not getattr(self.A, "idempotent", False):
            m = self._dense(t)
            if (m @ m - m).abs().max() > 1e-8 * max(1.0, float(m.abs().max())):
                raise LinearizerError("project needs an idempotent A (A @ A == A)")
        return self.forward(x, t)

    def _weights_key(self, t: Time) -> tuple:
        if isinstance(t, Tensor) and t.numel() != 1:
            raise LinearizerError(
                "pinv, svd, eig and project take one time t, not a batch of times"
            )
        tensors = list(self.A.parameters()) + list(self.A.buffers())
        state = tuple((p.data_ptr(), p._version, p.dtype, str(p.device)) for p in tensors)
        return (state, None if t is None else float(t))

    def _cached(self, name: str, t: Time, build) -> tuple:
        key = self._weights_key(t)
        hit = self._cache.get(name)
        if hit is not None and hit[0] == key:
            return hit[1]
        with torch.no_grad():
            value = build()
        self._cache[name] = (key, value)
        return value

    def _factors64(self, t: Time) -> tuple[Tensor, Tensor] | None:
        fac = self.A.factors(t)
        if fac is None or fac[0].dim() != 2:
            return None
        return fac[0].detach().to(_F64), fac[1].detach().to(_F64)

    def _dense(self, t: Time) -> Tensor:
        dense_size_ok(self.A)
        with torch.no_grad():
            return self.A.matrix(t, dtype=_F64).detach()

    def _factored_core(self, t: Time) -> tuple | None:
        """``A = Q_u C Q_v^T`` with orthonormal ``Q_u, Q_v`` and a small ``r x r`` core ``C``."""
        fac = self._factors64(t)
        if fac is None:
            return None
        qu, ru = torch.linalg.qr(fac[0])
        qv, rv = torch.linalg.qr(fac[1])
        return qu, ru @ rv.T, qv

    def _pinv_parts(self, t: Time) -> tuple:
        def build() -> tuple:
            core = self._factored_core(t)
            if core is not None:
                qu, c, qv = core
                return ("factored", qu, torch.linalg.pinv(c), qv)
            return ("dense", torch.linalg.pinv(self._dense(t)))

        return self._cached("pinv", t, build)

    def _svd_parts(self, t: Time) -> tuple[Tensor, Tensor, Tensor]:
        def build() -> tuple[Tensor, Tensor, Tensor]:
            core = self._factored_core(t)
            if core is not None:
                qu, c, qv = core
                uc, s, vch = torch.linalg.svd(c)
                return qu @ uc, s, qv @ vch.T
            u, s, vh = torch.linalg.svd(self._dense(t), full_matrices=False)
            return u, s, vh.T

        return self._cached("svd", t, build)

    def _net_dtype(self) -> torch.dtype:
        return param_dtype(self.g_x, param_dtype(self.A))

    def svd(self, k: int | None = None, t: float | None = None) -> InducedSVD:
        """The top-``k`` singular triplets of ``A`` and the induced singular vectors of ``f``.

        Low-rank operators give at most ``rank`` triplets (the non-zero part). No gradients.
        """
        self._check_time(t)
        u, s, v = self._svd_parts(t)
        k = s.shape[0] if k is None else int(k)
        if not 1 <= k <= s.shape[0]:
            raise LinearizerError(f"k must be in 1..{s.shape[0]}, got {k}")
        u, s, v = u[:, :k], s[:k], v[:, :k]
        dtype = self._net_dtype()
        with torch.no_grad():
            v_x = self._decode(v.T.to(dtype), "x")
            u_y = self._decode(u.T.to(dtype), "y")
        return InducedSVD(S=s, U_lat=u, V_lat=v, V_x=v_x, U_y=u_y)

    def singular_values(self, t: float | None = None) -> Tensor:
        """All singular values of ``A`` (descending, float64; a low-rank operator's non-zero
        ones), from the same decomposition as :meth:`svd`, without decoding any direction."""
        self._check_time(t)
        return self._svd_parts(t)[1]

    def eig(self, k: int | None = None, t: float | None = None) -> InducedEig:
        """Eigenpairs of a square ``A`` (requires ``g_x = g_y``). No gradients.

        Low-rank operators ``U V^T`` give the ``rank`` eigenpairs of their range (from the small
        ``V^T U``); the rest of the spectrum is 0. Others use the dense matrix.
        """
        self._require_same_space("eig")
        self._check_time(t)
        if self.A.in_features != self.A.out_features:
            raise LinearizerError("eig needs a square A")

        def build() -> tuple[Tensor, Tensor]:
            fac = self._factors64(t)
            if fac is not None:
                lam, w = torch.linalg.eig(fac[1].T @ fac[0])
                vec = fac[0].to(w.dtype) @ w
                return lam, vec / torch.linalg.vector_norm(vec, dim=0)
            return torch.linalg.eig(self._dense(t))

        lam, vec = self._cached("eig", t, build)
        order = torch.argsort(lam.abs(), descending=True)
        if k is not None:
            if not 1 <= int(k) <= order.numel():
                raise LinearizerError(f"k must be in 1..{order.numel()}, got {k}")
            order = order[: int(k)]
        lam, vec = lam[order], vec[:, order]
        # LAPACK returns real eigenvalues of a real matrix with an exactly zero imaginary part
        real = lam.imag == 0
        vr = vec[:, real]
        # a real eigenvector may come with a complex phase: rotate its largest entry to be real
        pivot = vr.gather(0, vr.abs().argmax(0, keepdim=True))
        vr = (vr * (pivot.abs() / pivot)).real
        vr = vr / torch.linalg.vector_norm(vr, dim=0).clamp_min(1e-300)
        with torch.no_grad():
            v_x = self._decode(vr.T.to(self._net_dtype()), "x") if vr.shape[1] else vr.T
        return InducedEig(L=lam, V_lat=vec, real=real, L_real=lam[real].real, V_x=v_x)

    def _require_same_space(self, what: str) -> None:
        if not self.same_space:
            raise LinearizerError(
                f"{what} needs g_x and g_y to be the same network (the same object, or "
                f"Conditioned views of one network at the same flag)"
            )

    def compose(self, other: Linearizer) -> Linearizer:
        """``self o other``: first ``other``, then ``self`` (so ``f2.compose(f1)`` is ``f2 o f1``).

        The result is ``L(other.g_x, self.A @ other.A, self.g_y)``; it needs ``other.g_y`` and
        ``self.g_x`` to be the same network, since only then do the inner ``g`` and ``g^-1``
        cancel exactly.
        """
        if not isinstance(other, Linearizer):
            raise LinearizerError(f"compose needs a Linearizer, got {type(other).__name__}")
        if not same_network(other.g_y, self.g_x):
            raise LinearizerError(
                "cannot compose: the inner map's output network (other.g_y) is not the outer "
                "map's input network (self.g_x); they must be the same object (or Conditioned "
                "views of one network at the same flag)"
            )
        return self._derived(
            other.g_x, Product(self.A, other.A), self.g_y, other._x_shape, self._y_shape
        )

    def power(self, n: int) -> Linearizer:
        """``f^n = L(g, A^n, g)`` for ``n >= 0`` (``f^0`` is the identity); needs ``g_x = g_y``."""
        self._require_same_space("power")
        if self.A.in_features != self.A.out_features:
            raise LinearizerError("power needs a square A")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise LinearizerError(f"power needs an integer n >= 0, got {n!r}")
        op = Identity(self.A.in_features) if n == 0 else Product(*([self.A] * n))
        shape = self._x_shape or self._y_shape
        return self._derived(self.g_x, op, self.g_y, shape, shape)

    def _derived(
        self, g_x: Any, A: LinearOperator, g_y: Any, x_shape: Shape, y_shape: Shape
    ) -> Linearizer:
        """``L(g_x, A, g_y)`` with these latent shapes, checking inputs as this map does."""
        return Linearizer(
            g_x, A, g_y, y_shape, x_latent_shape=x_shape, check_finite=self.check_finite
        )
