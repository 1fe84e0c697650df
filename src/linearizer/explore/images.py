"""Pictures in and out of the explorer: checked uploads, drawings, and displayable arrays.

Everything here is plain numpy/Pillow/torch, so the handlers can be tested without Gradio.
Uploads are read only after two checks (bytes on disk, then the pixel count from the header), so a
huge or non-image file is refused with a one-line :class:`~linearizer.errors.LinearizerError`.

>>> import numpy as np
>>> x = to_model_image(np.zeros((40, 40), np.uint8), (1, 8, 8))
>>> tuple(x.shape)
(1, 1, 8, 8)
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torch import Tensor

from ..data.images import grid_array
from ..errors import LinearizerError

MAX_UPLOAD_BYTES = 2 * 1024 * 1024
"""Uploads larger than this (2 MiB) are refused before they are decoded."""
MAX_UPLOAD_PIXELS = 4096 * 4096
"""Uploads with more pixels than this are refused from their header (decompression bombs)."""
FORMATS = ("PNG", "JPEG", "GIF", "BMP", "WEBP")
UPLOAD_HINT = f"PNG, JPEG, GIF, BMP or WebP, at most {MAX_UPLOAD_BYTES // (1024 * 1024)} MiB"
DISPLAY_SIDE = 160  # small model images are enlarged (nearest) to at least this many pixels


def in_range(name: str, value: float, low: int, high: int) -> None:
    """Refuse a handler's ``value`` outside ``low..high`` with a one-line error."""
    if not low <= value <= high:
        raise LinearizerError(f"{name} must be in {low}..{high}, got {value}")


def read_upload(path: str | os.PathLike) -> np.ndarray:
    """The uploaded file as a uint8 array ``[H, W]`` or ``[H, W, C]``, after the size checks."""
    path = Path(path)
    name = path.name
    try:
        size = path.stat().st_size
    except OSError as e:
        raise LinearizerError(f"{name}: cannot read the upload ({e.strerror})") from None
    if size > MAX_UPLOAD_BYTES:
        limit = MAX_UPLOAD_BYTES / 2**20
        raise LinearizerError(f"{name}: {size / 2**20:.1f} MiB is over the {limit:g} MiB limit")
    try:
        with Image.open(path) as img:
            if img.format not in FORMATS:
                raise LinearizerError(
                    f"{name}: {img.format} images are not accepted ({UPLOAD_HINT})"
                )
            if img.width * img.height > MAX_UPLOAD_PIXELS:
                raise LinearizerError(
                    f"{name}: {img.width}x{img.height} pixels is more than the "
                    f"{MAX_UPLOAD_PIXELS} pixel limit"
                )
            img.seek(0)  # the first frame of an animation
            alpha = img.mode in ("RGBA", "LA", "PA") or "transparency" in img.info
            return np.array(img.convert("RGBA" if alpha else "RGB"))
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
        raise LinearizerError(f"{name}: not an image ({UPLOAD_HINT})") from None


def drawing_array(value: object) -> np.ndarray | None:
    """The picture of a sketchpad value (a dict with a ``composite``) or an array; ``None`` when
    nothing was drawn (blank or fully transparent)."""
    if isinstance(value, Mapping):
        value = value.get("composite")
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)):
        return read_upload(value)
    array = np.asarray(value)
    if array.ndim not in (2, 3) or array.size == 0:
        raise LinearizerError(f"a drawing must be an [H, W] or [H, W, C] image, got {array.shape}")
    gray = _gray(array)
    return None if float(gray.max() - gray.min()) < 1e-3 else array


def _unit(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array)
    if array.dtype == np.uint8:
        return array.astype(np.float64) / 255.0
    return np.clip(np.nan_to_num(array.astype(np.float64)), 0.0, 1.0)


def _flatten_alpha(array: np.ndarray) -> np.ndarray:
    """RGB(A)/L(A) in [0, 1] -> RGB over white (a transparent canvas is paper, not ink)."""
    a = _unit(array)
    if a.ndim == 2:
        a = a[..., None]
    if a.shape[2] in (2, 4):
        alpha = a[..., -1:]
        a = a[..., :-1] * alpha + (1.0 - alpha)
    if a.shape[2] == 1:
        a = np.repeat(a, 3, axis=2)
    return a[..., :3]


def _gray(array: np.ndarray) -> np.ndarray:
    return _flatten_alpha(array) @ np.array([0.299, 0.587, 0.114])


def to_model_image(array: np.ndarray, shape: tuple[int, int, int], digit: bool = True) -> Tensor:
    """A picture as one model input ``[1, C, H, W]`` float32 in [0, 1].

    ``digit`` (one-channel models): grey, light ink on a dark ground (a light page is inverted),
    cropped to the ink and centred with MNIST's margin (the digit fills 20 of 28 pixels).
    Otherwise the centre square is resized.
    """
    c, h, w = shape
    if digit and c == 1:
        gray = _gray(array)
        if gray.mean() > 0.5:
            gray = 1.0 - gray
        square = _centre_ink(gray)
        img = Image.fromarray(np.rint(square * 255).astype(np.uint8), "L")
        pixels = np.array(img.resize((w, h), Image.Resampling.LANCZOS), np.float32)[None] / 255
    else:
        rgb = _flatten_alpha(array)
        side = min(rgb.shape[:2])
        top, left = (rgb.shape[0] - side) // 2, (rgb.shape[1] - side) // 2
        crop = np.rint(rgb[top : top + side, left : left + side] * 255).astype(np.uint8)
        img = Image.fromarray(crop, "RGB").resize((w, h), Image.Resampling.LANCZOS)
        pixels = np.array(img, np.float32).transpose(2, 0, 1) / 255
        if c == 1:
            pixels = pixels.mean(0, keepdims=True)
    return torch.from_numpy(np.ascontiguousarray(pixels))[None]


def _centre_ink(gray: np.ndarray) -> np.ndarray:
    """The ink's bounding box, padded to a square whose side is 28/20 of the box's."""
    ys, xs = np.nonzero(gray > 0.1)
    if len(ys) == 0:
        return gray
    top, bottom, left, right = ys.min(), ys.max() + 1, xs.min(), xs.max() + 1
    box = gray[top:bottom, left:right]
    side = int(math.ceil(max(box.shape) * 28 / 20))
    out = np.zeros((side, side))
    y0, x0 = (side - box.shape[0]) // 2, (side - box.shape[1]) // 2
    out[y0 : y0 + box.shape[0], x0 : x0 + box.shape[1]] = box
    return out


def picture(images: Tensor, nrow: int = 8, min_side: int = DISPLAY_SIDE) -> np.ndarray:
    """Images ``[N, C, H, W]`` (values clamped to [0, 1]) as one uint8 grid for display,
    enlarged by an integer factor (nearest) so each image is at least ``min_side`` pixels."""
    scale = max(1, -(-min_side // max(images.shape[-2:])))
    grid = grid_array(images.detach().float().cpu(), nrow=nrow, padding=1)
    grid = np.repeat(np.repeat(grid, scale, axis=0), scale, axis=1)
    return grid[..., 0] if grid.shape[2] == 1 else grid


def noise_picture(noise: Tensor, nrow: int = 8) -> np.ndarray:
    """Gaussian noise drawn with -3..3 standard deviations mapped to black..white."""
    return picture(noise / 6.0 + 0.5, nrow=nrow)
