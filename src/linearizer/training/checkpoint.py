"""Training checkpoints: safetensors + JSON, written atomically, verified on load, never pickled.

A checkpoint of step ``s`` is the pair ``RUN/checkpoints/ckpt_{s:08d}.safetensors`` (every
tensor) and ``ckpt_{s:08d}.json`` (everything else). The tensors file is written first, then
the JSON, which records the tensors file's size and SHA-256; a checkpoint *counts* only when
both exist and agree, so a crash at any instant leaves the previous checkpoint usable.

Tensor keys: ``model.<name>``, ``ema.<name>``, ``optim.<param index>.<state key>`` (Adam's
``exp_avg``, ``exp_avg_sq``, ``step``), ``rng.torch_cpu``, ``rng.cuda.<i>``, ``rng.numpy``,
``rng.python``, ``extra.<name>``. The JSON holds the optimizer's ``param_groups``, the model kind,
the library version, the resolved config and a signature (hash of the model's state-entry names
and shapes) that refuses a checkpoint of another architecture in one line.

>>> import tempfile, torch
>>> run = tempfile.mkdtemp()
>>> net = torch.nn.Linear(3, 2)
>>> opt = torch.optim.Adam(net.parameters())
>>> path = save_checkpoint(run, 5, net, optimizer=opt, model_kind="demo")
>>> ckpt = load_checkpoint(latest_checkpoint(run), torch.nn.Linear(3, 2), model_kind="demo")
>>> ckpt.step, path.name
(5, 'ckpt_00000005.safetensors')
"""

from __future__ import annotations

import hashlib
import random
import re
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from .. import __version__
from ..errors import LinearizerError
from ..io import read_json, write_bytes, write_json

FORMAT = "linearizer-checkpoint"
FORMAT_VERSION = 1
_NAME = re.compile(r"^ckpt_(\d{8,})\.(safetensors|json)$")


@dataclass
class Checkpoint:
    """A loaded (or verified) checkpoint: its tensors path, step and JSON metadata."""

    path: Path
    step: int
    meta: dict[str, Any] = field(repr=False)
    # Which weights a load put into the model: "ema" (the averaged ones) or "model" (raw).
    section: str = "model"

    @property
    def config(self) -> dict[str, Any] | None:
        return self.meta.get("config")

    @property
    def extra(self) -> dict[str, Any]:
        return self.meta.get("extra") or {}


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def checkpoint_path(run_dir: str | Path, step: int) -> Path:
    return checkpoint_dir(run_dir) / f"ckpt_{step:08d}.safetensors"


def sidecar(path: str | Path) -> Path:
    """The JSON beside a checkpoint's tensors file (either name may be passed)."""
    return Path(path).with_suffix(".json")


def model_signature(model: nn.Module) -> str:
    """Hash of the model's state-entry names and shapes: equal iff checkpoints are swappable."""
    lines = [f"{k}:{tuple(v.shape)}" for k, v in sorted(model.state_dict().items())]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def shape_table(model: nn.Module) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def model_identity(model: nn.Module) -> dict[str, Any]:
    """The signature and shape table that checkpoints and model folders record."""
    shapes = {k: list(v) for k, v in shape_table(model).items()}
    return {"model_signature": model_signature(model), "model_shapes": shapes}


def _first_difference(expected: dict[str, tuple], found: dict[str, tuple]) -> str:
    for name in sorted(set(expected) | set(found)):
        if name not in found:
            return f"the checkpoint lacks '{name}'"
        if name not in expected:
            return f"the checkpoint has an unexpected '{name}'"
        if expected[name] != found[name]:
            return f"'{name}' is {found[name]} there, {expected[name]} here"
    return "entry names and shapes agree"


def dedupe(state: dict[str, Tensor]) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Split a state dict into unique tensors and ``{alias: canonical name}``.

    A network shared as g_x and g_y appears twice in ``state_dict()`` with the same storage,
    which safetensors refuses; the copy is stored once and restored under both names.
    """
    unique: dict[str, Tensor] = {}
    aliases: dict[str, str] = {}
    exact: dict[tuple, str] = {}
    storages: set[int] = set()
    for name, t in state.items():
        t = t.detach()
        if t.numel() == 0:
            unique[name] = t.clone()
            continue
        ptr = t.untyped_storage().data_ptr()
        key = (ptr, t.storage_offset(), tuple(t.shape), t.stride(), t.dtype, t.device)
        if key in exact:
            aliases[name] = exact[key]
            continue
        exact[key] = name
        # A partial view of an already stored tensor must become its own copy.
        unique[name] = t.clone() if ptr in storages else t
        storages.add(ptr)
    return unique, aliases


def _prefixed(prefix: str, tensors: dict[str, Tensor]) -> dict[str, Tensor]:
    return {f"{prefix}{k}": v for k, v in tensors.items()}


def _section(tensors: dict[str, Tensor], prefix: str) -> dict[str, Tensor]:
    return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}


def _optimizer_pack(optimizer: torch.optim.Optimizer) -> tuple[dict[str, Tensor], dict]:
    sd = optimizer.state_dict()
    tensors: dict[str, Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, entry in sd["state"].items():
        for key, value in entry.items():
            if isinstance(value, Tensor):
                tensors[f"{index}.{key}"] = value
            elif isinstance(value, (bool, int, float)) or value is None:
                scalars.setdefault(str(index), {})[key] = value
            else:
                raise LinearizerError(
                    f"optimizer state {key!r} of type {type(value).__name__} is not storable"
                )
    groups = [{k: _json_value(v) for k, v in group.items()} for group in sd["param_groups"]]
    meta = {"class": type(optimizer).__name__, "param_groups": groups, "scalars": scalars}
    return tensors, meta


def _json_value(value: Any) -> Any:
    """A param group's value as JSON holds it (tensors and tuples as lists)."""
    if isinstance(value, Tensor):
        return value.tolist()
    return list(value) if isinstance(value, tuple) else value


def _optimizer_unpack(
    optimizer: torch.optim.Optimizer, tensors: dict[str, Tensor], meta: dict
) -> None:
    if meta.get("class") != type(optimizer).__name__:
        raise LinearizerError(
            f"checkpoint optimizer is {meta.get('class')}, this run uses {type(optimizer).__name__}"
        )
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        index, name = key.split(".", 1)
        state.setdefault(int(index), {})[name] = value
    for index, values in meta.get("scalars", {}).items():
        state.setdefault(int(index), {}).update(values)
    groups = [
        {**g, "betas": tuple(g["betas"])} if isinstance(g.get("betas"), list) else dict(g)
        for g in meta["param_groups"]
    ]
    try:
        optimizer.load_state_dict({"state": state, "param_groups": groups})
    except (ValueError, KeyError, RuntimeError) as e:
        raise LinearizerError(f"optimizer state does not fit this model: {e}") from None


def capture_rng() -> tuple[dict[str, Tensor], dict]:
    """Global RNG states (torch CPU and CUDA, numpy, Python) as tensors + JSON."""
    tensors = {"torch_cpu": torch.get_rng_state()}
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    states = torch.cuda.get_rng_state_all() if cuda else []
    tensors.update({f"cuda.{i}": s for i, s in enumerate(states)})
    name, keys, pos, has_gauss, cached = np.random.get_state()
    tensors["numpy"] = torch.from_numpy(np.asarray(keys, dtype=np.int64))
    version, words, gauss_next = random.getstate()
    tensors["python"] = torch.tensor(words, dtype=torch.int64)
    meta = {
        "numpy": [name, int(pos), int(has_gauss), float(cached)],
        "python": [version, gauss_next],
        "cuda_devices": len(states),
    }
    return tensors, meta


def restore_rng(tensors: dict[str, Tensor], meta: dict) -> None:
    torch.set_rng_state(tensors["torch_cpu"].to(torch.uint8))
    n_cuda = int(meta.get("cuda_devices", 0))
    if n_cuda and torch.cuda.is_available() and torch.cuda.device_count() == n_cuda:
        torch.cuda.set_rng_state_all([tensors[f"cuda.{i}"] for i in range(n_cuda)])
    name, pos, has_gauss, cached = meta["numpy"]
    keys = tensors["numpy"].numpy().astype(np.uint32)
    np.random.set_state((name, keys, int(pos), int(has_gauss), float(cached)))
    version, gauss_next = meta["python"]
    random.setstate((version, tuple(int(w) for w in tensors["python"].tolist()), gauss_next))


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    model: nn.Module,
    *,
    optimizer: torch.optim.Optimizer | None = None,
    ema: Any = None,
    config: dict[str, Any] | None = None,
    model_kind: str = "",
    extra: dict[str, Any] | None = None,
    extra_tensors: dict[str, Tensor] | None = None,
    keep_last: int | None = 3,
) -> Path:
    """Write the checkpoint of ``step`` (tensors, then JSON) and prune to ``keep_last``.

    ``ema`` is an :class:`~linearizer.training.ema.EMA` (anything with ``state_dict()``
    returning ``{"shadow": tensors, ...scalars}``). ``extra`` is JSON the task wants back.
    """
    from safetensors.torch import save as to_bytes

    model_tensors, aliases = dedupe(model.state_dict())
    tensors = _prefixed("model.", model_tensors)
    meta: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "step": int(step),
        "model_kind": model_kind,
        "library_version": __version__,
        "torch_version": torch.__version__,
        **model_identity(model),
        "model_aliases": aliases,
        "config": config,
        "extra": extra or {},
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if optimizer is not None:
        opt_tensors, meta["optimizer"] = _optimizer_pack(optimizer)
        tensors.update(_prefixed("optim.", opt_tensors))
    if ema is not None:
        ema_state = dict(ema.state_dict())
        tensors.update(_prefixed("ema.", ema_state.pop("shadow")))
        meta["ema"] = ema_state
    rng_tensors, meta["rng"] = capture_rng()
    tensors.update(_prefixed("rng.", rng_tensors))
    tensors.update(_prefixed("extra.", extra_tensors or {}))

    clean = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    blob = to_bytes(clean, metadata={"format": "pt", "step": str(int(step))})
    path = checkpoint_path(run_dir, step)
    write_bytes(path, blob)
    meta["tensors"] = {
        "file": path.name,
        "bytes": len(blob),
        "sha256": hashlib.sha256(blob).hexdigest(),
    }
    write_json(sidecar(path), meta)
    if keep_last:
        prune(run_dir, keep_last)
    return path


def _steps_on_disk(run_dir: str | Path) -> dict[int, set[str]]:
    folder = checkpoint_dir(run_dir)
    found: dict[int, set[str]] = {}
    if not folder.is_dir():
        return found
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.setdefault(int(match.group(1)), set()).add(match.group(2))
    return found


def prune(run_dir: str | Path, keep_last: int) -> None:
    """Delete all but the newest ``keep_last`` committed checkpoints (JSON first, then tensors)."""
    on_disk = _steps_on_disk(run_dir)
    committed = sorted(s for s, kinds in on_disk.items() if kinds == {"json", "safetensors"})
    keep = set(committed[-keep_last:])
    if not keep:
        return
    newest = max(keep)
    for step in sorted(s for s in on_disk if s < newest and s not in keep):
        path = checkpoint_path(run_dir, step)
        for victim in (sidecar(path), path):
            try:
                victim.unlink(missing_ok=True)
            except OSError as e:
                warnings.warn(f"could not delete old checkpoint {victim}: {e}", stacklevel=2)


def _resolve(path: str | Path) -> Path:
    path = Path(path)
    return path.with_suffix(".safetensors") if path.suffix == ".json" else path


def verify_checkpoint(path: str | Path) -> tuple[dict, bytes]:
    """Check a checkpoint is complete and consistent; return its JSON and tensor bytes."""
    path = _resolve(path)
    meta = read_json(sidecar(path))
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise LinearizerError(f"{sidecar(path)} is not a linearizer checkpoint")
    if int(meta.get("format_version", 0)) > FORMAT_VERSION:
        raise LinearizerError(
            f"{path.name} has format version {meta['format_version']}; this library reads "
            f"up to {FORMAT_VERSION} (upgrade linearizer)"
        )
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        raise LinearizerError(f"checkpoint {path.name} has JSON but no tensors file") from None
    except OSError as e:
        raise LinearizerError(f"cannot read {path}: {e.strerror or e}") from None
    info = meta.get("tensors", {})
    if len(blob) != info.get("bytes"):
        raise LinearizerError(
            f"checkpoint {path.name} is truncated ({len(blob)} bytes, expected {info.get('bytes')})"
        )
    if hashlib.sha256(blob).hexdigest() != info.get("sha256"):
        raise LinearizerError(f"checkpoint {path.name} is corrupt (SHA-256 mismatch)")
    return meta, blob


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Tensors paths of checkpoints whose two files both exist, oldest first (not verified)."""
    on_disk = _steps_on_disk(run_dir)
    steps = sorted(s for s, kinds in on_disk.items() if kinds == {"json", "safetensors"})
    return [checkpoint_path(run_dir, s) for s in steps]


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest checkpoint that verifies; a bad newer one is skipped with a warning."""
    on_disk = _steps_on_disk(run_dir)
    skipped: list[str] = []
    for step in sorted(on_disk, reverse=True):
        path = checkpoint_path(run_dir, step)
        if problem := _problem(path):
            skipped.append(problem)
            continue
        if skipped:
            warnings.warn(
                f"skipping unusable checkpoint(s) ({'; '.join(skipped)}); "
                f"falling back to {path.name}",
                stacklevel=2,
            )
        return path
    if skipped:
        warnings.warn(f"no usable checkpoint in {run_dir} ({'; '.join(skipped)})", stacklevel=2)
    return None


def unusable_checkpoints(run_dir: str | Path) -> list[str]:
    """``"<file>: <problem>"`` for every checkpoint of ``run_dir`` that does not verify."""
    steps = sorted(_steps_on_disk(run_dir), reverse=True)
    problems = [_problem(checkpoint_path(run_dir, step)) for step in steps]
    return [p for p in problems if p is not None]


def _problem(path: Path) -> str | None:
    """``"<file>: <problem>"`` when the checkpoint at ``path`` does not verify, else None."""
    try:
        verify_checkpoint(path)
    except LinearizerError as e:
        return f"{path.name}: {e}"
    return None


def read_checkpoint(path: str | Path) -> tuple[dict, dict[str, Tensor]]:
    """Verified JSON and all tensors of a checkpoint (no model needed)."""
    from safetensors.torch import load as from_bytes

    meta, blob = verify_checkpoint(path)
    try:
        tensors = from_bytes(blob)
    except Exception as e:  # safetensors raises its own error types
        raise LinearizerError(f"corrupt safetensors data in {_resolve(path).name}: {e}") from None
    return meta, tensors


def check_compatible(meta: dict, model: nn.Module, model_kind: str | None, name: str) -> None:
    """One-line error when a checkpoint belongs to another model kind or architecture."""
    kind = meta.get("model_kind", "")
    if model_kind is not None and kind != model_kind:
        raise LinearizerError(
            f"{name} was saved by a '{kind or 'unknown'}' model, not a '{model_kind}' model"
        )
    if meta.get("model_signature") != model_signature(model):
        found = {k: tuple(v) for k, v in meta.get("model_shapes", {}).items()}
        why = _first_difference(shape_table(model), found)
        raise LinearizerError(
            f"{name} is from a different architecture ({why}); was it trained with another config?"
        )


def load_state(
    model: nn.Module, tensors: dict[str, Tensor], aliases: dict[str, str], what: str = "checkpoint"
) -> None:
    """Load ``tensors`` strictly, each ``alias`` filled from its canonical tensor (see
    :func:`dedupe`); a mismatch is a one-line error naming ``what``."""
    state = dict(tensors)
    for alias, canonical in aliases.items():
        if canonical not in tensors:
            raise LinearizerError(f"{what} alias {alias} -> {canonical}: target missing")
        state[alias] = tensors[canonical]
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        first = str(e).strip().splitlines()[-1].strip()
        raise LinearizerError(f"{what} weights do not fit the model: {first}") from None


def load_checkpoint(
    path: str | Path,
    model: nn.Module,
    *,
    optimizer: torch.optim.Optimizer | None = None,
    ema: Any = None,
    model_kind: str | None = None,
    restore_rng_state: bool = True,
) -> Checkpoint:
    """Restore a training state in place; returns the step and metadata (config, extra)."""
    path = _resolve(path)
    meta, tensors = read_checkpoint(path)
    check_compatible(meta, model, model_kind, path.name)
    load_state(model, _section(tensors, "model."), meta.get("model_aliases", {}))
    if optimizer is not None:
        if "optimizer" not in meta:
            raise LinearizerError(f"{path.name} holds no optimizer state")
        _optimizer_unpack(optimizer, _section(tensors, "optim."), meta["optimizer"])
    if ema is not None:
        if "ema" not in meta:
            raise LinearizerError(f"{path.name} holds no EMA weights (trained with ema_decay=0?)")
        ema.load_state_dict({"shadow": _section(tensors, "ema."), **meta["ema"]})
    if restore_rng_state:
        restore_rng(_section(tensors, "rng."), meta["rng"])
    meta["extra_tensors"] = _section(tensors, "extra.")
    return Checkpoint(path=path, step=int(meta["step"]), meta=meta)


def load_weights(
    path: str | Path, model: nn.Module, *, use_ema: bool = True, model_kind: str | None = None
) -> Checkpoint:
    """Load only the weights for evaluation: the EMA ones when present and ``use_ema``."""
    path = _resolve(path)
    meta, tensors = read_checkpoint(path)
    check_compatible(meta, model, model_kind, path.name)
    weights = _section(tensors, "model.")
    ema = _section(tensors, "ema.") if use_ema else {}
    # The EMA holds each shared tensor once, under its parameter/buffer name.
    weights.update({k: v for k, v in ema.items() if k in weights})
    load_state(model, weights, meta.get("model_aliases", {}))
    section = "ema" if ema else "model"
    return Checkpoint(path=path, step=int(meta["step"]), meta=meta, section=section)
