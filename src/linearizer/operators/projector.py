"""Exact projectors: ``A^2 = A`` by construction, whatever the weights.

* :class:`OrthogonalProjector`: ``A = Q Q^T`` with ``Q`` the orthonormal columns of ``qr(W)``;
  symmetric, so with ``g_x = g_y`` it is an orthogonal projection under ``<.,.>_g``.
* :class:`ObliqueProjector`: ``A = U (V^T U)^{-1} V^T``: range ``span(U)``, null space
  ``span(V)^perp``; applied through one ``k x k`` solve.

Both stay factored (rank ``k``) and expose ``rank``, ``basis()`` (a basis of the range) and
``factors()``. With ``g_x = g_y`` the Linearizer ``f = g^-1 A g`` is then idempotent: ``f(f(x)) =
f(x)`` for every input, not only near the data.

>>> import torch
>>> P = OrthogonalProjector(8, rank=3).double()
>>> A = P.matrix()
>>> bool((A @ A - A).abs().max() < 1e-14)
True
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..errors import LinearizerError
from .base import LinearOperator, factor_product
from .dense import check_rows


class _Projector(nn.Module):
    """What both projectors share: ``A^2 = A``, square ``features x features``, of rank ``rank``
    (a mixin beside :class:`LinearOperator`, not an operator of its own)."""

    idempotent = True

    def __init__(self, features: int, rank: int) -> None:
        super().__init__()
        if not 1 <= rank <= features:
            raise LinearizerError(f"projector rank must be in 1..{features}, got {rank}")
        self.in_features = self.out_features = features
        self.rank = rank

    def extra_repr(self) -> str:
        return f"features={self.in_features}, rank={self.rank}"


class OrthogonalProjector(_Projector, LinearOperator):
    """``A = Q Q^T``, ``Q`` = orthonormal basis of ``span(W)``, ``W [D, k]`` the parameter.

    The QR signs are fixed (``diag(R) >= 0``) so ``basis()`` is a deterministic function of ``W``.
    """

    def __init__(self, features: int, rank: int) -> None:
        super().__init__(features, rank)
        self.W = nn.Parameter(torch.randn(features, rank))

    def basis(self) -> Tensor:
        """Orthonormal ``Q [D, k]`` spanning the range."""
        q, r = torch.linalg.qr(self.W)
        sign = torch.where(r.diagonal() < 0, -1.0, 1.0).to(q.dtype)
        return q * sign

    def forward(self, z: Tensor, t: float | Tensor | None = None) -> Tensor:
        check_rows(z, self.in_features)
        q = self.basis()
        return (z @ q) @ q.T

    def transpose_apply(self, y: Tensor, t: float | Tensor | None = None) -> Tensor:
        return self.forward(y)

    def matrix(self, t: float | Tensor | None = None, dtype: torch.dtype | None = None) -> Tensor:
        q = self.basis()
        return factor_product(q, q, dtype)

    def factors(self, t: float | Tensor | None = None) -> tuple[Tensor, Tensor]:
        q = self.basis()
        return q, q


class ObliqueProjector(_Projector, LinearOperator):
    """``A = U (V^T U)^{-1} V^T`` with parameters ``U, V [D, k]``.

    ``V`` starts equal to ``U`` plus small noise, so ``V^T U`` starts well conditioned; it must
    stay invertible (the solve raises otherwise).
    """

    def __init__(self, features: int, rank: int) -> None:
        super().__init__(features, rank)
        u = torch.randn(features, rank) / features**0.5
        self.U = nn.Parameter(u)
        self.V = nn.Parameter(u + 0.1 * torch.randn(features, rank) / features**0.5)

    def basis(self) -> Tensor:
        """``U [D, k]``, a (non-orthonormal) basis of the range."""
        return self.U

    def _coupling(self) -> Tensor:
        return self.V.T @ self.U

    def forward(self, z: Tensor, t: float | Tensor | None = None) -> Tensor:
        check_rows(z, self.in_features)
        coeff = torch.linalg.solve(self._coupling(), (z @ self.V).T)  # [k, B]
        return coeff.T @ self.U.T

    def transpose_apply(self, y: Tensor, t: float | Tensor | None = None) -> Tensor:
        check_rows(y, self.out_features)
        coeff = torch.linalg.solve(self._coupling().T, (y @ self.U).T)
        return coeff.T @ self.V.T

    def factors(self, t: float | Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``(U, V M^{-T})`` with ``M = V^T U``, so that ``A = U (V M^{-T})^T``."""
        right = torch.linalg.solve(self._coupling(), self.V.T).T
        return self.U, right

    def matrix(self, t: float | Tensor | None = None, dtype: torch.dtype | None = None) -> Tensor:
        return factor_product(*self.factors(), dtype)
