"""The one-step matrices B kept on disk, so a new process does not build them again.

Building B (:func:`linearizer.flow.factored.one_step`) takes seconds per sampler spec, and a
class-conditional model needs one B per class and guidance. :func:`cached` stores each B under a
key that names everything B depends on (a :func:`weights_digest` of the weights, the spec's
fields, the form, the class and guidance) plus :data:`FORMAT_VERSION` and the library version.

A file is ``FOLDER/<sha256 of the canonical key>.safetensors`` (never a pickle) with the
canonical key and the tensors' sha256 in its metadata, both checked on every load: a file of
another key (a hash collision), a corrupt or a truncated one is ignored with one warning line
and B is built again. Files are
written to a temporary name and moved into place (:func:`linearizer.io.atomic_write`), so two
processes never read a half-written B; two that build the same B at once both write it, and the
last complete file wins. A folder that cannot be written costs one warning line and B is built
in memory as before.

The folder (:func:`cache_folder`) is ``$LINEARIZER_CACHE`` (``off`` or ``0``: no disk cache),
else ``one-step`` inside the user cache of downloads and pretrained models
(:func:`linearizer.io.default_cache_dir`). It holds at most ``$LINEARIZER_CACHE_MB`` megabytes
(default :data:`MAX_MB`): each store removes the least recently used files beyond that. A
training run's grids build no B (they run the multi-step solver), so weights that change as
they train never fill the folder. Bump :data:`FORMAT_VERSION` whenever the way B is built
changes, so stored B's of the former algorithm are never read.

>>> import tempfile, torch
>>> folder = Path(tempfile.mkdtemp())
>>> key = {"weights": weights_digest(torch.nn.Linear(2, 2)), "steps": 100}
>>> b = cached(key, lambda: torch.eye(3, dtype=torch.float64), folder=folder)
>>> again = cached(key, lambda: torch.zeros(3, 3), folder=folder)  # read back, not built
>>> bool(torch.equal(b, again)), len(list(folder.glob("*.safetensors")))
(True, 1)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
from torch import Tensor, nn

from .. import __version__
from ..errors import LinearizerError
from ..io import default_cache_dir, load_tensors, save_tensors
from .factored import FactoredMatrix

FORMAT_VERSION = 2  # 2: A's factors evaluated 16 times at once (was 256)
ENV = "LINEARIZER_CACHE"
OFF = ("off", "0")
SIZE_ENV = "LINEARIZER_CACHE_MB"
MAX_MB = 2048  # about 400 dense float64 B's of MNIST (4.9 MB each)
Stored = Tensor | FactoredMatrix

_unwritable: set[Path] = set()  # folders already warned about: one line per folder and process


def weights_digest(*parts: nn.Module | Tensor) -> str:
    """sha256 hex of every parameter and buffer of ``parts`` (modules, or bare tensors such as a
    calibration's), by name, dtype, shape and bytes in a fixed order, read on the CPU: equal
    exactly when the weights are bit-identical.

    >>> import torch
    >>> net = torch.nn.Linear(2, 2)
    >>> weights_digest(net) == weights_digest(net), len(weights_digest(net))
    (True, 64)
    """
    h = hashlib.sha256()
    for i, part in enumerate(parts):
        named = [("", part)] if isinstance(part, Tensor) else _named_tensors(part)
        for name, t in named:
            t = t.detach().cpu().contiguous()
            head = json.dumps([i, name, str(t.dtype), list(t.shape)]).encode()
            h.update(struct.pack("<Q", len(head)) + head)
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _named_tensors(module: nn.Module) -> list[tuple[str, Tensor]]:
    params = [(f"p:{n}", p) for n, p in module.named_parameters()]
    buffers = [(f"b:{n}", b) for n, b in module.named_buffers()]
    return sorted(params + buffers, key=lambda item: item[0])


def cache_folder() -> Path | None:
    """Where B's are stored: ``$LINEARIZER_CACHE`` (``off`` or ``0``: None, no disk cache), else
    ``one-step`` in the user cache (``$LINEARIZER_DATA``, ``$XDG_CACHE_HOME/linearizer`` or
    ``~/.cache/linearizer``)."""
    env = os.environ.get(ENV, "").strip()
    if env.lower() in OFF:
        return None
    if env:
        return Path(env).expanduser()
    return default_cache_dir() / "one-step"


def canonical_key(key: Mapping[str, object]) -> str:
    """The key with the cache format and library version, as sorted compact JSON."""
    full = {**key, "cache_format": FORMAT_VERSION, "library": __version__}
    try:
        return json.dumps(full, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise LinearizerError(f"a one-step cache key must be plain JSON: {e}") from None


def _file_name(canonical: str) -> str:
    return hashlib.sha256(canonical.encode()).hexdigest()


def cached(
    key: Mapping[str, object],
    build: Callable[[], Stored],
    *,
    folder: Path | None = None,
    device: torch.device | str = "cpu",
) -> Stored:
    """``build()``, or the copy stored under ``key`` in ``folder`` (default :func:`cache_folder`;
    with caching off, ``build()`` alone). A stored copy is read onto ``device``: a caller whose
    B is built on another device than the CPU names it there and in ``key`` (B's rounding
    depends on where it was built)."""
    folder = cache_folder() if folder is None else Path(folder)
    if folder is None:
        return build()
    canonical = canonical_key(key)
    path = folder / f"{_file_name(canonical)}.safetensors"
    if _is_file(path):
        try:
            value = _load(path, canonical, torch.device(device))
            _touch(path)
            return value
        except LinearizerError as e:
            warnings.warn(f"rebuilding the one-step matrix: {e}", stacklevel=2)
    value = build()
    _store(path, canonical, value)
    prune(folder)
    return value


def has(key: Mapping[str, object], *, folder: Path | None = None) -> bool:
    """Whether ``folder`` (default :func:`cache_folder`) holds a file for ``key``; the file is
    checked when :func:`cached` reads it."""
    folder = cache_folder() if folder is None else Path(folder)
    if folder is None:
        return False
    return _is_file(folder / f"{_file_name(canonical_key(key))}.safetensors")


def max_bytes() -> int:
    """The folder's size limit: ``$LINEARIZER_CACHE_MB`` megabytes, else :data:`MAX_MB`."""
    raw = os.environ.get(SIZE_ENV, "").strip()
    try:
        mb = float(raw) if raw else MAX_MB
    except ValueError:
        raise LinearizerError(f"{SIZE_ENV} must be a number of megabytes, got {raw!r}") from None
    return int(max(mb, 0.0) * 2**20)


def prune(folder: Path, limit: int | None = None) -> list[Path]:
    """Remove the least recently used B files of ``folder`` until it holds at most ``limit``
    bytes (default :func:`max_bytes`); the removed paths. The newest file always stays."""
    limit = max_bytes() if limit is None else limit
    files = []
    for path in folder.glob("*.safetensors"):
        try:
            st = path.stat()
        except OSError:  # removed by another process meanwhile
            continue
        files.append((st.st_mtime, st.st_size, path))
    files.sort(reverse=True)  # newest first
    total, removed = 0, []
    for i, (_, size, path) in enumerate(files):
        total += size
        if total > limit and i > 0:
            with contextlib.suppress(OSError):
                path.unlink()
                removed.append(path)
    return removed


def _touch(path: Path) -> None:
    """Mark a file as just used (its modification time orders the pruning)."""
    with contextlib.suppress(OSError):
        os.utime(path)


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # an unreadable folder holds nothing we can use
        return False


def _load(path: Path, canonical: str, device: torch.device) -> Stored:
    from safetensors import safe_open

    tensors = load_tensors(path)  # a corrupt or truncated file is one LinearizerError
    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = fh.metadata() or {}
    except Exception as e:  # noqa: BLE001 - replaced or damaged since it was read
        raise LinearizerError(f"cannot read the metadata of {path}: {e}") from None
    if meta.get("key") != canonical:
        raise LinearizerError(f"{path} holds another key")
    if meta.get("sha256") != _content_digest(tensors):
        raise LinearizerError(f"{path} is corrupt (its tensors do not match their checksum)")
    form = meta.get("form")
    if form == "dense" and set(tensors) == {"b"}:
        return tensors["b"].to(device)
    if form == "factored" and set(tensors) == {"c", "u", "v"}:
        u, v = tensors["u"].to(device), tensors["v"].to(device)
        try:
            return FactoredMatrix(float(tensors["c"]), u, v)
        except LinearizerError as e:
            raise LinearizerError(f"{path}: {e}") from None
    raise LinearizerError(f"{path} holds no one-step matrix")


def _content_digest(tensors: Mapping[str, Tensor]) -> str:
    """Catches bytes changed on disk that still parse as safetensors."""
    return weights_digest(*(tensors[name] for name in sorted(tensors)))


def _store(path: Path, canonical: str, value: Stored) -> None:
    if isinstance(value, FactoredMatrix):
        c = torch.tensor(value.c, dtype=torch.float64)  # c exactly, as the float it is
        tensors, form = {"c": c, "u": value.u, "v": value.v}, "factored"
    else:
        tensors, form = {"b": value}, "dense"
    try:
        meta = {"key": canonical, "form": form, "sha256": _content_digest(tensors)}
        save_tensors(path, tensors, metadata=meta)
    except LinearizerError as e:
        if path.parent not in _unwritable:
            _unwritable.add(path.parent)
            warnings.warn(f"one-step matrices are not cached: {e}", stacklevel=3)
