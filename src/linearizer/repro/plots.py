"""The repro figures' image helpers; figures themselves come from :mod:`linearizer.report`."""

from __future__ import annotations

import textwrap

import numpy as np
from matplotlib.figure import Figure
from torch import Tensor

from ..data import grid_array


def show_images(ax, images: Tensor | np.ndarray, nrow: int, title: str = "") -> None:
    """Tile images (values in [0, 1]; clamped) on ``ax`` as a grey grid."""
    arr = grid_array(images, nrow=nrow, padding=1)
    ax.imshow(
        arr[..., 0] if arr.shape[-1] == 1 else arr,
        cmap="gray",
        vmin=0,
        vmax=255,
        interpolation="nearest",
    )
    ax.set_xticks([])
    ax.set_yticks([])
    if title:
        ax.set_title(title, fontsize=8)


def image_rows(fig: Figure, rows: list[tuple[str, Tensor]], nrow: int, fontsize: float = 7) -> None:
    """One row of tiled images per ``(label, images)``, top to bottom, labelled on the left."""
    for r, (label, images) in enumerate(rows):
        ax = fig.add_subplot(len(rows), 1, r + 1)
        show_images(ax, images, nrow=nrow)
        ax.set_ylabel(label, fontsize=fontsize, rotation=0, ha="right", va="center")


def noise_view(x: Tensor) -> Tensor:
    """Noise images for display: ``0.5 + x / 6`` maps [-3, 3] (three sigma) onto [0, 1]."""
    return (0.5 + x.float() / 6).clamp(0, 1)


def amplified(diff: Tensor) -> tuple[Tensor, float]:
    """``|diff|`` scaled so its maximum is white; returns the images and that maximum."""
    a = diff.detach().abs().double()
    top = float(a.max())
    return ((a / top) if top > 0 else a).float(), top


def caption(fig: Figure, text: str) -> None:
    """Lay the subplots out, then put ``text`` under them, wrapped to the figure's width
    (by hand: matplotlib's own wrapping re-measures every word and is slow)."""
    fig.tight_layout()
    width = max(40, int(fig.get_figwidth() * 15))
    fig.text(0.01, -0.02, textwrap.fill(text, width), ha="left", va="top", fontsize=7.5)
