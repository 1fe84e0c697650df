"""Low-rank operators ``A = U V^T``, optionally plus a scaled identity ``s I``.

>>> import torch
>>> op = LowRank(6, 6, rank=2, identity_scale=1.0)
>>> z = torch.randn(3, 6)
>>> torch.allclose(op(z), z @ op.matrix().T, rtol=1e-5, atol=1e-6)
True
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..errors import LinearizerError
from .base import LinearOperator, factor_product
from .dense import check_rows


class LowRank(LinearOperator):
    """``A = U V^T (+ s I)`` with ``U [D_out, r]`` and ``V [D_in, r]``; applied factored.

    ``identity_scale``: ``None`` (pure low rank), a float ``s`` (a fixed buffer), or
    ``"learnable"`` (a parameter starting at 1.0). The identity term needs a square operator.
    The factors start Gaussian with variance ``1/r`` for ``U`` and ``1/D_in`` for ``V`` so that
    ``A z`` has roughly the scale of ``z``.
    """

    def __init__(
        self,
        out_features: int,
        in_features: int,
        rank: int,
        identity_scale: float | str | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if min(out_features, in_features, rank) < 1:
            raise LinearizerError(
                f"LowRank needs positive sizes, got out={out_features}, in={in_features}, "
                f"rank={rank}"
            )
        self.out_features, self.in_features, self.rank = out_features, in_features, rank
        u = torch.randn(out_features, rank, generator=generator) / math.sqrt(rank)
        v = torch.randn(in_features, rank, generator=generator) / math.sqrt(in_features)
        self.U = nn.Parameter(u)
        self.V = nn.Parameter(v)
        self.identity_scale: Tensor | None
        if identity_scale is None:
            self.identity_scale = None
            return
        if out_features != in_features:
            raise LinearizerError(
                f"identity_scale needs a square operator, got {out_features}x{in_features}"
            )
        if identity_scale == "learnable":
            self.identity_scale = nn.Parameter(torch.tensor(1.0))
        elif isinstance(identity_scale, (int, float)):
            self.register_buffer("identity_scale", torch.tensor(float(identity_scale)))
        else:
            raise LinearizerError(
                f"identity_scale must be None, a number or 'learnable', got {identity_scale!r}"
            )

    def _act(self, x: Tensor, right: Tensor, left: Tensor) -> Tensor:
        """``x right left^T (+ s x)``: ``A x`` for ``(V, U)``, ``A^T x`` for ``(U, V)``."""
        out = (x @ right) @ left.T
        return out if self.identity_scale is None else out + self.identity_scale * x

    def forward(self, z: Tensor, t: float | Tensor | None = None) -> Tensor:
        check_rows(z, self.in_features)
        return self._act(z, self.V, self.U)

    def transpose_apply(self, y: Tensor, t: float | Tensor | None = None) -> Tensor:
        check_rows(y, self.out_features)
        return self._act(y, self.U, self.V)

    def matrix(self, t: float | Tensor | None = None, dtype: torch.dtype | None = None) -> Tensor:
        m = factor_product(self.U, self.V, dtype or self.U.dtype)
        if self.identity_scale is not None:
            eye = torch.eye(self.in_features, dtype=m.dtype, device=m.device)
            m = m + self.identity_scale.to(m.dtype) * eye
        return m

    def factors(self, t: float | Tensor | None = None) -> tuple[Tensor, Tensor] | None:
        """``(U, V)`` when ``A = U V^T`` exactly; ``None`` with an identity term (see ``parts``)."""
        return None if self.identity_scale is not None else (self.U, self.V)

    def parts(self) -> tuple[Tensor, Tensor, Tensor | None]:
        """``(U, V, s)`` with ``A = U V^T + s I`` (``s`` is ``None`` without identity term)."""
        return self.U, self.V, self.identity_scale

    def extra_repr(self) -> str:
        s = "" if self.identity_scale is None else ", identity"
        return (
            f"out_features={self.out_features}, in_features={self.in_features}, rank={self.rank}{s}"
        )
