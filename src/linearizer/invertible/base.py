"""The interface every invertible network implements, and fixed-flag views of conditioned ones."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class InvertibleModule(nn.Module):
    """A bijection with an exact inverse.

    ``cond`` is an optional conditioning tensor of shape ``[B]`` (the paper's time flag tau)
    handed unchanged to every conditioner inside; unconditioned blocks ignore it.
    """

    def forward(self, x: Tensor, cond: Tensor | None = None) -> Tensor:  # pragma: no cover
        raise NotImplementedError

    def inverse(self, z: Tensor, cond: Tensor | None = None) -> Tensor:  # pragma: no cover
        raise NotImplementedError


def as_cond(value: float | Tensor | None, batch: int, ref: Tensor) -> Tensor | None:
    """Broadcast a scalar flag to the per-sample ``[B]`` tensor conditioners expect."""
    if value is None:
        return None
    if isinstance(value, Tensor):
        if value.dim() == 0:
            return value.to(ref).expand(batch)
        return value.to(ref)
    return torch.full((batch,), float(value), dtype=ref.dtype, device=ref.device)


class Conditioned(nn.Module):
    """One network seen at a fixed conditioning flag: ``Conditioned(G, 1.0)`` is ``x -> G(x, 1)``.

    This is how the paper shares one invertible U-Net as g_x (flag 1, data) and g_y (flag 0,
    noise). Two views are the *same* induced space when they wrap the same network object at
    the same flag (see :func:`same_network`).

    >>> from linearizer.invertible import Squeeze
    >>> g = Conditioned(Squeeze(), 1.0)
    >>> x = torch.randn(2, 1, 4, 4)
    >>> bool((g.inverse(g(x)) == x).all())
    True
    """

    def __init__(self, net: nn.Module, value: float) -> None:
        super().__init__()
        self.net = net
        self.value = float(value)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x, as_cond(self.value, x.shape[0], x))

    def inverse(self, z: Tensor) -> Tensor:
        return self.net.inverse(z, as_cond(self.value, z.shape[0], z))

    def extra_repr(self) -> str:
        return f"value={self.value}"


def same_network(a: nn.Module, b: nn.Module) -> bool:
    """True when ``a`` and ``b`` compute the same bijection by construction (not by value)."""
    if a is b:
        return True
    if isinstance(a, Conditioned) and isinstance(b, Conditioned):
        return a.net is b.net and a.value == b.value
    return False
