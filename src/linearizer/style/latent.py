"""The latent side of a style model: ``g`` at one conditioning flag, as an invertible module."""

from __future__ import annotations

from torch import Tensor, nn

from ..invertible.squeeze import Squeeze


class LatentView(nn.Module):
    """``g`` at one conditioning flag, with the latent optionally squeezed 2x2 to 4C channels
    (:class:`~linearizer.invertible.Squeeze`).

    An invertible module in its own right (``forward``/``inverse``), so it can define an
    :class:`InducedSpace` or serve as ``g_x``/``g_y`` of a :class:`Linearizer`. It passes the flag
    as a float, as the rest of the style model does, where
    :class:`~linearizer.invertible.Conditioned` passes a per-sample tensor.
    """

    def __init__(self, g: nn.Module, flag: float, squeeze: bool) -> None:
        super().__init__()
        self.g, self.flag = g, float(flag)
        self.fold = Squeeze() if squeeze else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.fold(self.g(x, self.flag))

    def inverse(self, z: Tensor) -> Tensor:
        if isinstance(self.fold, Squeeze):
            z = self.fold.inverse(z)
        return self.g.inverse(z, self.flag)
