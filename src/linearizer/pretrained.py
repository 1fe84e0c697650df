"""Pretrained models shipped inside the package: open them without data and without training.

Each model is two package assets, ``linearizer/assets/<file>.safetensors`` (the EMA or the raw
weights, as its JSON says, in half precision, and the model's latent calibration, if any, as
``calibration.basis``/``calibration.core`` in float32 and its latent transport, if any, as
``calibration.transport.*``: its flow's weights in half precision, the rest in float32) and
``<file>.json`` (format, the training config, the step, the SHA-256 of the weights file, the
checksum of the training data, how the calibration was fitted and the model's evaluation).
:func:`unpack` checks the hash, then writes a run folder (``config.json``, ``run.json``, one
float32 checkpoint) in the user cache (:func:`linearizer.io.default_cache_dir`),
``<cache>/pretrained/<name>-<weights hash>-<config hash>``. :func:`unpack` is the ``pretrained``
source that :data:`linearizer.training.runs.SOURCES` declares (imported on first use), so every
command and loader that opens a run opens ``pretrained:NAME`` with nothing imported first:
``linearizer sample pretrained:mnist --n 64 --out DIR``, ``load_run("pretrained:mnist")`` or
:func:`from_pretrained` (re-exported from :mod:`linearizer.training.model_folder`, the same
function, which also opens run folders and saved folders).

>>> available()
['mnist', 'mnist-cond', 'mnist-mix', 'mnist-r16']
>>> run_folder("pretrained:nope")
Traceback (most recent call last):
    ...
linearizer.errors.LinearizerError: unknown pretrained model 'nope'; available: ...
>>> model = from_pretrained("mnist")                    # doctest: +SKIP
>>> model.sample(torch.randn(8, 1, 32, 32)).shape        # doctest: +SKIP
torch.Size([8, 1, 32, 32])
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from torch import nn

from . import __version__
from .errors import LinearizerError
from .flow.calibration import (
    FitOptions,
    calibration_info,
    from_tensors,
    save_calibration,
    to_tensors,
)
from .io import default_cache_dir, file_sha256, load_tensors, read_json, save_tensors, write_json
from .training.checkpoint import save_checkpoint
from .training.model_folder import from_pretrained
from .training.runs import GUIDANCE_FILE, load_run, run_folder, run_kind
from .training.weights import weights_label

FORMAT = "linearizer.pretrained/1"
# The run spec prefix of a shipped model: "pretrained:mnist".
PRETRAINED = "pretrained:"
# Tensors of a shipped latent calibration (flow.calibration) beside the weights in one file.
CALIBRATION = "calibration."
# name -> asset file stem in linearizer/assets
ASSETS = {
    "mnist": "flow_mnist",
    "mnist-r16": "flow_mnist_r16",
    "mnist-cond": "flow_mnist_cond",
    "mnist-mix": "flow_mnist_mix",
}


def available() -> list[str]:
    """Names :func:`unpack` accepts."""
    return sorted(ASSETS)


def asset_paths(name: str) -> tuple[Path, Path]:
    """``(weights .safetensors, description .json)`` of a shipped model."""
    if name not in ASSETS:
        raise LinearizerError(
            f"unknown pretrained model '{name}'; available: {', '.join(available())}"
        )
    root = asset_root()
    return root / f"{ASSETS[name]}.safetensors", root / f"{ASSETS[name]}.json"


def asset_root() -> Path:
    """The package's asset folder, ``linearizer/assets``."""
    return Path(str(resources.files("linearizer").joinpath("assets")))


def info(name: str) -> dict[str, Any]:
    """The description shipped beside the weights (config, step, hash, data, evaluation)."""
    weights, meta_path = asset_paths(name)
    if not weights.is_file() or not meta_path.is_file():
        raise LinearizerError(f"pretrained model '{name}' is missing from this installation")
    meta = read_json(meta_path)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise LinearizerError(f"{meta_path} is not a linearizer pretrained-model description")
    for key in ("kind", "config", "step", "sha256"):
        if key not in meta:
            raise LinearizerError(f"{meta_path} lacks '{key}'")
    return meta


def verify(name: str) -> dict[str, Any]:
    """The description, after checking the weights file against its SHA-256 (else an error)."""
    meta = info(name)
    weights, _ = asset_paths(name)
    found = file_sha256(weights)
    if found != meta["sha256"]:
        raise LinearizerError(
            f"{weights} does not match its recorded SHA-256 ({found[:12]}... instead of "
            f"{meta['sha256'][:12]}...): the file is damaged or was replaced"
        )
    return meta


def cache_root() -> Path:
    return default_cache_dir() / "pretrained"


def unpack(name: str) -> Path:
    """A run folder holding the pretrained model ``name`` (made once per weights and config)."""
    meta = verify(name)
    # The config is part of the key: a description that changes (a sampler default, say) over
    # the same weights must not reopen the folder made from the old one; nor may a newly
    # recorded recommended guidance.
    guidance = meta.get("recommended_guidance")
    key = meta["config"] if guidance is None else {"config": meta["config"], "guidance": guidance}
    config = json.dumps(key, sort_keys=True).encode()
    folder = cache_root() / f"{name}-{meta['sha256'][:12]}-{hashlib.sha256(config).hexdigest()[:8]}"
    if (folder / "run.json").is_file():
        return folder
    weights, _ = asset_paths(name)
    model, cfg = _build(meta)
    tensors = load_tensors(weights)
    calibration = {k: tensors.pop(k) for k in list(tensors) if k.startswith(CALIBRATION)}
    reference = model.state_dict()
    state = {k: v.to(reference[k].dtype) if k in reference else v for k, v in tensors.items()}
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0]
        raise LinearizerError(f"{weights} does not match its config: {first}") from None
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=folder.parent))
    try:
        _write_run(tmp, model, cfg, meta)
        if calibration:
            _write_calibration(tmp, calibration, meta, weights)
        try:
            os.rename(tmp, folder)  # atomic: a concurrent unpack sees all or nothing
        except OSError:
            if not (folder / "run.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _build(meta: dict[str, Any]) -> tuple[nn.Module, Any]:
    kind = run_kind(meta["kind"])
    cfg = kind.config.from_dict(meta["config"])
    return kind.build(cfg, Path(".")), cfg


def _write_run(folder: Path, model: nn.Module, cfg: Any, meta: dict[str, Any]) -> None:
    step = int(meta["step"])
    write_json(folder / "config.json", cfg.to_dict())
    save_checkpoint(folder, step, model, config=cfg.to_dict(), model_kind=meta["kind"], keep_last=1)
    write_json(
        folder / "run.json",
        {
            "kind": meta["kind"],
            "library_version": __version__,
            "world": 1,
            "status": "finished",
            "step": step,
            "pretrained": meta.get("name", ""),
        },
    )
    if "recommended_guidance" in meta:  # read back by load_run (Run.recommended_guidance)
        write_json(folder / GUIDANCE_FILE, meta["recommended_guidance"])


def _write_calibration(folder: Path, tensors: dict, meta: dict[str, Any], source: Path) -> None:
    """The asset's latent calibration as the run folder's (the folder's weights are "model")."""
    try:
        fit = FitOptions.from_record(meta["calibration"]["fit"])
        cal = from_tensors(tensors, CALIBRATION, fit)
    except (KeyError, TypeError) as e:
        raise LinearizerError(f"{source} holds an incomplete latent calibration ({e})") from None
    save_calibration(folder, {"model": cal}, int(meta["step"]), fit)


def export(
    run_dir: str | Path,
    name: str,
    out_dir: str | Path,
    extra: dict[str, Any],
    *,
    use_ema: bool = True,
) -> Path:
    """Write a run's weights (EMA ones when present and ``use_ema``) as a half-precision asset
    ``<out_dir>/<file>.safetensors``, with the run's latent calibration for those weights,
    plus its description (``extra`` adds e.g. the data checksum and the evaluation)."""
    run = load_run(run_dir, use_ema=use_ema)
    file = ASSETS.get(name, name)
    out = Path(out_dir)
    state = {
        k: v.detach().to(torch.float16) if v.is_floating_point() else v
        for k, v in run.model.state_dict().items()
    }
    cal = getattr(run.model, "calibration", None)
    if cal is not None:  # float32: K multiplies every sample's latent, keep it finer than f16
        # the transport's flow in half precision, like the network's weights (10 MB budget)
        state.update(to_tensors(cal, CALIBRATION, torch.float32, torch.float16))
        extra = {**extra, "calibration": {"fit": calibration_info(run.path)["fit"]}}
    weights = save_tensors(out / f"{file}.safetensors", state, metadata={"format": FORMAT})
    meta = {
        "format": FORMAT,
        "name": name,
        "kind": run.kind,
        "step": run.step,
        "config": run.config.to_dict(),
        "dtype": "float16",
        "weights": weights_label(run.weights),
        "sha256": file_sha256(weights),
        "library_version": __version__,
        "torch": torch.__version__,
        **extra,
    }
    write_json(out / f"{file}.json", meta)
    return weights


__all__ = ["available", "export", "from_pretrained", "info", "run_folder", "unpack", "verify"]
