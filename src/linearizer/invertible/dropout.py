"""Dropout that an invertible network can undo exactly, because the inverse redraws the mask.

Why: a coupling's inverse calls its conditioner again on the kept half. With ordinary
dropout the second call draws a new mask, so ``g^-1(g(x)) != x`` in train mode, and every
loss term that goes through an inverse (the paper's decoder terms) trains on a wrong inverse.
Here the mask depends only on ``(seed, module_id, mask shape)``:

* ``seed`` is set once per training step on the whole network with :func:`set_dropout_seed`;
* ``module_id`` is the module's position among the network's ``SharedDropout`` modules (set by
  the same call), so different layers draw different masks;
* one mask of shape ``[1, C, H, W]`` is shared over the batch, so forward and inverse agree even
  when they run on batches of different size or composition (a forward on data, an inverse on
  predictions).

Until a seed is set, seed 0 is used (a fixed mask: still exactly invertible). In eval mode
the layer is the identity.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..errors import LinearizerError

_MAX_MODULES = 1 << 16


class SharedDropout(nn.Module):
    """Inverted dropout with a seeded mask ``[1, C, H, W]`` shared over the batch.

    >>> drop = SharedDropout(0.5).train()
    >>> x = torch.ones(3, 2, 4, 4)
    >>> y1, y2 = drop(x), drop(x)
    >>> bool(torch.equal(y1, y2)), bool(torch.equal(y1[0], y1[2]))
    (True, True)
    """

    def __init__(self, p: float = 0.1) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise LinearizerError(f"dropout probability must be in [0, 1), got {p}")
        self.p = float(p)
        self.seed = 0
        self.module_id = 0

    def mask(self, shape: tuple[int, ...], ref: Tensor) -> Tensor:
        """The scaled keep-mask ``[1, *shape[1:]]`` for the current seed, in ``ref``'s dtype."""
        generator = torch.Generator(device=ref.device)
        generator.manual_seed((self.seed * _MAX_MODULES + self.module_id) % (1 << 63))
        # Draw in float32 whatever ref's dtype, so float32 and float64 runs share the mask.
        u = torch.rand((1, *shape[1:]), generator=generator, device=ref.device)
        return (u >= self.p).to(ref.dtype) / (1.0 - self.p)

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        return x * self.mask(tuple(x.shape), x)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def set_dropout_seed(module: nn.Module, seed: int) -> int:
    """Set ``seed`` on every :class:`SharedDropout` inside ``module``; return how many.

    Also numbers them in ``module.modules()`` order, so each layer gets its own mask.
    Call it once per training step, before the forward and inverse passes of that step.
    """
    if int(seed) != seed or seed < 0:
        raise LinearizerError(f"dropout seed must be a non-negative integer, got {seed}")
    layers = [m for m in module.modules() if isinstance(m, SharedDropout)]
    if len(layers) > _MAX_MODULES:
        raise LinearizerError(f"too many SharedDropout layers ({len(layers)})")
    for index, layer in enumerate(layers):
        layer.seed = int(seed)
        layer.module_id = index
    return len(layers)
