"""The vector space a bijection ``g`` induces on its input space.

``u (+) v = g^-1(g(u) + g(v))``, ``a (.) v = g^-1(a g(v))``, zero ``g^-1(0)``,
``<u, v>_g = <g(u), g(v)>``, ``||v||_g = ||g(v)||``. Every operation takes batches ``[B, ...]`` of
any shape the network accepts; inner products, norms and distances return one number per sample.

>>> import torch
>>> class Cube(torch.nn.Module):  # a bijection of R: x -> x^3 (inverse: the real cube root)
...     def forward(self, x):
...         return x**3
...     def inverse(self, z):
...         return z.sign() * z.abs() ** (1 / 3)
>>> space = InducedSpace(Cube())
>>> u, v = torch.tensor([[1.0]]), torch.tensor([[2.0]])
>>> space.add(u, v)  # (1 + 8) ** (1/3)
tensor([[2.0801]])
>>> space.scale(8.0, u)
tensor([[2.]])
>>> space.inner(u, v)
tensor([8.])
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ..errors import LinearizerError

Scalar = float | int | Tensor


def _batch(x: Tensor, what: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise LinearizerError(f"{what} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() < 1:
        raise LinearizerError(f"{what} must have a batch dimension, got a 0-d tensor")
    return x


def broadcast_coeff(a: Scalar, z: Tensor) -> Tensor | float:
    """A scalar, or a ``[B]`` tensor reshaped to ``[B, 1, ..., 1]`` to multiply the batch ``z``."""
    if not isinstance(a, Tensor):
        return float(a)
    if a.dim() == 0 or a.numel() == 1:
        return a.reshape(()).to(z)
    if a.dim() != 1 or a.shape[0] != z.shape[0]:
        raise LinearizerError(
            f"coefficient must be a scalar or a [B] tensor with B={z.shape[0]}, "
            f"got shape {list(a.shape)}"
        )
    return a.to(z).view(-1, *([1] * (z.dim() - 1)))


class InducedSpace:
    """The induced vector space ``(X, (+), (.))`` of an invertible module ``g``.

    ``g`` is any module with ``forward(x)`` and ``inverse(z)`` (for a shared network, a view such
    as ``Conditioned(G, 1.0)``).
    """

    def __init__(self, g: nn.Module) -> None:
        if not callable(g) or not callable(getattr(g, "inverse", None)):
            raise LinearizerError("InducedSpace needs a module with forward(x) and inverse(z)")
        self.g: Any = g  # any module with forward(x) and inverse(z)

    def encode(self, x: Tensor) -> Tensor:
        return self.g(_batch(x, "x"))

    def decode(self, z: Tensor) -> Tensor:
        return self.g.inverse(_batch(z, "latent"))

    def add(self, u: Tensor, v: Tensor) -> Tensor:
        return self.decode(self.encode(u) + self.encode(v))

    def sub(self, u: Tensor, v: Tensor) -> Tensor:
        return self.decode(self.encode(u) - self.encode(v))

    def neg(self, v: Tensor) -> Tensor:
        return self.decode(-self.encode(v))

    def zero(self, like: Tensor) -> Tensor:
        """The zero vector ``g^-1(0)``, one per sample of ``like``."""
        return self.decode(torch.zeros_like(self.encode(like)))

    def scale(self, a: Scalar, v: Tensor) -> Tensor:
        """``a (.) v``; ``a`` a scalar or a ``[B]`` tensor (one factor per sample)."""
        z = self.encode(v)
        return self.decode(broadcast_coeff(a, z) * z)

    def lincomb(self, coeffs: Sequence[Scalar] | Tensor, vectors: Sequence[Tensor]) -> Tensor:
        """``c_1 (.) v_1 (+) ... (+) c_n (.) v_n`` with one decode at the end."""
        if len(coeffs) != len(vectors) or len(vectors) == 0:
            raise LinearizerError(
                f"lincomb needs as many coefficients as vectors (at least one), "
                f"got {len(coeffs)} and {len(vectors)}"
            )
        terms = [broadcast_coeff(c, z) * z for c, z in zip(coeffs, map(self.encode, vectors))]
        return self.decode(functools.reduce(operator.add, terms))

    def inner(self, u: Tensor, v: Tensor) -> Tensor:
        """``<g(u), g(v)>`` per sample: ``[B]``."""
        return (self.encode(u) * self.encode(v)).flatten(1).sum(1)

    def norm(self, v: Tensor) -> Tensor:
        return self.encode(v).flatten(1).norm(dim=1)

    def dist(self, u: Tensor, v: Tensor) -> Tensor:
        return (self.encode(u) - self.encode(v)).flatten(1).norm(dim=1)

    def interpolate(self, u: Tensor, v: Tensor, alpha: Scalar) -> Tensor:
        """``(1 - alpha) (.) u (+) alpha (.) v``: the induced line through ``u`` (alpha 0) and
        ``v`` (alpha 1); ``alpha`` a scalar or a ``[B]`` tensor."""
        zu, zv = self.encode(u), self.encode(v)
        a = broadcast_coeff(alpha, zu)
        return self.decode((1 - a) * zu + a * zv)
