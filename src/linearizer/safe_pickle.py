"""Read a ``torch.save`` zip checkpoint without executing anything in it.

A torch checkpoint is a zip holding ``<root>/data.pkl`` (a pickle describing the object tree)
and ``<root>/data/<key>`` (one raw little-endian storage per tensor). ``torch.load`` unpickles
``data.pkl`` with the full power of pickle, which imports and calls whatever the file names.
This reader does not: every global the pickle names resolves to an *inert stub* class, except a
short allow-list of functions implemented here (tensor rebuilding on raw bytes, a few plain
containers, numpy scalars). Calling a stub - the pickle ``REDUCE`` of ``os.system`` in a
malicious file, for instance - raises :class:`LinearizerError` naming the global; nothing from
outside this module is imported or called on the pickle's behalf.

The result is data: :class:`PickledObject` nodes (class name + attributes) and a torch-ordered
state dict of contiguous tensors.

>>> ckpt = read_torch_checkpoint("model.pth")  # doctest: +SKIP
>>> ckpt.root.child("net_gx.g.blocks").modules.keys()  # doctest: +SKIP
dict_keys(['0', '1', '2', '3'])
"""

from __future__ import annotations

import io
import pickle
import re
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .errors import LinearizerError

__all__ = [
    "PickledObject",
    "TorchCheckpoint",
    "read_torch_checkpoint",
    "unpickle_restricted",
    "module_state_dict",
]

# Legacy typed-storage class names torch writes in persistent ids -> element dtype.
_STORAGE_DTYPES: dict[str, torch.dtype] = {
    "FloatStorage": torch.float32,
    "DoubleStorage": torch.float64,
    "HalfStorage": torch.float16,
    "BFloat16Storage": torch.bfloat16,
    "LongStorage": torch.int64,
    "IntStorage": torch.int32,
    "ShortStorage": torch.int16,
    "CharStorage": torch.int8,
    "ByteStorage": torch.uint8,
    "BoolStorage": torch.bool,
}
_NUMPY_CODES = {"f2", "f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "b1", "c8", "c16"}
_KEY_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_MAX_PICKLE_BYTES = 256 * 2**20


# --------------------------------------------------------------------------- inert stand-ins


class _StubMeta(type):
    """Metaclass of the stubs: calling a stub (pickle REDUCE / INST) is refused."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise LinearizerError(
            f"refusing to call {cls._global_name} from the pickle: it is not on the allow-list "
            "(nothing was imported or executed)"
        )


class _Stub(metaclass=_StubMeta):
    """An instance of a class the pickle names; holds only the data the pickle gives it."""

    _global_name = "?"

    def __new__(cls, *args: Any) -> _Stub:  # pickle NEWOBJ: cls.__new__(cls, *args)
        return _inert(cls, _pickle_args=args)

    def __setstate__(self, state: Any) -> None:  # pickle BUILD
        object.__setattr__(self, "_pickle_state", state)

    def __repr__(self) -> str:
        return f"<stub {self._global_name}>"


def _inert(cls: type, **attrs: Any) -> Any:
    """An instance of the stub class ``cls``, made without calling it (a call is refused), with
    no pickle state yet and ``attrs`` set."""
    obj = object.__new__(cls)
    object.__setattr__(obj, "_pickle_state", None)
    for name, value in attrs.items():
        object.__setattr__(obj, name, value)
    return obj


@dataclass(frozen=True)
class _StorageType:
    """What ``torch.FloatStorage`` & co. become: only the element dtype."""

    name: str
    dtype: torch.dtype


@dataclass(frozen=True)
class _StorageRef:
    """A persistent id: which zip entry holds the storage, its dtype and element count."""

    key: str
    dtype: torch.dtype
    numel: int
    location: str


class _TensorRef(_Stub):
    """A tensor described by the pickle, materialised from raw bytes after unpickling."""

    _global_name = "torch._utils._rebuild_tensor_v2"


class _NumpyDType(_Stub):
    """``numpy.dtype(code, align, copy)`` as data; BUILD sets its byte order."""

    _global_name = "numpy.dtype"


# --------------------------------------------------------------------------- allow-listed calls


def _int(value: Any, what: str) -> int:
    if type(value) is not int:
        raise LinearizerError(f"malformed checkpoint: {what} is {type(value).__name__}, not int")
    return value


def _int_tuple(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, tuple) or len(value) > 16:
        raise LinearizerError(f"malformed checkpoint: {what} is not a short tuple")
    return tuple(_int(v, what) for v in value)


def _rebuild_tensor_v2(storage: Any, offset: Any, size: Any, stride: Any, *rest: Any) -> _TensorRef:
    """Check the geometry now; the bytes are read after unpickling (see ``_materialise``)."""
    if not isinstance(storage, _StorageRef):
        raise LinearizerError("malformed checkpoint: tensor without a storage")
    offset = _int(offset, "storage offset")
    size = _int_tuple(size, "tensor size")
    stride = _int_tuple(stride, "tensor stride")
    if len(size) != len(stride) or offset < 0 or min(size + stride, default=0) < 0:
        raise LinearizerError(f"malformed checkpoint: bad tensor geometry {size}/{stride}")
    last = offset + sum((n - 1) * s for n, s in zip(size, stride)) if all(size) else offset - 1
    if last >= storage.numel:
        raise LinearizerError(
            f"malformed checkpoint: tensor {size} with stride {stride} at offset {offset} "
            f"reads past its storage of {storage.numel} elements"
        )
    return _inert(_TensorRef, geometry=(storage, offset, size, stride))


def _rebuild_parameter(data: Any, requires_grad: Any = False, hooks: Any = None, *rest: Any):
    if not isinstance(data, _TensorRef):
        raise LinearizerError("malformed checkpoint: parameter without tensor data")
    return data


def _numpy_dtype(code: Any, align: Any = False, copy: Any = False) -> _NumpyDType:
    if not isinstance(code, str) or code.lstrip("<>=|") not in _NUMPY_CODES:
        raise LinearizerError(f"checkpoint holds an unsupported numpy dtype {code!r}")
    return _inert(_NumpyDType, code=code.lstrip("<>=|"))


def _numpy_scalar(dtype: Any, data: Any = b"") -> int | float | complex | bool:
    """A numpy scalar as the plain Python number it holds."""
    if not isinstance(dtype, _NumpyDType) or not isinstance(data, bytes):
        raise LinearizerError("malformed checkpoint: bad numpy scalar")
    state = dtype._pickle_state
    order = state[1] if isinstance(state, tuple) and len(state) > 1 else "<"
    if order not in ("<", ">", "|", "="):
        raise LinearizerError(f"malformed checkpoint: numpy byte order {order!r}")
    dt = np.dtype(("<" if order in ("|", "=") else order) + dtype.code)
    if len(data) != dt.itemsize:
        raise LinearizerError("malformed checkpoint: numpy scalar of the wrong size")
    return np.frombuffer(data, dtype=dt)[0].item()


def _codecs_encode(obj: Any, encoding: Any = "utf-8") -> bytes:
    # Protocol 2 writes Python 3 bytes as _codecs.encode(<latin-1 text>, 'latin1').
    if not isinstance(obj, str) or encoding not in ("latin1", "latin-1"):
        raise LinearizerError("malformed checkpoint: unsupported _codecs.encode call")
    return obj.encode("latin1")


def _ordered_dict(*args: Any) -> dict:
    if args and not isinstance(args[0], (list, tuple, dict)):
        raise LinearizerError("malformed checkpoint: bad OrderedDict arguments")
    return dict(*args)


def _set(*args: Any) -> set:
    if args and not isinstance(args[0], (list, tuple)):
        raise LinearizerError("malformed checkpoint: bad set arguments")
    return set(*args)


_ALLOWED: dict[tuple[str, str], Any] = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("collections", "OrderedDict"): _ordered_dict,
    ("builtins", "set"): _set,
    ("__builtin__", "set"): _set,
    ("numpy", "dtype"): _numpy_dtype,
    ("numpy._core.multiarray", "scalar"): _numpy_scalar,
    ("numpy.core.multiarray", "scalar"): _numpy_scalar,
    ("_codecs", "encode"): _codecs_encode,
}


class _RestrictedUnpickler(pickle.Unpickler):
    """Resolves globals to allow-listed functions or inert stubs; storages to references."""

    def __init__(self, data: bytes, storages: dict[str, int] | None) -> None:
        super().__init__(io.BytesIO(data))
        self._storages = storages
        self._stubs: dict[str, type] = {}

    def find_class(self, module: str, name: str) -> Any:
        allowed = _ALLOWED.get((module, name))
        if allowed is not None:
            return allowed
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(name, _STORAGE_DTYPES[name])
        full = f"{module}.{name}"
        stub = self._stubs.get(full)
        if stub is None:
            stub = _StubMeta(name, (_Stub,), {"_global_name": full, "__module__": __name__})
            self._stubs[full] = stub
        return stub

    def persistent_load(self, pid: Any) -> _StorageRef:
        if self._storages is None:
            raise LinearizerError("malformed pickle: persistent id outside a torch checkpoint")
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise LinearizerError(f"malformed checkpoint: unsupported persistent id {pid!r:.80}")
        _, stype, key, location, numel = pid
        if not isinstance(stype, _StorageType):
            raise LinearizerError(f"checkpoint uses an unsupported storage type {stype!r:.80}")
        if not isinstance(key, str) or not _KEY_RE.match(key) or key not in self._storages:
            raise LinearizerError(f"checkpoint names a missing storage {key!r:.80}")
        if not isinstance(location, str):
            raise LinearizerError("malformed checkpoint: storage location is not a string")
        numel = _int(numel, "storage size")
        nbytes = self._storages[key]
        if numel < 0 or nbytes != numel * _itemsize(stype.dtype):
            raise LinearizerError(
                f"corrupt checkpoint: storage {key} holds {nbytes} bytes, expected {numel} "
                f"{stype.name} elements"
            )
        return _StorageRef(key, stype.dtype, numel, location)


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def unpickle_restricted(data: bytes, storages: dict[str, int] | None = None) -> Any:
    """Unpickle ``data`` with every global inert (see module docstring); returns raw stubs.

    ``storages`` maps storage keys to their byte sizes (``None``: no persistent ids allowed).
    Any failure - refused call, malformed stream - is a :class:`LinearizerError`.
    """
    try:
        return _RestrictedUnpickler(data, storages).load()
    except LinearizerError:
        raise
    except RecursionError:
        raise LinearizerError("malformed checkpoint: pickle nested too deeply") from None
    except Exception as e:  # noqa: BLE001 - any unpickling failure is a bad file
        raise LinearizerError(f"corrupt checkpoint pickle: {type(e).__name__}: {e}") from None


# --------------------------------------------------------------------------- the result


@dataclass
class PickledObject:
    """One object of the pickled tree: its class name and attributes (no behaviour).

    For torch modules ``attrs`` holds the module ``__dict__`` (plain attributes such as
    ``dim`` or ``clamp`` next to torch's ``_parameters``/``_buffers``/``_modules``).
    """

    type: str
    attrs: dict[str, Any] = field(default_factory=dict)
    args: tuple = ()
    state: Any = None

    @property
    def is_module(self) -> bool:
        return isinstance(self.attrs.get("_modules"), dict)

    @property
    def modules(self) -> dict[str, PickledObject | None]:
        return dict(self.attrs.get("_modules") or {})

    @property
    def parameters(self) -> dict[str, Tensor | None]:
        return dict(self.attrs.get("_parameters") or {})

    @property
    def buffers(self) -> dict[str, Tensor | None]:
        return dict(self.attrs.get("_buffers") or {})

    @property
    def plain_attrs(self) -> dict[str, Any]:
        """Attributes that are not torch bookkeeping (``dim``, ``clamp``, ``skip`` ...)."""
        return {k: v for k, v in self.attrs.items() if not k.startswith("_")}

    def child(self, path: str) -> PickledObject:
        """The sub-module at a dotted path, e.g. ``"net_gx.g.blocks.0"``."""
        node: PickledObject | None = self
        for part in path.split(".") if path else []:
            sub = node.modules.get(part) if isinstance(node, PickledObject) else None
            if sub is None:
                raise LinearizerError(f"checkpoint has no module {path!r} (missing {part!r})")
            node = sub
        return node

    def __repr__(self) -> str:
        return f"PickledObject({self.type}, {len(self.attrs)} attrs)"


@dataclass
class TorchCheckpoint:
    """What :func:`read_torch_checkpoint` returns."""

    root: Any
    state_dict: dict[str, Tensor]
    root_name: str
    storage_locations: set[str]


def module_state_dict(root: Any) -> dict[str, Tensor]:
    """Torch's ``state_dict()`` order for a tree of :class:`PickledObject` modules.

    A module shared under two names (the official ``net_gx``/``net_gy``) appears under both,
    as the same tensor. A root that is already a dict of tensors is returned flattened.
    """
    out: dict[str, Tensor] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, PickledObject) and node.is_module:
            skip = node.attrs.get("_non_persistent_buffers_set") or set()
            for name, t in node.parameters.items():
                if isinstance(t, Tensor):
                    out[prefix + name] = t
            for name, t in node.buffers.items():
                if isinstance(t, Tensor) and name not in skip:
                    out[prefix + name] = t
            for name, sub in node.modules.items():
                if sub is not None:
                    walk(sub, f"{prefix}{name}.")
        elif isinstance(node, dict):
            for name, value in node.items():
                if isinstance(value, Tensor):
                    out[f"{prefix}{name}"] = value
                elif isinstance(value, (dict, PickledObject)):
                    walk(value, f"{prefix}{name}.")

    walk(root, "")
    return out


def _materialise(obj: Any, read_storage, memo: dict[int, Any]) -> Any:
    """Replace stubs by :class:`PickledObject` and tensor refs by tensors, sharing preserved."""
    oid = id(obj)
    if oid in memo:
        return memo[oid]
    if isinstance(obj, _TensorRef):
        storage, offset, size, stride = obj.geometry
        flat = read_storage(storage)
        out: Any = torch.as_strided(flat, size, stride, offset).clone(
            memory_format=torch.contiguous_format
        )
        memo[oid] = out
        return out
    if isinstance(obj, _Stub):
        node = PickledObject(type=obj._global_name)
        memo[oid] = node
        node.args = tuple(_materialise(a, read_storage, memo) for a in obj._pickle_args)
        state = obj._pickle_state
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[0], dict):
            state = {**state[0], **(state[1] or {})}  # (dict, slotstate)
        if isinstance(state, dict):
            node.attrs = {str(k): _materialise(v, read_storage, memo) for k, v in state.items()}
        else:
            node.state = _materialise(state, read_storage, memo)
        return node
    if isinstance(obj, dict):
        out = {}
        memo[oid] = out
        out.update((k, _materialise(v, read_storage, memo)) for k, v in obj.items())
        return out
    if isinstance(obj, list):
        out = []
        memo[oid] = out
        out.extend(_materialise(v, read_storage, memo) for v in obj)
        return out
    if isinstance(obj, tuple):
        out = tuple(_materialise(v, read_storage, memo) for v in obj)
        memo[oid] = out
        return out
    return obj


# --------------------------------------------------------------------------- the zip


def _open_zip(path: Path) -> zipfile.ZipFile:
    if not path.is_file():
        raise LinearizerError(f"missing checkpoint file: {path}")
    try:
        return zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        with open(path, "rb") as fh:
            head = fh.read(2)
        if head[:1] == b"\x80":
            raise LinearizerError(
                f"{path} is a legacy (pre-zip) torch file; only zip checkpoints are supported"
            ) from None
        raise LinearizerError(
            f"{path} is not a torch zip checkpoint (bad or truncated zip)"
        ) from None
    except OSError as e:
        raise LinearizerError(f"cannot read {path}: {e.strerror or e}") from None


def _find_root(zf: zipfile.ZipFile, path: Path) -> str:
    roots = [n[: -len("/data.pkl")] for n in zf.namelist() if n.endswith("/data.pkl")]
    roots = [r for r in roots if r and "/" not in r]
    if len(roots) != 1:
        raise LinearizerError(
            f"{path}: expected exactly one <root>/data.pkl in the zip, found {len(roots)}"
        )
    return roots[0]


def _read_entry(zf: zipfile.ZipFile, name: str, path: Path) -> bytes:
    try:
        return zf.read(name)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, zlib.error) as e:
        raise LinearizerError(f"corrupt checkpoint {path}: entry {name}: {e}") from None


def read_torch_checkpoint(path: str | Path) -> TorchCheckpoint:
    """Read a ``torch.save`` zip file safely (nothing in it is executed).

    Returns the object tree (``PickledObject`` nodes, tensors, plain containers) and the
    state dict in torch's order, every tensor contiguous and on the CPU whatever its saved
    location (``cpu``, ``cuda:N`` ...). Strides and storage offsets in the file are honoured.
    """
    path = Path(path)
    try:
        return _read_torch_checkpoint(path)
    except LinearizerError as e:
        text = str(e)
        raise LinearizerError(text if str(path) in text else f"{path}: {text}") from None
    except RecursionError:
        raise LinearizerError(f"{path}: the pickle nests objects too deeply") from None


_MAX_STORAGE_BYTES = 64 * 2**30
_MAX_COMPRESSION = 1000  # torch stores entries uncompressed; a zip bomb claims far more


def _check_entry_sizes(zf: zipfile.ZipFile, path: Path) -> None:
    """Refuse sizes an entry claims but could not hold, before anything is decompressed."""
    total = 0
    for info in zf.infolist():
        total += info.file_size
        stored = info.compress_type == zipfile.ZIP_STORED
        if not stored and info.file_size > _MAX_COMPRESSION * max(info.compress_size, 1):
            raise LinearizerError(
                f"{path}: entry {info.filename} claims {info.file_size} bytes from "
                f"{info.compress_size} compressed (a zip bomb?)"
            )
    if total > _MAX_STORAGE_BYTES:
        raise LinearizerError(f"{path}: entries claim {total} bytes in all (over the limit)")


def _read_torch_checkpoint(path: Path) -> TorchCheckpoint:
    with _open_zip(path) as zf:
        _check_entry_sizes(zf, path)
        root_name = _find_root(zf, path)
        prefix = f"{root_name}/data/"
        infos = {i.filename: i for i in zf.infolist()}
        storages = {n[len(prefix) :]: i.file_size for n, i in infos.items() if n.startswith(prefix)}
        pkl_info = infos[f"{root_name}/data.pkl"]
        if pkl_info.file_size > _MAX_PICKLE_BYTES:
            raise LinearizerError(f"{path}: data.pkl is implausibly large")
        byteorder = "little"
        if f"{root_name}/byteorder" in infos:
            byteorder = _read_entry(zf, f"{root_name}/byteorder", path).decode("ascii", "replace")
            if byteorder not in ("little", "big"):
                raise LinearizerError(f"{path}: unknown byte order {byteorder!r}")
        raw = unpickle_restricted(_read_entry(zf, f"{root_name}/data.pkl", path), storages)

        cache: dict[str, Tensor] = {}
        locations: set[str] = set()

        def read_storage(ref: _StorageRef) -> Tensor:
            locations.add(ref.location)
            if ref.key not in cache:
                data = _read_entry(zf, prefix + ref.key, path)
                cache[ref.key] = _bytes_to_tensor(data, ref.dtype, byteorder)
            return cache[ref.key]

        root = _materialise(raw, read_storage, {})
    return TorchCheckpoint(root, module_state_dict(root), root_name, locations)


def _bytes_to_tensor(data: bytes, dtype: torch.dtype, byteorder: str) -> Tensor:
    if not data:
        return torch.empty(0, dtype=dtype)
    flat = torch.frombuffer(bytearray(data), dtype=dtype)
    if byteorder == "big" and flat.element_size() > 1:
        # Reverse the bytes of every element: view as uint8 rows and flip them.
        u8 = flat.view(torch.uint8).view(-1, flat.element_size()).flip(1).contiguous()
        flat = u8.view(-1).view(dtype)
    return flat
