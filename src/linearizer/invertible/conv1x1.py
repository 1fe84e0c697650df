"""Invertible 1x1 convolution (Glow), LU-parametrised so it stays invertible and cheap to invert.

``W = P L (U + diag(sign * exp(log_s)))`` with a fixed permutation ``P``, a unit lower
triangular ``L`` and a strictly upper ``U``: ``W`` is invertible for every parameter value
(its diagonal factor never vanishes), ``log |det W| = sum(log_s)``, and ``W^-1`` comes from two
triangular solves, with no general matrix inverse. :class:`LUFactors` holds that
parametrisation; :class:`InvConv1x1` applies ``W`` to channels, the latent transport's
:class:`~linearizer.flow.transport.Mixing` to vectors.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..checks import check_channels
from ..errors import LinearizerError
from .base import InvertibleModule


def _lu_parts(weight: Tensor) -> dict[str, Tensor]:
    """P, strict-lower L, strict-upper U, sign and log|diag| of ``weight = P L U`` (float64)."""
    w = weight.detach().to("cpu", torch.float64).numpy()
    if w.ndim != 2 or w.shape[0] != w.shape[1]:
        raise LinearizerError(f"InvConv1x1 needs a square matrix, got shape {w.shape}")
    if not np.isfinite(w).all():
        raise LinearizerError("InvConv1x1 weight has non-finite entries")
    p, lower, upper = scipy.linalg.lu(w)
    diag = np.diag(upper)
    if np.any(diag == 0):
        raise LinearizerError("InvConv1x1 weight is singular")
    parts = {
        "perm": p,
        "lower": np.tril(lower, -1),
        "upper": np.triu(upper, 1),
        "sign_s": np.sign(diag),
        "log_s": np.log(np.abs(diag)),
    }
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in parts.items()}


class LUFactors(nn.Module):
    """The ``L`` and ``U`` factors of an invertible ``n x n`` matrix ``W = P L U``, as
    parameters that keep ``W`` invertible: ``lower`` (strictly lower part of the unit
    lower-triangular ``L``), ``upper`` (strictly upper part of ``U``) and ``log_s`` (``U``'s
    diagonal is ``sign_s * exp(log_s)``). How ``P`` is stored is the owner's, and so is calling
    :meth:`_register_lu` in ``__init__`` (where its entries go in the state dict).

    >>> lu = LUFactors()
    >>> lu._register_lu(3)
    >>> lower, upper = lu._factors()  # W = P L U starts as P
    >>> bool(torch.equal(lower @ upper, torch.eye(3))), bool(lu.log_abs_det() == 0)
    (True, True)
    """

    sign_s: Tensor
    lower_mask: Tensor

    def _register_lu(self, n: int) -> None:
        self.register_buffer("sign_s", torch.ones(n))
        mask = torch.tril(torch.ones(n, n), -1)
        self.register_buffer("lower_mask", mask, persistent=False)  # a constant
        self.lower = nn.Parameter(torch.zeros(n, n))
        self.upper = nn.Parameter(torch.zeros(n, n))
        self.log_s = nn.Parameter(torch.zeros(n))

    def _factors(self) -> tuple[Tensor, Tensor]:
        """Unit-lower ``L`` and upper ``U`` (diagonal included)."""
        eye = torch.eye(len(self.log_s), dtype=self.lower.dtype, device=self.lower.device)
        lower = self.lower * self.lower_mask + eye
        upper = self.upper * self.lower_mask.T + torch.diag(self.sign_s * torch.exp(self.log_s))
        return lower, upper

    def log_abs_det(self) -> Tensor:
        """``log |det W|`` (a scalar)."""
        return self.log_s.sum()


class InvConv1x1(LUFactors, InvertibleModule):
    """Mix channels at every pixel: ``z[b, o, i, j] = sum_c W[o, c] * y[b, c, i, j]``.

    Starts at a random orthogonal matrix (QR of a Gaussian, from torch's global generator).
    ``weight()`` returns ``W``; :meth:`from_weight` / :meth:`set_weight_` load a given ``W``
    (e.g. the authors' dense ``mix.W``) through its LU factors.

    >>> W = torch.tensor([[2.0, 1.0], [0.0, -3.0]], dtype=torch.float64)
    >>> mix = InvConv1x1.from_weight(W)
    >>> bool(torch.allclose(mix.weight(), W, rtol=1e-12, atol=0))
    True
    >>> x = torch.randn(1, 2, 3, 3, dtype=torch.float64)
    >>> bool(torch.allclose(mix.inverse(mix(x)), x, rtol=1e-12, atol=1e-12))
    True
    """

    # buffers (registered in __init__; sign_s and lower_mask by LUFactors)
    perm: Tensor

    def __init__(self, channels: int) -> None:
        super().__init__()
        if channels < 1:
            raise LinearizerError(f"InvConv1x1 needs at least one channel, got {channels}")
        self.channels = channels
        self.register_buffer("perm", torch.eye(channels))
        self._register_lu(channels)
        q, _ = torch.linalg.qr(torch.randn(channels, channels, dtype=torch.float64))
        self.set_weight_(q)

    @classmethod
    def from_weight(cls, weight: Tensor) -> InvConv1x1:
        """A new layer computing exactly ``weight`` (square, invertible)."""
        if not isinstance(weight, Tensor) or weight.dim() != 2:
            raise LinearizerError("InvConv1x1.from_weight needs a 2-D tensor")
        layer = cls(weight.shape[0]).to(weight.device)
        if weight.is_floating_point():
            layer = layer.to(weight.dtype)
        layer.set_weight_(weight)
        return layer

    @torch.no_grad()
    def set_weight_(self, weight: Tensor) -> None:
        """Set the LU parameters so that :meth:`weight` equals ``weight`` (to rounding)."""
        if tuple(weight.shape) != (self.channels, self.channels):
            raise LinearizerError(
                f"InvConv1x1 weight must be {self.channels}x{self.channels}, "
                f"got {tuple(weight.shape)}"
            )
        for name, value in _lu_parts(weight).items():
            getattr(self, name).copy_(value)

    def weight(self) -> Tensor:
        """The ``[C, C]`` mixing matrix ``W = P L U``."""
        lower, upper = self._factors()
        return self.perm @ lower @ upper

    def inverse_weight(self) -> Tensor:
        """``W^-1 = U^-1 L^-1 P^T`` by two triangular solves."""
        lower, upper = self._factors()
        x = torch.linalg.solve_triangular(lower, self.perm.T, upper=False, unitriangular=True)
        return torch.linalg.solve_triangular(upper, x, upper=True)

    def _mix(self, x: Tensor, matrix: Tensor) -> Tensor:
        check_channels(x, self.channels, "InvConv1x1")
        return F.conv2d(x, matrix.to(x.dtype)[:, :, None, None])

    def forward(self, x: Tensor, flag: Tensor | None = None) -> Tensor:
        return self._mix(x, self.weight())

    def inverse(self, z: Tensor, flag: Tensor | None = None) -> Tensor:
        return self._mix(z, self.inverse_weight())

    def inverse_logdet(self, z: Tensor, flag: Tensor | None = None) -> tuple[Tensor, Tensor]:
        pixels = z.shape[2] * z.shape[3]  # W^-1 at every pixel
        return self.inverse(z), (-pixels * self.log_abs_det()).to(z.dtype).expand(len(z))

    def extra_repr(self) -> str:
        return f"{self.channels}"
