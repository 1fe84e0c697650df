"""The one interface every linear operator implements.

Column-vector convention: an operator maps ``z`` (a batch ``[B, D_in]`` of row-stored column
vectors) to ``A z``, computed as ``z @ A.T``. Time-dependent operators take ``t`` as a float or a
``[B]`` tensor (one time per sample) and never build a D x D matrix per sample.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class LinearOperator(nn.Module):
    """Base class. Subclasses set ``in_features``/``out_features`` and implement ``forward``
    and ``transpose_apply``; ``matrix`` and ``factors`` have generic fallbacks."""

    in_features: int
    out_features: int
    time_dependent: bool = False

    def forward(self, z: Tensor, t: float | Tensor | None = None) -> Tensor:  # pragma: no cover
        """``[B, D_in] -> [B, D_out]``: ``A(t) z`` for every row."""
        raise NotImplementedError

    def transpose_apply(
        self, y: Tensor, t: float | Tensor | None = None
    ) -> Tensor:  # pragma: no cover
        """``[B, D_out] -> [B, D_in]``: ``A(t)^T y`` for every row."""
        raise NotImplementedError

    def matrix(self, t: float | Tensor | None = None, dtype: torch.dtype | None = None) -> Tensor:
        """The dense ``[D_out, D_in]`` matrix (at one time ``t`` for time-dependent operators)."""
        p = next(self.parameters(), None)
        ref = p if p is not None else torch.empty(0)
        eye = torch.eye(self.in_features, dtype=dtype or ref.dtype, device=ref.device)
        if isinstance(t, Tensor) and t.dim() == 0:
            t = float(t)
        return self.forward(eye, t).T

    def factors(self, t: float | Tensor | None = None) -> tuple[Tensor, Tensor] | None:
        """``(U, V)`` with ``A = U V^T`` where the operator is low rank, else ``None``."""
        return None


def factor_product(u: Tensor, v: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """``u @ v.T``, the dense matrix of factors ``A = U V^T`` (in ``dtype`` when given)."""
    if dtype is not None:
        u, v = u.to(dtype), v.to(dtype)
    return u @ v.T
