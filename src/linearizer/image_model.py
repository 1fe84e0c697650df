"""What the flow, projective and style models share: one invertible network ``G`` over images,
seen at conditioning flags; the input checks; encode/decode of flattened latents (optionally
with memory-saving backprop); and the :class:`~linearizer.algebra.Linearizer`
``g_y^-1(A g_x(.))`` over any operator ``A`` on those latents, from which the applications get
their pseudo-inverse, transpose, SVD and projections instead of re-implementing them.

>>> import torch
>>> from linearizer.invertible import cpu_network
>>> from linearizer.operators import Dense
>>> m = ImageModel(cpu_network(1, 1, 8), (1, 8, 8)).double()
>>> f = m.linearizer_of(Dense(2 * torch.eye(64, dtype=torch.float64)), x_flag=1.0, y_flag=1.0)
>>> x = torch.rand(2, 1, 8, 8, dtype=torch.float64)
>>> bool(torch.allclose(f.pinv(f(x)), x, rtol=1e-10, atol=0))
True
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .algebra import Linearizer
from .checks import check_image_batch
from .errors import LinearizerError
from .invertible import memsave
from .invertible.base import Conditioned, as_flag
from .operators.base import LinearOperator

Flag = float | Tensor | None


class ImageModel(nn.Module):
    """An invertible network on images ``[B, *image_shape]``, seen at flags.

    ``image_shape=None`` accepts any height and width (give ``channels``). ``flag=None`` means an
    unconditioned network (``net(x)``). ``memory_saving``: back-propagate through the network by
    recomputing its activations from its exact inverse (:mod:`linearizer.invertible.memsave`)
    instead of storing them. ``NET_ATTR`` names the attribute that holds the network (its
    prefix in checkpoints).
    """

    NET_ATTR = "net"
    memory_saving: bool = False

    def __init__(
        self, net: nn.Module, image_shape: tuple[int, ...] | None, *, channels: int | None = None
    ) -> None:
        super().__init__()
        setattr(self, self.NET_ATTR, net)
        self.image_shape = None if image_shape is None else tuple(int(s) for s in image_shape)
        self.dim = None if self.image_shape is None else math.prod(self.image_shape)
        self.channels = int(channels if self.image_shape is None else self.image_shape[0])

    @property
    def network(self) -> nn.Module:
        """The one invertible network ``G(x, flag)``."""
        return getattr(self, self.NET_ATTR)

    # --- checks -----------------------------------------------------------------------------
    def check_images(self, x: Tensor, what: str = "images") -> None:
        """One-line :class:`LinearizerError` unless ``x`` is a finite batch ``[N, *shape]``."""
        shape = self.image_shape or (self.channels, "H", "W")
        if self.image_shape is not None:
            check_image_batch(x, self.image_shape, what)
        elif not isinstance(x, Tensor) or x.dim() != 4 or x.shape[1] != self.channels:
            got = list(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise LinearizerError(
                f"{what} must have shape [N, {', '.join(map(str, shape))}], got {got}"
            )
        if not torch.isfinite(x).all():
            raise LinearizerError(f"{what} contain NaN or infinite values")

    # --- the network at a flag --------------------------------------------------------------
    def side(self, flag: Flag) -> nn.Module:
        """``G(., flag)`` as an invertible module (a fresh :class:`Conditioned` view, so the
        state dict holds the network once); the network itself when ``flag`` is ``None``."""
        return self.network if flag is None else Conditioned(self.network, float(flag))

    def encode_at(self, x: Tensor, flag: Flag) -> Tensor:
        """Flattened latents ``[B, D]`` of images under ``G(., flag)`` (flag per sample
        allowed)."""
        flags = as_flag(flag, x.shape[0], x)
        net = self.network
        z = memsave.forward(net, x, flags) if self.memory_saving else net(x, flags)
        return z.reshape(x.shape[0], -1)

    def decode_at(self, z: Tensor, flag: Flag) -> Tensor:
        """Images ``G^-1(z, flag)`` of flattened latents ``[B, D]``."""
        img = z.reshape(z.shape[0], *self.image_shape)
        flags = as_flag(flag, z.shape[0], z)
        if self.memory_saving:
            return memsave.inverse(self.network, img, flags)
        return self.network.inverse(img, flags)

    # --- Linearizers over the network -------------------------------------------------------
    def linearizer_of(
        self,
        A: LinearOperator,
        x_flag: Flag,
        y_flag: Flag,
        *,
        latent_shape: tuple[int, ...] | None = None,
        check_finite: bool = True,
    ) -> Linearizer:
        """``f = g_y^-1(A g_x(.))`` with ``g_x = side(x_flag)`` and ``g_y = side(y_flag)`` (one
        view when the flags agree, so powers, eig and projections apply). ``latent_shape``
        defaults to the image shape (the networks keep it)."""
        g_x = self.side(x_flag)
        g_y = g_x if _same_flag(x_flag, y_flag) else self.side(y_flag)
        shape = latent_shape or self.image_shape
        return Linearizer(g_x, A, g_y, shape, x_latent_shape=shape, check_finite=check_finite)


def _same_flag(a: Flag, b: Flag) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return float(a) == float(b)
