"""The latent side of a style model: ``g`` at one conditioning flag, as an invertible module."""

from __future__ import annotations

from torch import Tensor, nn


class LatentView(nn.Module):
    """``g`` at one conditioning flag, with the latent optionally squeezed 2x2 to 4C channels.

    An invertible module in its own right (``forward``/``inverse``), so it can define an
    :class:`InducedSpace` or serve as ``g_x``/``g_y`` of a :class:`Linearizer`.
    """

    def __init__(self, g: nn.Module, flag: float, squeeze: bool) -> None:
        super().__init__()
        self.g, self.flag, self.squeeze = g, float(flag), bool(squeeze)

    def forward(self, x: Tensor) -> Tensor:
        z = self.g(x, self.flag)
        if self.squeeze:
            b, c, h, w = z.shape
            z = z.reshape(b, c, h // 2, 2, w // 2, 2).permute(0, 1, 3, 5, 2, 4)
            z = z.reshape(b, 4 * c, h // 2, w // 2)
        return z

    def inverse(self, z: Tensor) -> Tensor:
        if self.squeeze:
            b, c4, h, w = z.shape
            z = z.reshape(b, c4 // 4, 2, 2, h, w).permute(0, 1, 4, 2, 5, 3)
            z = z.reshape(b, c4 // 4, 2 * h, 2 * w)
        return self.g.inverse(z, self.flag)
