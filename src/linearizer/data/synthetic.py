"""Tiny synthetic image sets made on the fly: for smoke runs and tests, never for results.

Each image is one or two anti-aliased strokes (bars at random angles) on black, in [0, 1]:
digit-like enough to exercise every code path, generated from a seed without any download.
"""

from __future__ import annotations

import torch
from torch import Tensor


def strokes(n: int, size: int = 32, seed: int = 0, channels: int = 1) -> tuple[Tensor, Tensor]:
    """``n`` images ``[n, channels, size, size]`` and labels (the number of strokes - 1)."""
    gen = torch.Generator().manual_seed(seed)
    coords = (torch.arange(size, dtype=torch.float32) + 0.5) / size
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    labels = torch.randint(0, 2, (n,), generator=gen)
    images = torch.zeros(n, 1, size, size)
    for k in range(2):
        centre = 0.3 + 0.4 * torch.rand(n, 2, generator=gen)
        angle = torch.rand(n, generator=gen) * torch.pi
        length = 0.25 + 0.2 * torch.rand(n, generator=gen)
        dx, dy = torch.cos(angle)[:, None, None], torch.sin(angle)[:, None, None]
        px, py = xx - centre[:, 0, None, None], yy - centre[:, 1, None, None]
        along, across = px * dx + py * dy, -px * dy + py * dx
        inside = (along.abs() <= length[:, None, None]).float()
        stroke = inside * torch.clamp(1.5 - across.abs() * size / 1.5, 0, 1)
        keep = (labels >= k).float()[:, None, None]
        images[:, 0] = torch.maximum(images[:, 0], stroke * keep)
    return images.expand(n, channels, size, size).contiguous(), labels
