"""The one ``save_pretrained`` / ``from_pretrained`` pair: Hugging Face-style model folders
(``model.safetensors`` + ``config.json``, no pickles), and every other way a model is named.

``save_pretrained(model, dir, config)`` writes the weights (a shared sub-network stored once)
and a ``config.json`` holding the model's config, kind, library version and architecture
signature. The folder can be uploaded with ``huggingface_hub.upload_folder`` as is; nothing
here needs the network. :func:`from_pretrained` is the package's one loader of a model by name:
it opens such a folder (rebuilding the model with ``build_fn``, or with its run kind), a training
run folder, a ``SCHEME:NAME`` spec (``pretrained:mnist``) or a bare name of the one known source
(``mnist``), the last three through :func:`~linearizer.training.runs.load_run`, in a fresh
interpreter with nothing imported first. :mod:`linearizer.training` and
:mod:`linearizer.pretrained` export this same function. It refuses a folder of another
architecture in one line.

>>> import tempfile, torch
>>> folder = tempfile.mkdtemp()
>>> net = torch.nn.Linear(3, 2)
>>> _ = save_pretrained(net, folder, {"d_in": 3, "d_out": 2}, model_kind="demo")
>>> back = from_pretrained(folder, lambda cfg: torch.nn.Linear(cfg["d_in"], cfg["d_out"]))
>>> bool(torch.equal(back.weight, net.weight))
True
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .. import __version__
from ..errors import LinearizerError
from ..io import load_tensors, read_json, save_tensors, write_json
from .checkpoint import check_compatible, dedupe, load_state, load_weights, model_identity
from .config import Config
from .runs import load_run, run_kind, sources

WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"


def save_pretrained(
    model: nn.Module,
    directory: str | Path,
    config: Config | dict[str, Any] | None = None,
    model_kind: str = "",
) -> Path:
    """Write ``directory/model.safetensors`` and ``directory/config.json``; returns the folder."""
    directory = Path(directory)
    cfg = config.to_dict() if isinstance(config, Config) else dict(config or {})
    tensors, aliases = dedupe(model.state_dict())
    save_tensors(directory / WEIGHTS_NAME, tensors, metadata={"format": "pt"})
    write_json(
        directory / CONFIG_NAME,
        {
            "model_kind": model_kind,
            "linearizer_version": __version__,
            **model_identity(model),
            "tied_weights": aliases,
            "config": cfg,
        },
    )
    return directory


def read_pretrained_config(directory: str | Path) -> dict[str, Any]:
    """The ``config.json`` of a pretrained folder (with ``config``, ``model_kind``, ...)."""
    meta = read_json(Path(directory) / CONFIG_NAME)
    if not isinstance(meta, dict) or "config" not in meta:
        raise LinearizerError(f"{directory}/{CONFIG_NAME} is not a linearizer model config")
    return meta


def from_pretrained(
    source: str | Path,
    build_fn: Callable[[Any], nn.Module] | None = None,
    config_cls: type[Config] | None = None,
    model_kind: str | None = None,
    map_location: str | torch.device = "cpu",
) -> nn.Module:
    """The model ``source`` names, in eval mode when it comes from a run.

    A folder written by :func:`save_pretrained` is rebuilt with ``build_fn(config)``
    (``config_cls.from_dict`` of the stored config when given, else the plain dict), or without
    ``build_fn`` by its run kind's builder, and its weights are loaded strictly. Anything else is
    a run: a run folder, ``"SCHEME:NAME"``, or a name that is not a path on disk, which the one
    known source resolves (``"mnist"`` is ``"pretrained:mnist"``).
    """
    directory = Path(source)
    if not (directory / WEIGHTS_NAME).is_file():  # a run: its weights are in checkpoints/
        return load_run(_run_spec(str(source))).model.to(map_location)
    meta = read_pretrained_config(directory)
    if build_fn is None:  # a model of a registered kind (flow, projective, style)
        kind = run_kind(model_kind or meta.get("model_kind", ""))
        model = kind.build(kind.config.from_dict(meta["config"]), directory)
    else:
        cfg = config_cls.from_dict(meta["config"]) if config_cls is not None else meta["config"]
        model = build_fn(cfg)
    check_compatible(meta, model, model_kind, str(directory))
    tensors = load_tensors(directory / WEIGHTS_NAME)
    load_state(model, tensors, meta.get("tied_weights", {}), f"{directory}:")
    return model.to(map_location)


def _run_spec(name: str) -> str:
    """``name`` as :func:`load_run` takes it: a path or ``SCHEME:NAME`` as it is, a bare name
    prefixed with the scheme of the one known source (a name, like the Hub's)."""
    known = sources()
    if Path(name).exists() or ":" in name or "/" in name or len(known) != 1:
        return name
    return f"{known[0]}:{name}"


def checkpoint_to_pretrained(
    checkpoint: str | Path,
    directory: str | Path,
    model: nn.Module,
    use_ema: bool = True,
    model_kind: str | None = None,
) -> Path:
    """Export a training checkpoint's (EMA) weights and config as a pretrained folder.

    ``model`` is a freshly built model of the run's config; its weights are overwritten.
    """
    ckpt = load_weights(checkpoint, model, use_ema=use_ema, model_kind=model_kind)
    kind = ckpt.meta.get("model_kind", "") if model_kind is None else model_kind
    return save_pretrained(model, directory, ckpt.config or {}, model_kind=kind)
