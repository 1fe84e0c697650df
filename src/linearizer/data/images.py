"""PNG grids and strips of image batches (Pillow, written atomically).

Images are ``[N, C, H, W]`` (torch tensor or numpy array) with C = 1 or 3 and values meant to
lie in [0, 1]; values outside are clamped and NaNs drawn black, so a diverging sample still
shows up as a picture. ``scale`` enlarges every pixel to a ``scale x scale`` block (nearest
neighbour) so 32x32 digits stay readable.

>>> import torch, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "grid.png")
>>> save_grid(torch.rand(6, 1, 8, 8), path, nrow=3, scale=2).size
(64, 44)
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from ..errors import LinearizerError
from ..io import write_bytes


def _as_array(images) -> np.ndarray:
    if isinstance(images, torch.Tensor):
        images = images.detach().to("cpu", torch.float64).numpy()
    array = np.asarray(images, dtype=np.float64)
    if array.ndim == 3:  # [N, H, W] -> one channel
        array = array[:, None]
    if array.ndim != 4 or array.shape[1] not in (1, 3) or array.shape[0] == 0:
        raise LinearizerError(f"expected images [N, C, H, W] with C = 1 or 3, got {array.shape}")
    return array


def grid_array(images, nrow: int = 8, padding: int = 2, pad_value: float = 1.0) -> np.ndarray:
    """Tile ``images`` into one uint8 array ``[H', W', C]``, ``nrow`` images per row."""
    array = _as_array(images)
    if nrow < 1 or padding < 0:
        raise LinearizerError(f"nrow must be >= 1 and padding >= 0, got {nrow} and {padding}")
    array = np.clip(np.nan_to_num(array, nan=0.0), 0.0, 1.0)
    n, c, h, w = array.shape
    cols = min(nrow, n)
    rows = -(-n // cols)
    out = np.full(
        (rows * (h + padding) + padding, cols * (w + padding) + padding, c),
        float(np.clip(pad_value, 0.0, 1.0)),
    )
    for i, img in enumerate(array):
        r, k = divmod(i, cols)
        y, x = padding + r * (h + padding), padding + k * (w + padding)
        out[y : y + h, x : x + w] = img.transpose(1, 2, 0)
    return np.rint(out * 255.0).astype(np.uint8)


def _to_png(array: np.ndarray, scale: int) -> Image.Image:
    if not isinstance(scale, int) or scale < 1:
        raise LinearizerError(f"scale must be a positive integer, got {scale!r}")
    if scale > 1:
        array = array.repeat(scale, axis=0).repeat(scale, axis=1)
    return Image.fromarray(array[..., 0] if array.shape[-1] == 1 else array)


def save_grid(
    images,
    path: str | os.PathLike,
    nrow: int = 8,
    padding: int = 2,
    pad_value: float = 1.0,
    scale: int = 1,
) -> Image.Image:
    """Write ``images`` as a PNG grid with ``nrow`` images per row; returns the written image."""
    picture = _to_png(grid_array(images, nrow, padding, pad_value), scale)
    buf = io.BytesIO()
    picture.save(buf, format="PNG")
    write_bytes(Path(path), buf.getvalue())
    return picture


def save_strip(
    images, path: str | os.PathLike, padding: int = 2, pad_value: float = 1.0, scale: int = 1
) -> Image.Image:
    """Write ``images`` side by side in one row (inversions, interpolations) as a PNG."""
    return save_grid(images, path, len(_as_array(images)), padding, pad_value, scale)
