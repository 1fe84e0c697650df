"""Property tests a user inherits to check their own ``g_x``, ``A``, ``g_y``, and the contracts
every invertible block and every linear operator of the package passes.

:class:`InvertibleTests` checks one bijection (round trips, the log-determinant against
autograd's Jacobian where the block gives one, gradients); :class:`LinearOperatorTests` one
operator (``matrix()`` against its action on a basis, ``transpose_apply`` as the adjoint, its
factors, gradients); :class:`LinearizerTests` a whole map ``(g_x, A, g_y)``: the round trips of
``g_x`` and ``g_y``, ``f`` against the dense ``A``, superposition and homogeneity in the induced
spaces, ``0 -> 0``, the Moore-Penrose identities and ``A+`` against a dense reference, the
adjoint, the SVD against a dense SVD, eigenpairs and powers (or their refusal when ``g_x`` is
not ``g_y``), composition, projection (or its refusal), the induced space's algebra, and
gradients. Properties that do not apply check that they are refused, so nothing is skipped.
Subclass one in a pytest class named ``Test...``, implement what its docstring asks
(``build()`` and a sampler), and pytest runs the inherited ``test_*`` methods; ``check_all()``
runs them without pytest.

>>> import torch
>>> class Sinh(torch.nn.Module):  # a hand-written bijection on vectors
...     def forward(self, x):
...         return torch.sinh(2 * x + 0.5)
...     def inverse(self, z):
...         return (torch.asinh(z) - 0.5) / 2
>>> class TestSinhDense(LinearizerTests):
...     def build(self):
...         return Sinh(), torch.randn(3, 3, dtype=torch.float64), None
...     def sample_x(self, n):
...         return torch.randn(n, 3, dtype=torch.float64)
>>> TestSinhDense().test_pinv_identities()  # pytest runs every inherited test_* itself
>>> sorted(TestSinhDense().check_all())[:3]  # or run them all without pytest
['test_compose', 'test_eig_against_dense', 'test_forward_matches_dense']
>>> class TestSinhBlock(InvertibleTests):  # the bijection alone
...     def build(self):
...         return Sinh()
...     def sample(self, n):
...         return torch.randn(n, 3, dtype=torch.float64)
>>> TestSinhBlock().check_all()
['test_gradients_flow', 'test_logdet_against_autograd', 'test_round_trip']

The bar is relative (max-abs error over max-abs of the reference): ``rtol`` defaults to about
``4.5e5`` float64 epsilons (``1e-10``), or ``1e-3`` in float32, since the networks' condition
numbers multiply rounding; set ``rtol`` on the class to change it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from .algebra import Linearizer
from .errors import LinearizerError
from .invertible.base import has_logdet
from .operators.base import LinearOperator

_F64 = torch.float64
_DEFAULT_RTOL = {torch.float64: 1e-10, torch.float32: 1e-3}


def rel(actual: Tensor, expected: Tensor) -> float:
    """Max-abs error relative to the max-abs of the reference."""
    a, e = actual.detach(), expected.detach().to(actual.dtype)
    return float((a - e).abs().max() / e.abs().max().clamp_min(1e-300))


def _flat(z: Tensor) -> Tensor:
    return z.reshape(z.shape[0], -1)


def _refused(call, match: str) -> None:
    try:
        call()
    except LinearizerError as e:
        assert match in str(e), f"refused with another message: {e}"
        return
    raise AssertionError(f"expected a LinearizerError mentioning {match!r}")


class _Properties:
    """What the three contracts share: the tolerance, the check, running them all, and the
    object under test built once per class under ``torch.manual_seed(seed)``."""

    rtol: float | None = None
    batch: int = 3
    seed: int = 0

    def _dtype(self) -> torch.dtype:
        raise NotImplementedError

    def _once(self, attr: str, make: Callable[[], Any]) -> Any:
        cls = type(self)
        if attr not in cls.__dict__:
            torch.manual_seed(self.seed)
            setattr(cls, attr, make())
        return cls.__dict__[attr]

    def tol(self) -> float:
        if self.rtol is not None:
            return float(self.rtol)
        return _DEFAULT_RTOL.get(self._dtype(), 5e-2)

    def assert_rel(self, actual: Tensor, expected: Tensor, what: str) -> None:
        err = rel(actual, expected)
        assert err <= self.tol(), f"{what}: relative error {err:.3g} > {self.tol():.3g}"

    def check_all(self) -> list[str]:
        """Run every ``test_*`` method outside pytest; return the names run."""
        names = [n for n in dir(self) if n.startswith("test_") and callable(getattr(self, n))]
        for name in names:
            getattr(self, name)()
        return names


def _check_gradients(module: nn.Module, a: Callable, x: Tensor, b: Callable, y: Tensor) -> None:
    """Backpropagate ``|a(x)|^2 + |b(y)|^2``: finite, nonzero gradients must reach ``x``, ``y``
    and every parameter of ``module``."""
    x.requires_grad_(True)
    y.requires_grad_(True)
    module.zero_grad()
    (a(x).square().sum() + b(y).square().sum()).backward()
    for i, v in enumerate((x, y)):
        assert v.grad is not None and bool(torch.isfinite(v.grad).all()), f"no gradient to {i}"
        assert float(v.grad.abs().sum()) > 0, f"zero gradient to input {i}"
    for name, p in module.named_parameters():
        if p.requires_grad:
            assert p.grad is not None and bool(torch.isfinite(p.grad).all()), name
            assert float(p.grad.abs().sum()) > 0, f"zero gradient to {name}"
    module.zero_grad()


class InvertibleTests(_Properties):
    """Inherit, implement ``build`` (a bijection: ``forward(x[, flag])``, ``inverse(z[,
    flag])`` and, optionally, ``inverse_logdet`` of the
    :class:`~linearizer.invertible.base.InvertibleModule` protocol) and ``sample(n)`` (``n``
    inputs), name the class ``Test...``. ``flag(n)`` gives the conditioning flag every call
    gets (``None``: none is passed; ``cond(n)``, its former name, still works for one release
    and warns); ``sample_z(n)`` the points the inverse starts from (default: images of fresh
    inputs). Keep the per-sample size small: the log-determinant is checked
    against the dense Jacobian of each sample.
    """

    _built_module: ClassVar[nn.Module]

    def build(self) -> nn.Module:
        raise NotImplementedError("return the invertible module from build()")

    def sample(self, n: int) -> Tensor:
        raise NotImplementedError("return a batch of n inputs from sample(n)")

    def flag(self, n: int) -> Tensor | None:
        if type(self).cond is not InvertibleTests.cond:  # a test class written for 0.1.0
            warnings.warn(
                "InvertibleTests.cond(n) is deprecated; override flag(n)",
                DeprecationWarning,
                stacklevel=2,
            )
            return self.cond(n)
        return None

    def cond(self, n: int) -> Tensor | None:
        """Deprecated name of :meth:`flag`: override ``flag`` instead."""
        return None

    def sample_z(self, n: int) -> Tensor:
        with torch.no_grad():
            return self.forward(self.sample(n))

    @property
    def module(self) -> Any:  # an invertible module: forward, inverse, maybe inverse_logdet
        return self._once("_built_module", self.build)

    def _dtype(self) -> torch.dtype:
        return self.sample(1).dtype

    def _args(self, x: Tensor) -> tuple:
        c = self.flag(len(x))
        return (x,) if c is None else (x, c)

    def forward(self, x: Tensor) -> Tensor:
        return self.module(*self._args(x))

    def inverse(self, z: Tensor) -> Tensor:
        return self.module.inverse(*self._args(z))

    def test_round_trip(self) -> None:
        x, z = self.sample(self.batch), self.sample_z(self.batch)
        self.assert_rel(self.inverse(self.forward(x)), x, "g^-1(g(x)) = x")
        self.assert_rel(self.forward(self.inverse(z)), z, "g(g^-1(z)) = z")

    def test_logdet_against_autograd(self) -> None:
        g, z = self.module, self.sample_z(self.batch)
        if not has_logdet(g):  # the log-determinant is optional
            return
        x, logdet = (t.detach() for t in g.inverse_logdet(*self._args(z)))
        self.assert_rel(x, self.inverse(z), "inverse_logdet's x = g^-1(z)")
        assert logdet.shape == (len(z),), f"log-determinant of shape {tuple(logdet.shape)}"
        c = self.flag(len(z))
        for i in range(len(z)):

            def one(v: Tensor, i: int = i) -> Tensor:  # sample i's inverse, its own flag
                return self.module.inverse(v, *(() if c is None else (c[i : i + 1],)))

            jac = torch.autograd.functional.jacobian(one, z[i : i + 1])
            ref = torch.linalg.slogdet(jac.reshape(x[i].numel(), z[i].numel()).to(_F64))[1]
            err = abs(float(logdet[i]) - float(ref)) / max(1.0, abs(float(ref)))
            assert err <= self.tol(), f"log |det dx/dz| of sample {i}: relative error {err:.3g}"

    def test_gradients_flow(self) -> None:
        g = self.module
        x, z = self.sample(self.batch), self.sample_z(self.batch)
        _check_gradients(g, self.forward, x, self.inverse, z)


class LinearOperatorTests(_Properties):
    """Inherit, implement ``build`` (a :class:`~linearizer.operators.base.LinearOperator`),
    name the class ``Test...``. A time-dependent operator is checked at the time ``t`` (set it
    on the class). ``sample(n)`` / ``sample_y(n)`` give inputs of the operator and of its
    transpose (default: Gaussian rows in the operator's dtype, float64 for a parameter-free
    one).

    >>> from linearizer.operators import LowRank
    >>> class TestLowRank(LinearOperatorTests):
    ...     def build(self):
    ...         return LowRank(5, 4, rank=2).double()
    >>> "test_transpose_is_adjoint" in TestLowRank().check_all()
    True
    """

    t: float | None = None
    _built_operator: ClassVar[LinearOperator]

    def build(self) -> LinearOperator:
        raise NotImplementedError("return the operator from build()")

    @property
    def op(self) -> LinearOperator:
        return self._once("_built_operator", self.build)

    def _dtype(self) -> torch.dtype:
        first = next(iter(self.op.parameters()), next(iter(self.op.buffers()), None))
        return first.dtype if first is not None and first.is_floating_point() else _F64

    def sample(self, n: int) -> Tensor:
        return torch.randn(n, self.op.in_features, dtype=self._dtype())

    def sample_y(self, n: int) -> Tensor:
        return torch.randn(n, self.op.out_features, dtype=self._dtype())

    def dense(self) -> Tensor:
        with torch.no_grad():
            return self.op.matrix(self.t, dtype=self._dtype())

    def test_matrix_matches_apply_on_a_basis(self) -> None:
        op, m = self.op, self.dense()
        assert m.shape == (op.out_features, op.in_features), f"matrix() of shape {m.shape}"
        eye = torch.eye(op.in_features, dtype=m.dtype)
        self.assert_rel(op(eye, self.t).T, m, "columns A e_i = matrix()[:, i]")
        z = self.sample(self.batch)
        self.assert_rel(op(z, self.t), z @ m.T, "A z = z @ matrix().T")
        low = op.matrix(self.t, dtype=torch.float32)
        assert low.dtype == torch.float32, f"matrix(dtype=float32) gave {low.dtype}"

    def test_transpose_is_adjoint(self) -> None:
        op, z, y = self.op, self.sample(self.batch), self.sample_y(self.batch)
        at_y = op.transpose_apply(y, self.t)
        self.assert_rel(at_y, y @ self.dense(), "A^T y = y @ matrix()")
        lhs, rhs = (op(z, self.t) * y).sum(dim=1), (z * at_y).sum(dim=1)
        self.assert_rel(lhs, rhs, "<A z, y> = <z, A^T y>")

    def test_factors_reproduce_matrix(self) -> None:
        parts = self.op.factors(self.t)
        if parts is None:  # not low rank: nothing to check
            return
        u, v = parts
        assert u.shape[0] == self.op.out_features and v.shape[0] == self.op.in_features
        assert u.shape[1] == v.shape[1], f"factors of ranks {u.shape[1]} and {v.shape[1]}"
        self.assert_rel(u @ v.T, self.dense().to(u.dtype), "U V^T = matrix()")

    def test_gradients_flow(self) -> None:
        op = self.op
        z, y = self.sample(self.batch), self.sample_y(self.batch)
        _check_gradients(op, lambda v: op(v, self.t), z, lambda v: op.transpose_apply(v, self.t), y)


class LinearizerTests(_Properties):
    """Inherit, implement ``build`` and ``sample_x`` (and ``sample_y`` when ``g_y``'s data
    differs), name the class ``Test...``: pytest runs every property below on your maps.

    ``build() -> (g_x, A, g_y)``: ``g_y`` may be ``None`` (then ``g_y = g_x``); ``A`` a
    :class:`~linearizer.operators.base.LinearOperator` or a 2-D tensor. Override
    ``linearizer()`` instead to pass latent shapes or other options. The map is built once per
    class (under ``torch.manual_seed(seed)``) and shared by its tests; use float64 maps and
    samples for the default bar.
    """

    # the map, built once per class by the first test that needs it (see ``f``)
    _built_linearizer: ClassVar[Linearizer]

    def build(self) -> tuple[nn.Module, LinearOperator | Tensor, nn.Module | None]:
        raise NotImplementedError("return (g_x, A, g_y) from build(), or override linearizer()")

    def sample_x(self, n: int) -> Tensor:
        raise NotImplementedError("return a batch of n inputs of f from sample_x(n)")

    def sample_y(self, n: int) -> Tensor:
        """A batch of ``n`` outputs-space points (inputs of ``pinv``/``transpose``)."""
        return self.sample_x(n)

    def linearizer(self) -> Linearizer:
        g_x, A, g_y = self.build()
        return Linearizer(g_x, A, g_y)

    @property
    def f(self) -> Linearizer:
        return self._once("_built_linearizer", self.linearizer)

    def xs(self, n: int | None = None) -> Tensor:
        return self.sample_x(self.batch if n is None else n)

    def ys(self, n: int | None = None) -> Tensor:
        return self.sample_y(self.batch if n is None else n)

    def _dtype(self) -> torch.dtype:
        return self.xs(1).dtype

    def dense(self) -> Tensor:
        """``A`` as a dense float64 matrix: the reference every identity is checked against."""
        with torch.no_grad():
            return self.f.A.matrix(dtype=_F64).detach()

    def test_round_trip(self) -> None:
        f, x, y = self.f, self.xs(), self.ys()
        self.assert_rel(f.g_x.inverse(f.g_x(x)), x, "g_x^-1(g_x(x)) = x")
        self.assert_rel(f.g_y.inverse(f.g_y(y)), y, "g_y^-1(g_y(y)) = y")

    def test_forward_matches_dense(self) -> None:
        f, x = self.f, self.xs()
        ref = _flat(f.g_x(x)).to(_F64) @ self.dense().T
        self.assert_rel(_flat(f.g_y(f(x))).to(_F64), ref, "g_y(f(x)) = A g_x(x)")

    def test_superposition_and_homogeneity(self) -> None:
        f, x1, x2 = self.f, self.xs(), self.xs()
        a = torch.linspace(-1.5, 2.0, x1.shape[0], dtype=x1.dtype)
        b = -0.4
        sx, sy = f.space_x, f.space_y
        lhs = f(sx.add(sx.scale(a, x1), sx.scale(b, x2)))
        rhs = sy.add(sy.scale(a, f(x1)), sy.scale(b, f(x2)))
        self.assert_rel(lhs, rhs, "f(a x1 + b x2) = a f(x1) + b f(x2)")
        self.assert_rel(f(sx.scale(a, x1)), sy.scale(a, f(x1)), "f(a x) = a f(x)")
        self.assert_rel(
            f(sx.lincomb([a, b], [x1, x2])), sy.lincomb([a, b], [f(x1), f(x2)]), "lincomb"
        )

    def test_zero_maps_to_zero(self) -> None:
        f, x = self.f, self.xs()
        zero_y = f.space_y.zero(f(x))
        out = f(f.space_x.zero(x))
        scale = f(x).detach().abs().max()  # the zero of Y need not be 0: compare at f's scale
        err = float((out - zero_y).detach().abs().max() / scale.clamp_min(1e-300))
        assert err <= self.tol(), f"f(0_x) = 0_y: relative error {err:.3g}"

    def test_pinv_identities(self) -> None:
        f, x, y = self.f, self.xs(), self.ys()
        fx = f(x)
        self.assert_rel(f(f.pinv(fx)), fx, "f f+ f = f")
        py = f.pinv(y)
        self.assert_rel(f.pinv(f(py)), py, "f+ f f+ = f+")
        ref = _flat(f.g_y(y)).to(_F64) @ torch.linalg.pinv(self.dense()).T
        self.assert_rel(_flat(f.g_x(py)).to(_F64), ref, "g_x(f+(y)) = A+ g_y(y)")

    def test_transpose_is_adjoint(self) -> None:
        f, x, y = self.f, self.xs(), self.ys()
        lhs = f.space_y.inner(f(x), y)
        rhs = f.space_x.inner(x, f.transpose(y))
        self.assert_rel(lhs, rhs, "<f(x), y>_Y = <x, fT(y)>_X")
        ref = _flat(f.g_y(y)).to(_F64) @ self.dense()
        self.assert_rel(_flat(f.g_x(f.transpose(y))).to(_F64), ref, "g_x(fT(y)) = A^T g_y(y)")

    def _learn_shapes(self) -> None:
        self.f(self.xs(1))
        self.f.transpose(self.ys(1))

    def test_svd_against_dense(self) -> None:
        f = self.f
        self._learn_shapes()
        svd = f.svd()
        k = svd.S.shape[0]
        ref = torch.linalg.svdvals(self.dense())
        self.assert_rel(svd.S, ref[:k], "singular values")
        if k < ref.shape[0]:  # a low-rank A: the rest of the spectrum is zero
            assert float(ref[k:].max()) <= self.tol() * float(ref[0]), "missing singular values"
        self.assert_rel(f(svd.V_x), f.space_y.scale(svd.S, svd.U_y), "f(V_x[i]) = s_i U_y[i]")
        self.assert_rel(_flat(f.g_x(svd.V_x)).to(_F64), svd.V_lat.T, "g_x(V_x) = V")
        eye = torch.eye(k, dtype=_F64)
        self.assert_rel(svd.U_lat.T @ svd.U_lat, eye, "U orthonormal")
        self.assert_rel(svd.V_lat.T @ svd.V_lat, eye, "V orthonormal")

    def test_eig_against_dense(self) -> None:
        f = self.f
        self._learn_shapes()
        if not (f.same_space and f.A.in_features == f.A.out_features):
            _refused(f.eig, "eig needs")
            return
        eig = f.eig()
        ref = torch.linalg.eigvals(self.dense()).abs().sort(descending=True).values
        self.assert_rel(eig.L.abs(), ref[: eig.L.shape[0]], "|eigenvalues|")
        if eig.V_x.shape[0]:
            lam = eig.L_real
            self.assert_rel(f(eig.V_x), f.space_x.scale(lam, eig.V_x), "f(v) = lambda v")

    def test_power(self) -> None:
        f, x = self.f, self.xs()
        if not (f.same_space and f.A.in_features == f.A.out_features):
            _refused(lambda: f.power(2), "power needs")
            return
        self.assert_rel(f.power(3)(x), f(f(f(x))), "f^3 = f o f o f")
        self.assert_rel(f.power(0)(x), x, "f^0 = id")
        ref = _flat(f.g_x(x)).to(_F64) @ torch.linalg.matrix_power(self.dense(), 3).T
        self.assert_rel(_flat(f.g_x(f.power(3)(x))).to(_F64), ref, "g(f^3(x)) = A^3 g(x)")

    def test_compose(self) -> None:
        f, x = self.f, self.xs()
        f(x)
        gen = torch.Generator().manual_seed(self.seed + 1)
        d_in, d_out = f.A.in_features, f.A.out_features
        m = torch.randn(d_in, d_out, dtype=_F64, generator=gen) / d_out**0.5
        back = Linearizer(f.g_y, m.to(x.dtype), f.g_x, y_latent_shape=f.latent_shape("x"))
        h = back.compose(f)  # back o f : X -> X
        self.assert_rel(h(x), back(f(x)), "(back o f)(x) = back(f(x))")
        ref = _flat(f.g_x(x)).to(_F64) @ (m @ self.dense()).T
        self.assert_rel(_flat(f.g_x(h(x))).to(_F64), ref, "composition is the product")
        if not f.same_space:
            _refused(lambda: f.compose(f), "cannot compose")

    def test_projection(self) -> None:
        f, x = self.f, self.xs()
        if not f.same_space:
            _refused(lambda: f.project(x), "project needs")
            return
        m = self.dense()
        idempotent = bool((m @ m - m).abs().max() <= 1e-8 * max(1.0, float(m.abs().max())))
        if not idempotent:
            _refused(lambda: f.project(x), "idempotent")
            return
        fx = f(x)
        self.assert_rel(f(fx), fx, "f(f(x)) = f(x)")
        self.assert_rel(f.project(x), fx, "project = f")

    def test_space_algebra(self) -> None:
        s, u, v = self.f.space_x, self.xs(), self.xs()
        self.assert_rel(s.sub(s.add(u, v), v), u, "(u + v) - v = u")
        self.assert_rel(s.interpolate(u, v, 0.25), s.lincomb([0.75, 0.25], [u, v]), "lerp")
        self.assert_rel(s.norm(u) ** 2, s.inner(u, u), "|u|^2 = <u, u>")
        self.assert_rel(s.dist(u, v), s.norm(s.sub(u, v)), "dist = |u - v|")

    def test_gradients_flow(self) -> None:
        f = self.f
        x = self.xs().requires_grad_(True)
        f.zero_grad()
        f(x).square().sum().backward()
        assert x.grad is not None and bool(torch.isfinite(x.grad).all()), "no gradient to x"
        assert float(x.grad.abs().sum()) > 0, "zero gradient to x"
        for name, p in f.A.named_parameters():
            if p.requires_grad:
                assert p.grad is not None and bool(torch.isfinite(p.grad).all()), name
        f.zero_grad()
