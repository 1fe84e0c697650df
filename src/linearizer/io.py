"""Atomic file writes: a crash or a full disk never leaves a half-written file behind.

Every writer goes to a temporary file in the destination folder, flushes and fsyncs it, then
``os.replace``s it over the target (atomic on POSIX).
"""

from __future__ import annotations

import json
import os
import tempfile
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
    except OSError as e:
        _remove_quietly(tmp)
        raise LinearizerError(f"cannot write {path}: {e.strerror or e}") from None
    except BaseException:
        _remove_quietly(tmp)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _remove_quietly(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    def w(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)

    return atomic_write(path, w)


def write_text(path: str | os.PathLike, text: str) -> Path:
    return write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    return write_text(path, json.dumps(obj, indent=2, sort_keys=False, allow_nan=True) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LinearizerError(f"missing file: {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise LinearizerError(f"corrupt JSON in {path}: {e}") from None


def save_tensors(path: str | os.PathLike, tensors: dict, metadata: dict[str, str] | None = None):
    """Atomically write a safetensors file (tensors made contiguous and detached)."""
    from safetensors.torch import save_file

    clean = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    return atomic_write(path, lambda tmp: save_file(clean, tmp, metadata=metadata))


def load_tensors(path: str | os.PathLike) -> dict:
    """Read a safetensors file; a missing or corrupt file is a one-line LinearizerError."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise LinearizerError(f"missing file: {path}")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise LinearizerError(f"corrupt safetensors file {path}: {e}") from None
