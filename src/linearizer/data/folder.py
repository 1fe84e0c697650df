"""Image folders as datasets: any tree of PNG/JPEG files, and CelebA's own layout.

Every image is resized so its shorter side is ``img_size`` and then centre-cropped to
``img_size x img_size`` (torchvision's ``Resize(s)`` + ``CenterCrop(s)``, the authors' CelebA
transform: 178 x 218 -> 64 x 78 -> rows 7..70), in RGB or grey. Decoding a large folder is
slow, so the result is cached as one uint8 array next to a manifest of every file's SHA-256:
the cache's name is derived from the manifest and the settings, so any added, removed or changed
file, or another size or colour mode, builds a new cache instead of using a stale one.

* ``folder``: all ``*.png``, ``*.jpg``, ``*.jpeg`` below the folder, in sorted path order.
  Labels are the index of each file's top-level subfolder (sorted; 0 for files at the top).
  Splits: a file is in ``test`` when the first hex digits of its path's SHA-256 are 0 mod 10
  (about 10 %, stable when files are added); ``train`` is the rest; ``all`` is every file.
  A folder whose split would be empty uses every file for both splits.
* ``celeba``: ``ROOT/img_align_celeba/*.jpg`` with ``ROOT/list_eval_partition.txt``
  (``name split`` lines; 0 train, 1 valid, 2 test). Labels are 0.

Images of different sizes are an error unless ``mixed_sizes`` is set: in a dataset they are
usually a stray file, and each would be cropped differently.

>>> import tempfile, numpy as np
>>> from PIL import Image
>>> root = Path(tempfile.mkdtemp())
>>> for i in range(3):
...     Image.fromarray(np.full((20, 30, 3), 40 * i, np.uint8)).save(root / f"{i}.png")
>>> images, labels = load_folder(root, "all", img_size=8, cache_dir=root / "cache")
>>> tuple(images.shape), labels.tolist()
((3, 3, 8, 8), [0, 0, 0])
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from ..errors import LinearizerError
from ..io import file_sha256, write_bytes
from .mnist import default_cache_dir

SUFFIXES = (".png", ".jpg", ".jpeg")
SPLITS = ("train", "test", "all")
CELEBA_SPLITS = {"train": "0", "valid": "1", "test": "2"}
MODES = {1: "L", 3: "RGB"}
CACHE_VERSION = 1


@dataclass(frozen=True)
class Entry:
    """One image file: its path relative to the root, its label and its split tag."""

    rel: str
    label: int
    split: str


def scan_folder(root: Path) -> list[Entry]:
    """Every PNG/JPEG below ``root`` (sorted), labelled by top-level subfolder."""
    if not root.is_dir():
        raise LinearizerError(f"no such image folder: {root}")
    files = sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.suffix.lower() in SUFFIXES and p.is_file() and not _hidden(p.relative_to(root))
    )
    if not files:
        raise LinearizerError(f"{root}: no PNG or JPEG images in this folder or below it")
    classes = sorted({f.split("/")[0] for f in files if "/" in f})
    index = {c: i for i, c in enumerate(classes)}
    out = []
    for f in files:
        digest = hashlib.sha256(f.encode()).hexdigest()
        split = "test" if int(digest[:8], 16) % 10 == 0 else "train"
        out.append(Entry(f, index.get(f.split("/")[0], 0) if "/" in f else 0, split))
    return out


def _hidden(rel: Path) -> bool:
    # Skips .DS_Store-style files and our own cache when it lives inside the folder.
    return any(part.startswith(".") for part in rel.parts)


def scan_celeba(root: Path) -> list[Entry]:
    """CelebA's aligned images and their official partition."""
    images, parts = root / "img_align_celeba", root / "list_eval_partition.txt"
    for need in (images, parts):
        if not need.exists():
            raise LinearizerError(
                f"{root} is not a CelebA folder: {need.name} is missing "
                "(need img_align_celeba/ and list_eval_partition.txt)"
            )
    tag = {v: k for k, v in CELEBA_SPLITS.items()}
    out = []
    for n, line in enumerate(parts.read_text().splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 2 or fields[1] not in tag:
            raise LinearizerError(f"{parts}: line {n} is not '<file> <0|1|2>': {line!r}")
        out.append(Entry(f"img_align_celeba/{fields[0]}", 0, tag[fields[1]]))
    if not out:
        raise LinearizerError(f"{parts} lists no images")
    return out


def select(entries: list[Entry], split: str, celeba: bool) -> list[Entry]:
    if celeba:
        if split == "all":
            return entries
        if split not in CELEBA_SPLITS:
            raise LinearizerError(f"CelebA split must be one of {[*CELEBA_SPLITS, 'all']}")
        return [e for e in entries if e.split == split]
    if split not in SPLITS:
        raise LinearizerError(f"folder split must be one of {SPLITS}, got {split!r}")
    chosen = [e for e in entries if split == "all" or e.split == split]
    if not chosen or len(chosen) == len(entries):
        return entries  # too few files to hold one out: both splits are the whole folder
    return chosen


def resize_crop_shorter(img: Image.Image, shorter: int) -> Image.Image:
    """Resize so the shorter side is ``shorter`` pixels (bilinear, antialiased; aspect kept)."""
    w, h = img.size
    size = (shorter, int(shorter * h / w)) if w <= h else (int(shorter * w / h), shorter)
    return img if size == (w, h) else img.resize(size, Image.Resampling.BILINEAR)


def resize_crop(img: Image.Image, size: int) -> Image.Image:
    """Shorter side to ``size`` (:func:`resize_crop_shorter`), then the centre ``size x size``."""
    img = resize_crop_shorter(img, size)
    nw, nh = img.size
    top, left = int(round((nh - size) / 2.0)), int(round((nw - size) / 2.0))
    return img.crop((left, top, left + size, top + size))


def decode(path: Path, size: int, channels: int) -> tuple[np.ndarray, tuple[int, int]]:
    """One image as uint8 ``[channels, size, size]`` and its original (width, height)."""
    try:
        with Image.open(path) as img:
            img.load()
            original = img.size
            if img.mode in ("P", "LA", "RGBA", "PA") and channels == 3:
                img = img.convert("RGBA").convert("RGB")  # palette/alpha: drop transparency
            arr = np.asarray(resize_crop(img.convert(MODES[channels]), size), dtype=np.uint8)
    except (OSError, UnidentifiedImageError, ValueError, Image.DecompressionBombError) as e:
        raise LinearizerError(f"cannot read image {path}: {e}") from None
    return (arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)), original


def build_array(
    root: Path, entries: list[Entry], size: int, channels: int, mixed_sizes: bool
) -> np.ndarray:
    """Decode every entry (in threads: Pillow releases the GIL while decoding); the first
    unreadable file, or the first whose size differs from the first file's, is the error."""
    out = np.empty((len(entries), channels, size, size), dtype=np.uint8)

    def one(i: int) -> tuple[int, int]:
        out[i], original = decode(root / entries[i].rel, size, channels)
        return original

    workers = min(8, os.cpu_count() or 1, max(1, len(entries) // 64))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        originals = list(pool.map(one, range(len(entries))))  # re-raises in file order
    for e, original in zip(entries, originals):
        if original != originals[0] and not mixed_sizes:
            (w0, h0), (w1, h1) = originals[0], original
            raise LinearizerError(
                f"{root}: images of mixed sizes ({w0}x{h0} {entries[0].rel}, {w1}x{h1} {e.rel}); "
                "set data.mixed_sizes=true to crop each on its own"
            )
    return out


def _cache_path(
    cache_dir: Path, kind: str, manifest: list, size: int, channels: int, mixed: bool
) -> Path:
    key = json.dumps([CACHE_VERSION, kind, size, channels, mixed, manifest]).encode()
    return cache_dir / f"{kind}-{hashlib.sha256(key).hexdigest()[:20]}.npz"


def load_folder(
    root: str | os.PathLike,
    split: str = "train",
    img_size: int = 32,
    channels: int = 3,
    *,
    layout: str = "folder",
    mixed_sizes: bool = False,
    cache_dir: str | os.PathLike | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Float32 images ``[N, channels, img_size, img_size]`` in [0, 1] and int64 labels.

    ``layout``: ``"folder"`` (any tree) or ``"celeba"``. ``cache_dir`` defaults to the dataset
    cache (``$LINEARIZER_DATA`` etc., see :mod:`linearizer.data.mnist`).
    """
    if channels not in MODES:
        raise LinearizerError(f"channels must be 1 (grey) or 3 (RGB), got {channels!r}")
    if not isinstance(img_size, int) or img_size < 1:
        raise LinearizerError(f"img_size must be a positive integer, got {img_size!r}")
    root = Path(root).expanduser()
    if layout not in ("folder", "celeba"):
        raise LinearizerError(f"unknown folder layout {layout!r}; 'folder' or 'celeba'")
    celeba = layout == "celeba"
    entries = scan_celeba(root) if celeba else scan_folder(root)
    chosen = select(entries, split, celeba)
    manifest = [[e.rel, file_sha256(root / e.rel, "image"), e.label] for e in chosen]
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir() / "folders"
    path = _cache_path(cache, layout, manifest, img_size, channels, mixed_sizes)
    array = _read_cache(path, len(chosen), channels, img_size)
    if array is None:
        array = build_array(root, chosen, img_size, channels, mixed_sizes)
        _write_cache(path, array, manifest, root)
    labels = torch.tensor([e.label for e in chosen], dtype=torch.int64)
    return torch.from_numpy(array).to(torch.float32).div_(255.0), labels


def _read_cache(path: Path, n: int, channels: int, size: int) -> np.ndarray | None:
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            array = z["images"]
    except (OSError, ValueError, KeyError):
        return None  # unreadable cache: rebuild it
    if array.dtype != np.uint8 or array.shape != (n, channels, size, size):
        return None
    return array


def _write_cache(path: Path, array: np.ndarray, manifest: list, root: Path) -> None:
    buf = io.BytesIO()
    files = np.array([m[0] for m in manifest])
    sha = np.array([m[1] for m in manifest])
    np.savez(buf, images=array, files=files, sha256=sha, root=np.array(str(root)))
    try:
        write_bytes(path, buf.getvalue())
    except LinearizerError:
        pass  # a read-only cache folder costs time on the next load, nothing else


def parse_dataset(name: str) -> tuple[str, str | None]:
    """``"folder:PATH"`` -> ``("folder", PATH)``; ``"celeba:PATH"`` likewise; else (name, None)."""
    kind, sep, path = name.partition(":")
    if sep and kind in ("folder", "celeba"):
        if not path:
            raise LinearizerError(f"dataset {name!r} names no folder (use {kind}:PATH)")
        return kind, path
    return name, None
