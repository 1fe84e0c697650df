"""The interface every invertible network implements, and fixed-flag views of conditioned ones."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn


class InvertibleModule(nn.Module):
    """A bijection with an exact inverse, and optionally the log-determinant of its Jacobian.

    ``cond`` is an optional conditioning tensor of shape ``[B]`` (the paper's time flag tau)
    handed unchanged to every conditioner inside; unconditioned blocks ignore it.

    A block whose determinant is cheap (a coupling, an LU-parametrised linear map) also
    implements :meth:`inverse_logdet`; :func:`has_logdet` says whether one does. The direction
    is the inverse's, the one a likelihood needs: ``log p(x) = log p_z(g(x)) - logdet``, with
    ``logdet`` that of ``dx/dz`` at ``z = g(x)``.

    >>> from linearizer.invertible import InvConv1x1
    >>> block = InvConv1x1(3).double()
    >>> z = torch.randn(2, 3, 4, 4, dtype=torch.float64)
    >>> x, logdet = block.inverse_logdet(z)
    >>> has_logdet(block), bool(torch.equal(x, block.inverse(z))), logdet.shape
    (True, True, torch.Size([2]))
    """

    def forward(self, x: Tensor, cond: Tensor | None = None) -> Tensor:  # pragma: no cover
        raise NotImplementedError

    def inverse(self, z: Tensor, cond: Tensor | None = None) -> Tensor:  # pragma: no cover
        raise NotImplementedError

    def inverse_logdet(self, z: Tensor, cond: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``(x, log |det dx/dz|)``: the inverse and, per sample ``[B]``, its log-determinant."""
        raise NotImplementedError(f"{type(self).__name__} does not compute a log-determinant")


def has_logdet(module: nn.Module) -> bool:
    """Whether ``module`` implements :meth:`InvertibleModule.inverse_logdet`."""
    method = getattr(type(module), "inverse_logdet", InvertibleModule.inverse_logdet)
    return method is not InvertibleModule.inverse_logdet


def as_cond(value: float | Tensor | None, batch: int, ref: Tensor) -> Tensor | None:
    """Broadcast a scalar flag to the per-sample ``[B]`` tensor conditioners expect."""
    if value is None:
        return None
    if isinstance(value, Tensor):
        return value.to(ref).expand(batch) if value.dim() == 0 else value.to(ref)
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
        self.net: Any = net  # any module with forward(x, cond) and inverse(z, cond)
        self.value = float(value)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x, as_cond(self.value, x.shape[0], x))

    def inverse(self, z: Tensor) -> Tensor:
        return self.net.inverse(z, as_cond(self.value, z.shape[0], z))

    def extra_repr(self) -> str:
        return f"value={self.value}"


def same_network(a: nn.Module, b: nn.Module) -> bool:
    """True when ``a`` and ``b`` compute the same bijection by construction (not by value)."""
    if isinstance(a, Conditioned) and isinstance(b, Conditioned):
        return a is b or (a.net is b.net and a.value == b.value)
    return a is b
