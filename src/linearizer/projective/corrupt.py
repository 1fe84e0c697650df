"""Corruptions of clean digits, for projecting them back onto the learned data manifold.

Each corruption maps images ``[N, C, H, W]`` in [0, 1] to corrupted images of the same shape,
drawing any randomness from ``gen`` (reproducible). Outputs are *not* clipped to [0, 1]: a
projector takes any input.

>>> x = torch.zeros(2, 1, 16, 16)
>>> sorted(CORRUPTIONS)
['blur', 'invert', 'noise', 'occlusion']
>>> bool(corrupt(x, "invert").eq(1).all())
True
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import LinearizerError

NOISE_STD = 0.3
BLUR_SIGMA = 1.5
OCCLUSION_FRACTION = 3 / 8  # side of the erased square, relative to the image side


def add_noise(x: Tensor, gen: torch.Generator) -> Tensor:
    """Additive Gaussian noise, standard deviation 0.3."""
    noise = torch.randn(x.shape, generator=gen, dtype=torch.float32).to(x)
    return x + NOISE_STD * noise


def blur(x: Tensor, gen: torch.Generator | None = None) -> Tensor:
    """Gaussian blur, sigma 1.5 pixels (separable, reflect padding)."""
    radius = int(3 * BLUR_SIGMA)
    t = torch.arange(-radius, radius + 1, dtype=torch.float64)
    w = torch.exp(-0.5 * (t / BLUR_SIGMA) ** 2)
    w = (w / w.sum()).to(x)
    c = x.shape[1]
    padded = F.pad(x, (radius, radius, radius, radius), mode="reflect")
    h = F.conv2d(padded, w.view(1, 1, 1, -1).expand(c, 1, 1, -1), groups=c)
    return F.conv2d(h, w.view(1, 1, -1, 1).expand(c, 1, -1, 1), groups=c)


def occlude(x: Tensor, gen: torch.Generator) -> Tensor:
    """Erase (set to 0) one square of side 3/8 of the image at a random place in the centre."""
    n, _, h, w = x.shape
    side = max(1, round(OCCLUSION_FRACTION * min(h, w)))
    lo_y, lo_x = h // 4, w // 4
    ys = torch.randint(lo_y, max(lo_y + 1, h - lo_y - side + 1), (n,), generator=gen)
    xs = torch.randint(lo_x, max(lo_x + 1, w - lo_x - side + 1), (n,), generator=gen)
    out = x.clone()
    for i in range(n):
        out[i, :, ys[i] : ys[i] + side, xs[i] : xs[i] + side] = 0.0
    return out


def invert(x: Tensor, gen: torch.Generator | None = None) -> Tensor:
    """Inverted colours, ``1 - x``."""
    return 1.0 - x


CORRUPTIONS: dict[str, Callable[[Tensor, torch.Generator], Tensor]] = {
    "noise": add_noise,
    "blur": blur,
    "occlusion": occlude,
    "invert": invert,
}


def corrupt(x: Tensor, name: str, seed: int = 0) -> Tensor:
    """``CORRUPTIONS[name](x)`` with a generator seeded by ``seed``."""
    if name not in CORRUPTIONS:
        raise LinearizerError(f"unknown corruption {name!r}; choose from {sorted(CORRUPTIONS)}")
    return CORRUPTIONS[name](x, torch.Generator().manual_seed(int(seed)))
