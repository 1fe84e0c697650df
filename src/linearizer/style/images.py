"""Reading and writing the RGB images of style transfer: files, or scikit-image's bundled photos.

An image *spec* is a file path (PNG, JPEG, ... anything Pillow reads) or ``skimage:NAME`` for a
public-domain picture that ships inside scikit-image (no download): ``skimage:chelsea``,
``skimage:astronaut``, ``skimage:coffee``, ``skimage:immunohistochemistry`` ... Every image is
centre-cropped to a square (``crop`` < 1 keeps that central fraction of the short side) and
resized to ``size x size``; the result is a float32 ``[3, size, size]`` tensor in [0, 1].

>>> import tempfile, os, torch
>>> path = os.path.join(tempfile.mkdtemp(), "red.png")
>>> _ = save_image(torch.tensor([1.0, 0.0, 0.0]).view(3, 1, 1).expand(3, 8, 8), path)
>>> load_image(path, 4).shape
torch.Size([3, 4, 4])
>>> image_name("skimage:chelsea"), image_name("/photos/cat.png")
('chelsea', 'cat')
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import Tensor

from ..errors import LinearizerError
from ..io import read_image, write_bytes

SKIMAGE_PREFIX = "skimage:"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")

# Central crops that keep the texture and drop a frame (the retina photo's black surround).
_DEFAULT_CROPS = {"retina": 0.5, "hubble_deep_field": 0.6}
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")

SKIMAGE_MISSING = (
    "scikit-image is not installed, so its bundled photos (skimage:NAME) are unavailable; "
    "install it with `pip install 'linearizer[style]'` (or `pip install scikit-image`), "
    "or pass your own image files instead"
)


def has_skimage() -> bool:
    try:
        import skimage.data  # noqa: F401
    except ImportError:
        return False
    return True


def _skimage_array(name: str) -> np.ndarray:
    try:
        import skimage.data as data
    except ImportError:
        raise LinearizerError(SKIMAGE_MISSING) from None
    loader = getattr(data, name, None) if _NAME_RE.match(name) else None
    if not callable(loader) or name.startswith("_") or name in {"download_all", "lbp_frontal_face"}:
        raise LinearizerError(
            f"skimage:{name} is not one of scikit-image's bundled images "
            "(try chelsea, astronaut, coffee, immunohistochemistry, hubble_deep_field, retina, "
            "gravel, brick, rocket)"
        )
    try:
        return np.asarray(loader())
    except Exception as e:  # images that need a download (pooch) fail here, offline
        raise LinearizerError(f"skimage:{name} cannot be loaded offline: {e}") from None


def _file_array(path: Path) -> np.ndarray:
    if not path.exists():
        raise LinearizerError(f"no such image file: {path}")
    return np.asarray(read_image(path, "RGB"))


def _to_rgb(array: np.ndarray, what: str) -> np.ndarray:
    if array.ndim == 2:
        array = np.stack([array] * 3, axis=-1)
    if array.ndim != 3 or array.shape[-1] not in (3, 4):
        raise LinearizerError(f"{what} is not an RGB image (array shape {array.shape})")
    array = array[..., :3]
    if array.dtype != np.uint8:
        scale = 255.0 if array.max() <= 1.0 else 1.0
        array = np.clip(array * scale, 0, 255).astype(np.uint8)
    return array


def image_name(spec: str) -> str:
    """A short name for an image spec: the skimage name or the file's stem."""
    spec = str(spec)
    if spec.startswith(SKIMAGE_PREFIX):
        return spec[len(SKIMAGE_PREFIX) :]
    return Path(spec).stem


def load_image(spec: str | os.PathLike, size: int, crop: float | None = None) -> Tensor:
    """``[3, size, size]`` float32 in [0, 1] from a file path or ``skimage:NAME``."""
    if not isinstance(size, int) or size < 2:
        raise LinearizerError(f"image size must be an integer >= 2, got {size!r}")
    spec = str(spec)
    if spec.startswith(SKIMAGE_PREFIX):
        name = image_name(spec)
        array = _to_rgb(_skimage_array(name), spec)
        crop = _DEFAULT_CROPS.get(name, 1.0) if crop is None else crop
    else:
        array = _to_rgb(_file_array(Path(spec)), spec)
        crop = 1.0 if crop is None else crop
    if not 0.0 < crop <= 1.0:
        raise LinearizerError(f"crop must be in (0, 1], got {crop}")
    h, w = array.shape[:2]
    side = max(1, int(round(min(h, w) * crop)))
    top, left = (h - side) // 2, (w - side) // 2
    square = Image.fromarray(np.ascontiguousarray(array[top : top + side, left : left + side]))
    if side != size:
        square = square.resize((size, size), Image.Resampling.LANCZOS)
    pixels = np.array(square, dtype=np.float32) / 255.0
    return torch.from_numpy(pixels).permute(2, 0, 1).contiguous()


def save_image(image: Tensor, path: str | os.PathLike) -> Path:
    """Write one ``[3, H, W]`` image (values clamped to [0, 1]) as a PNG, atomically."""
    if not isinstance(image, Tensor) or image.dim() != 3 or image.shape[0] != 3:
        shape = list(image.shape) if isinstance(image, Tensor) else type(image).__name__
        raise LinearizerError(f"save_image needs a [3, H, W] tensor, got {shape}")
    array = image.detach().to("cpu", torch.float64).nan_to_num(0.0).clamp(0, 1)
    array = (array.permute(1, 2, 0).numpy() * 255.0).round().astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="PNG")
    return write_bytes(path, buf.getvalue())


def save_picture(images: Tensor, path: str | os.PathLike, nrow: int, quality: int = 90) -> Path:
    """A grid of ``images [N, 3, H, W]`` (``nrow`` per row) as PNG or JPEG, by ``path``'s suffix.

    JPEG keeps committed pictures of noisy textures small (PNG barely compresses them).
    """
    from ..data import grid_array

    path = Path(path)
    fmt = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG"}.get(path.suffix.lower())
    if fmt is None:
        raise LinearizerError(f"pictures are written as .png or .jpg, got {path.name}")
    array = grid_array(images.detach().cpu().clamp(0, 1), nrow=nrow)
    buf = io.BytesIO()
    options = {"quality": quality, "subsampling": 0} if fmt == "JPEG" else {"optimize": True}
    Image.fromarray(array).save(buf, format=fmt, **options)
    return write_bytes(path, buf.getvalue())


def list_images(folder: str | os.PathLike) -> list[Path]:
    """Image files directly inside ``folder``, sorted by name."""
    folder = Path(folder)
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
