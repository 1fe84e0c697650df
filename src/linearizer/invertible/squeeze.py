"""2x2 space-to-depth and its exact inverse."""

from __future__ import annotations

from torch import Tensor

from ..checks import check_channels
from ..errors import LinearizerError
from .base import InvertibleModule


class Squeeze(InvertibleModule):
    """``[B, C, H, W] -> [B, 4C, H/2, W/2]`` with ``s[b, 4c+2p+q, i, j] = x[b, c, 2i+p, 2j+q]``.

    For one channel: channel 0 is the top-left pixel of each 2x2 cell, 1 top-right,
    2 bottom-left, 3 bottom-right (the authors' order). ``inverse`` is depth-to-space.

    >>> import torch
    >>> x = torch.arange(16.0).view(1, 1, 4, 4)
    >>> Squeeze()(x)[0, :, 0, 0].tolist()
    [0.0, 1.0, 4.0, 5.0]
    """

    def forward(self, x: Tensor, flag: Tensor | None = None) -> Tensor:
        check_channels(x, None, "Squeeze")
        b, c, h, w = x.shape
        if h % 2 or w % 2:
            raise LinearizerError(f"Squeeze needs even height and width, got {h}x{w}")
        x = x.reshape(b, c, h // 2, 2, w // 2, 2).permute(0, 1, 3, 5, 2, 4)
        return x.reshape(b, 4 * c, h // 2, w // 2)

    def inverse(self, z: Tensor, flag: Tensor | None = None) -> Tensor:
        check_channels(z, None, "Squeeze.inverse")
        b, c4, h, w = z.shape
        if c4 % 4:
            raise LinearizerError(f"Squeeze.inverse needs a multiple of 4 channels, got {c4}")
        z = z.reshape(b, c4 // 4, 2, 2, h, w).permute(0, 1, 4, 2, 5, 3)
        return z.reshape(b, c4 // 4, 2 * h, 2 * w)
