"""The interface every invertible network implements, and fixed-flag views of conditioned ones."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from ..errors import LinearizerError, deprecated


class InvertibleModule(nn.Module):
    """A bijection with an exact inverse, and optionally the log-determinant of its Jacobian.

    ``flag`` is an optional conditioning tensor of shape ``[B]`` (the paper's time flag tau,
    which switches the shared network between its data side and its noise side), handed
    unchanged to every conditioner inside; unconditioned blocks ignore it. For one release the
    keyword ``cond=`` (its former name) is still accepted by ``forward``, ``inverse`` and
    ``inverse_logdet`` of every subclass, with a :class:`DeprecationWarning`.

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

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in FLAG_METHODS:
            if name in cls.__dict__:
                setattr(cls, name, accepts_cond(cls.__dict__[name]))

    def forward(self, x: Tensor, flag: Tensor | None = None) -> Tensor:  # pragma: no cover
        raise NotImplementedError

    def inverse(self, z: Tensor, flag: Tensor | None = None) -> Tensor:  # pragma: no cover
        raise NotImplementedError

    def inverse_logdet(self, z: Tensor, flag: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``(x, log |det dx/dz|)``: the inverse and, per sample ``[B]``, its log-determinant."""
        raise NotImplementedError(f"{type(self).__name__} does not compute a log-determinant")


FLAG_METHODS = ("forward", "inverse", "inverse_logdet")


def accepts_cond(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (a method with a ``flag`` parameter) that also takes the keyword ``cond=``, its
    former name, with a :class:`DeprecationWarning`. Methods that still name it ``cond`` (or
    have no ``flag``) are returned unchanged.

    >>> class Block(InvertibleModule):
    ...     def forward(self, x, flag=None):
    ...         return x if flag is None else x + flag
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as seen:
    ...     warnings.simplefilter("always")
    ...     out = Block()(torch.zeros(1), cond=torch.ones(1))
    >>> float(out[0]), seen[0].category.__name__
    (1.0, 'DeprecationWarning')
    """
    params = inspect.signature(fn).parameters
    if "flag" not in params or "cond" in params or getattr(fn, "_accepts_cond", False):
        return fn

    @functools.wraps(fn)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if "cond" in kwargs:
            if "flag" in kwargs:
                raise LinearizerError("give flag= (or the deprecated cond=), not both")
            deprecated(f"{type(self).__name__}.{fn.__name__}: the keyword cond=", "flag=")
            kwargs["flag"] = kwargs.pop("cond")
        return fn(self, *args, **kwargs)

    wrapper._accepts_cond = True  # type: ignore[attr-defined]
    return wrapper


def has_logdet(module: nn.Module) -> bool:
    """Whether ``module`` implements :meth:`InvertibleModule.inverse_logdet`."""
    method = getattr(type(module), "inverse_logdet", InvertibleModule.inverse_logdet)
    return method is not InvertibleModule.inverse_logdet


def as_flag(value: float | Tensor | None, batch: int, ref: Tensor) -> Tensor | None:
    """Broadcast a scalar flag to the per-sample ``[B]`` tensor conditioners expect."""
    if value is None:
        return None
    if isinstance(value, Tensor):
        return value.to(ref).expand(batch) if value.dim() == 0 else value.to(ref)
    return torch.full((batch,), float(value), dtype=ref.dtype, device=ref.device)


def as_cond(value: float | Tensor | None, batch: int, ref: Tensor) -> Tensor | None:
    """Deprecated name of :func:`as_flag` (kept for one release)."""
    deprecated("as_cond", "as_flag")
    return as_flag(value, batch, ref)


class Conditioned(nn.Module):
    """One network seen at a fixed conditioning flag: ``Conditioned(G, 1.0)`` is ``x -> G(x, 1)``.

    This is how the paper shares one invertible U-Net as its data side (flag 1, ``g_data``) and
    its noise side (flag 0, ``g_noise``). Two views are the *same* induced space when they wrap
    the same network object at the same flag (see :func:`same_network`). For one release the
    keyword ``value=`` and the attribute ``value`` (the flag's former name) still work, with a
    :class:`DeprecationWarning`.

    >>> from linearizer.invertible import Squeeze
    >>> g = Conditioned(Squeeze(), 1.0)
    >>> x = torch.randn(2, 1, 4, 4)
    >>> bool((g.inverse(g(x)) == x).all())
    True
    """

    def __init__(
        self, net: nn.Module, flag: float | None = None, *, value: float | None = None
    ) -> None:
        super().__init__()
        if value is not None:
            if flag is not None:
                raise LinearizerError(
                    "give Conditioned a flag (or the deprecated value=), not both"
                )
            deprecated("Conditioned: the keyword value=", "flag=")
            flag = value
        if flag is None:
            raise LinearizerError("Conditioned needs a flag (the network's conditioning value)")
        self.net: Any = net  # any module with forward(x, flag) and inverse(z, flag)
        self.flag = float(flag)

    @property
    def value(self) -> float:
        """Deprecated name of :attr:`flag`."""
        deprecated("Conditioned.value", "Conditioned.flag")
        return self.flag

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x, as_flag(self.flag, x.shape[0], x))

    def inverse(self, z: Tensor) -> Tensor:
        return self.net.inverse(z, as_flag(self.flag, z.shape[0], z))

    def extra_repr(self) -> str:
        return f"flag={self.flag}"


def same_network(a: nn.Module, b: nn.Module) -> bool:
    """True when ``a`` and ``b`` compute the same bijection by construction (not by value)."""
    if isinstance(a, Conditioned) and isinstance(b, Conditioned):
        return a is b or (a.net is b.net and a.flag == b.flag)
    return a is b
