"""Atomic file writes, and readers that check every file a user hands us.

Writers: every writer goes to a temporary file in the destination folder, flushes and fsyncs it,
then ``os.replace``s it over the target (atomic on POSIX), so a crash or a full disk never leaves
a half-written file behind.

Readers (:func:`read_json`, :func:`read_array`, :func:`read_image`, :func:`load_tensors`): a
file that is missing, unreadable, of the wrong kind, holding pickled objects, or crafted to
exhaust the reader (deep nesting, sizes claimed in a header that the file does not hold) is a
one-line :class:`LinearizerError` naming the file and the problem, before anything large is
allocated. Nothing is ever unpickled.

The user cache (:func:`default_cache_dir`) holds downloaded data and unpacked pretrained models.

>>> import numpy as np, tempfile
>>> path = Path(tempfile.mkdtemp()) / "x.npy"
>>> np.save(path, np.array([object()], dtype=object))
>>> try:
...     read_array(path)
... except LinearizerError as e:
...     print(str(e).replace(str(path), "x.npy"))
x.npy holds pickled Python objects (dtype object), which are never loaded
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import struct
import tempfile
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import LinearizerError


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Call ``write(tmp_path)`` then move the temporary file onto ``path``."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
    except OSError as e:
        raise LinearizerError(f"cannot write to {path.parent}: {e.strerror or e}") from None
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files; use the usual mode
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise LinearizerError(f"cannot write {path}: {e.strerror or e}") from None
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    def w(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)

    return atomic_write(path, w)


def write_text(path: str | os.PathLike, text: str) -> Path:
    return write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    return write_text(path, json.dumps(obj, indent=2, sort_keys=False, allow_nan=True) + "\n")


MAX_JSON_BYTES = 64 * 2**20  # configs, run records, sidecars: kilobytes in practice
MAX_JSON_DEPTH = 64
MAX_ARRAY_BYTES = 4 * 2**30  # one array a user passes (noise, images)
MAX_IMAGE_PIXELS = 64 * 2**20
MAX_SAFETENSORS_HEADER = 100 * 2**20


def _read_bytes(path: Path, limit: int, what: str) -> bytes:
    """The bytes of ``path`` (at most ``limit``), with one-line errors for missing/unreadable."""
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise LinearizerError(f"{path} is not a file")
        if size > limit:
            raise LinearizerError(f"{path} is too large for a {what} ({size} bytes > {limit})")
        return path.read_bytes()
    except FileNotFoundError:
        raise LinearizerError(f"missing file: {path}") from None
    except OSError as e:
        raise LinearizerError(f"cannot read {path}: {e.strerror or e}") from None


def file_sha256(path: str | os.PathLike, what: str = "file") -> str:
    """SHA-256 of a file's bytes, read in 1 MiB blocks; a one-line error naming it as ``what``
    when it cannot be read."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except OSError as e:
        raise LinearizerError(f"cannot read {what} {path}: {e.strerror or e}") from None
    return digest.hexdigest()


def _require_file(path: Path) -> None:
    """One-line error unless ``path`` is an existing regular file (missing, or something else)."""
    if not path.is_file():
        raise LinearizerError(
            f"missing file: {path}" if not path.exists() else f"{path} is not a file"
        )


def _json_depth(text: str) -> int:
    """Deepest ``[``/``{`` nesting of JSON text (brackets inside strings are skipped)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def read_json(path: str | os.PathLike, *, expect: type | None = dict) -> Any:
    """Parse a JSON file; by default it must hold an object (``expect=None``: any value).

    >>> read_json("no/such.json")
    Traceback (most recent call last):
    ...
    linearizer.errors.LinearizerError: missing file: no/such.json
    """
    path = Path(path)
    data = _read_bytes(path, MAX_JSON_BYTES, "JSON file")
    try:
        text = data.decode("utf-8")
        if ("[" in text or "{" in text) and _json_depth(text) > MAX_JSON_DEPTH:
            raise LinearizerError(f"{path} nests JSON deeper than {MAX_JSON_DEPTH} levels")
        value = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise LinearizerError(f"corrupt JSON in {path}: {e}") from None
    if expect is not None and not isinstance(value, expect):
        kind = "object" if expect is dict else expect.__name__
        raise LinearizerError(f"{path} must hold a JSON {kind}, not {type(value).__name__}")
    return value


def _npy_header(fh, path: Path, limit: int, available: int) -> tuple:
    """Shape and dtype from a .npy header, refusing objects and sizes the data cannot hold."""
    import numpy as np

    try:
        version = np.lib.format.read_magic(fh)
        start = fh.tell()
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
        else:
            raise ValueError(f"unsupported .npy version {version}")
    except (ValueError, OSError, EOFError, SyntaxError, struct.error) as e:
        raise LinearizerError(f"{path} is not a readable .npy array: {e}") from None
    if dtype.hasobject:
        raise LinearizerError(
            f"{path} holds pickled Python objects (dtype {dtype}), which are never loaded"
        )
    if dtype.kind not in "biuf" or dtype.fields is not None or dtype.subdtype is not None:
        raise LinearizerError(f"{path} holds {dtype} values, not numbers")
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > limit:
        raise LinearizerError(f"{path} claims an array of {nbytes} bytes (over {limit})")
    held = available - (fh.tell() - start) - 8
    if nbytes > held:
        raise LinearizerError(
            f"{path} claims an array {list(shape)} of {nbytes} bytes but holds only {held}"
        )
    return shape, dtype


def read_array(
    path: str | os.PathLike, *, key: str | None = None, max_bytes: int = MAX_ARRAY_BYTES
) -> Any:
    """A numeric numpy array from ``.npy``, or from ``.npz`` (member ``key``, else ``images``,
    else the first). Object arrays are refused (never unpickled), and header sizes are checked
    against the bytes the file holds before anything is allocated."""
    import numpy as np

    path = Path(path)
    try:
        _require_file(path)
        size = path.stat().st_size
        with open(path, "rb") as fh:
            magic = fh.read(6)
            fh.seek(0)
            if magic.startswith(b"PK"):
                return _read_npz_member(path, key, max_bytes)
            _npy_header(fh, path, max_bytes, size)
            fh.seek(0)
            return np.load(fh, allow_pickle=False)
    except LinearizerError:
        raise
    except (ValueError, OSError, EOFError, MemoryError) as e:
        raise LinearizerError(f"cannot read {path} as a numpy array: {e}") from None


def _read_npz_member(path: Path, key: str | None, max_bytes: int) -> Any:
    import numpy as np

    try:
        with zipfile.ZipFile(path) as zf:
            names = [n[:-4] for n in zf.namelist() if n.endswith(".npy")]
            if not names:
                raise LinearizerError(f"{path} holds no arrays")
            name = key if key is not None else ("images" if "images" in names else names[0])
            if name not in names:
                raise LinearizerError(f"{path} has no array {name!r} (it has {names})")
            info = zf.getinfo(name + ".npy")
            if info.file_size > max_bytes:
                raise LinearizerError(f"{path}: array {name!r} claims {info.file_size} bytes")
            with zf.open(info) as fh:
                _npy_header(fh, path, max_bytes, info.file_size)
            with zf.open(info) as fh:
                return np.lib.format.read_array(fh, allow_pickle=False)
    except LinearizerError:
        raise
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError) as e:
        raise LinearizerError(f"cannot read {path} as a .npz archive: {e}") from None


def read_image(path: str | os.PathLike, mode: str | None = None) -> Any:
    """A PIL image fully loaded (``mode``: convert to ``"L"``/``"RGB"``); bad or
    decompression-bomb files are one-line errors."""
    from PIL import Image

    path = Path(path)
    _require_file(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as img:
                if img.width * img.height > MAX_IMAGE_PIXELS:
                    raise LinearizerError(
                        f"{path} claims {img.width}x{img.height} pixels (over {MAX_IMAGE_PIXELS})"
                    )
                img.load()
                return img.convert(mode) if mode else img.copy()
    except LinearizerError:
        raise
    except (
        OSError,
        ValueError,
        SyntaxError,
        EOFError,
        MemoryError,
        struct.error,
        Image.DecompressionBombError,
        Image.DecompressionBombWarning,
    ) as e:
        raise LinearizerError(f"cannot read image {path}: {e}") from None


def save_tensors(path: str | os.PathLike, tensors: dict, metadata: dict[str, str] | None = None):
    """Atomically write a safetensors file (tensors made contiguous and detached)."""
    from safetensors.torch import save_file

    clean = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    return atomic_write(path, lambda tmp: save_file(clean, tmp, metadata=metadata))


def load_tensors(path: str | os.PathLike) -> dict:
    """Read a safetensors file; a missing, corrupt or crafted file is a one-line error.

    The header's claimed length is checked against the file before safetensors parses it.
    """
    from safetensors.torch import load_file

    path = Path(path)
    _require_file(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(8)
        if len(head) < 8:
            raise LinearizerError(f"corrupt safetensors file {path}: {size} bytes, no header")
        (n,) = struct.unpack("<Q", head)
        if n > min(size - 8, MAX_SAFETENSORS_HEADER):
            raise LinearizerError(
                f"corrupt safetensors file {path}: header claims {n} bytes, file holds {size}"
            )
        return load_file(str(path))
    except LinearizerError:
        raise
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
        raise LinearizerError(f"corrupt safetensors file {path}: {e}") from None


def default_cache_dir() -> Path:
    """``$LINEARIZER_DATA``, else ``$XDG_CACHE_HOME/linearizer``, else ``~/.cache/linearizer``."""
    if os.environ.get("LINEARIZER_DATA"):
        return Path(os.environ["LINEARIZER_DATA"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "linearizer"
