"""Typed, documented configs with presets and ``key=value`` overrides (nanoGPT / EDM style).

A config is a dataclass deriving from :class:`Config`; every field carries a one-line ``help``
(use :func:`option`). Fields may be plain values (``int``, ``float``, ``bool``, ``str``,
``Literal[...]`` choices, ``Optional[...]``, ``tuple[...]``/``list[...]``) or nested configs,
which overrides address with dotted names (``model.channels=32``).

>>> from dataclasses import dataclass
>>> @dataclass
... class Demo(Config):
...     lr: float = option(1e-3, "learning rate")
...     sizes: tuple[int, ...] = option((8, 8), "layer widths")
>>> cfg = apply_overrides(Demo(), ["lr=2e-4", "sizes=16,32"])
>>> cfg.lr, cfg.sizes
(0.0002, (16, 32))
>>> try:
...     Demo.from_dict({"lr": 1.0, "lrr": 2})
... except LinearizerError as e:
...     print(e)
unknown config key 'lrr' (did you mean 'lr'?); valid keys: lr, sizes

Presets are named configs per *kind* (``flow``, ``projective``, ``style``): the package
``linearizer.<kind>`` registers them with :func:`register_preset` when imported, and
:func:`resolve` imports it on first use, so ``resolve("flow", "smoke", ["lr=1e-3"])`` works
from anywhere.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import importlib
import json
import types
import typing
from dataclasses import MISSING, dataclass, field
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from ..errors import LinearizerError

C = TypeVar("C", bound="Config")

_TRUE = {"1", "true", "yes", "on", "y", "t"}
_FALSE = {"0", "false", "no", "off", "n", "f"}
_NONE = {"none", "null", "~"}


def option(default: Any, help: str, **metadata: Any) -> Any:
    """A documented dataclass field; mutable defaults (lists, dicts) are copied per instance."""
    meta = {"help": help, **metadata}
    if isinstance(default, (list, dict, set)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    if dataclasses.is_dataclass(default) and not isinstance(default, type):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class Config:
    """Base of every typed config: strict ``from_dict``, ``to_dict``, validation hook."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise :class:`LinearizerError` on inconsistent values; subclasses extend it."""

    @classmethod
    def from_dict(cls: type[C], data: dict[str, Any], _prefix: str = "") -> C:
        """Build from a (JSON) dict; unknown keys are errors, missing keys take defaults."""
        if not isinstance(data, dict):
            raise LinearizerError(f"config {_prefix or cls.__name__} must be a mapping")
        hints = _hints(cls)
        names = [f.name for f in dataclasses.fields(cls)]
        for key in data:
            if key not in names:
                raise LinearizerError(
                    _unknown_key(_prefix + str(key), [_prefix + n for n in names])
                )
        values = {}
        for name in names:
            if name in data:
                values[name] = coerce(data[name], hints[name], _prefix + name)
        try:
            return cls(**values)
        except TypeError as e:  # a required field without default was left out
            raise LinearizerError(f"config {cls.__name__}: {e}") from None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (tuples become lists, nested configs become dicts)."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def flat(self) -> dict[str, Any]:
        """``{"dotted.name": value}`` for every leaf field."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Config):
                out.update({f"{f.name}.{k}": v for k, v in value.flat().items()})
            else:
                out[f.name] = value
        return out


def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception as e:  # an annotation that does not resolve is a programming error
        raise TypeError(f"cannot resolve annotations of {cls.__name__}: {e}") from e


def _plain(value: Any) -> Any:
    if isinstance(value, Config):
        return value.to_dict()
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _unknown_key(key: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"unknown config key '{key}'{hint}; valid keys: {', '.join(valid)}"


# ----------------------------------------------------------------------------- type coercion


def _is_optional(tp: Any) -> tuple[bool, Any]:
    origin = get_origin(tp)
    if origin is Union or origin is types.UnionType:
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(get_args(tp)) == 2:
            return True, args[0]
        raise TypeError(f"unsupported union type {tp}")
    return False, tp


def type_name(tp: Any) -> str:
    """Short human name of an annotation, for help tables and error messages."""
    optional, inner = _is_optional(tp)
    if optional:
        return f"{type_name(inner)} | None"
    origin = get_origin(tp)
    if origin is Literal:
        return "{" + ",".join(str(a) for a in get_args(tp)) + "}"
    if origin in (tuple, list):
        args = get_args(tp)
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return f"tuple[{type_name(args[0])}, ...]"
        return f"{origin.__name__}[{', '.join(type_name(a) for a in args)}]"
    return getattr(tp, "__name__", str(tp))


def coerce(value: Any, tp: Any, name: str) -> Any:
    """Convert ``value`` (a Python value or a command-line string) to annotation ``tp``.

    Raises :class:`LinearizerError` naming ``name``, the expected type and the bad value.
    """
    optional, inner = _is_optional(tp)
    if optional:
        if value is None or (isinstance(value, str) and value.strip().lower() in _NONE):
            return None
        return coerce(value, inner, name)
    try:
        return _coerce(value, inner, name)
    except LinearizerError:
        raise
    except (TypeError, ValueError):
        raise LinearizerError(_bad(name, tp, value)) from None


def _bad(name: str, tp: Any, value: Any) -> str:
    return f"config key '{name}' expects {type_name(tp)}, got {value!r}"


def _coerce(value: Any, tp: Any, name: str) -> Any:
    origin = get_origin(tp)
    if isinstance(tp, type) and issubclass(tp, Config):
        if isinstance(value, tp):
            return value
        return tp.from_dict(value, _prefix=name + ".")
    if origin is Literal:
        choices = get_args(tp)
        for c in choices:
            if value == c or (isinstance(value, str) and str(c) == value.strip()):
                return c
        raise LinearizerError(
            f"config key '{name}' must be one of {', '.join(map(str, choices))}; got {value!r}"
        )
    if origin in (tuple, list):
        return _coerce_sequence(value, tp, origin, name)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise LinearizerError(_bad(name, tp, value))
    if tp is int:
        if isinstance(value, bool):
            raise LinearizerError(_bad(name, tp, value))
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            text = value.strip().replace("_", "")
            try:
                return int(text)
            except ValueError:
                as_float = float(text)  # "1e4" is a fine way to say 10000
                if as_float.is_integer():
                    return int(as_float)
        raise LinearizerError(_bad(name, tp, value))
    if tp is float:
        if isinstance(value, bool):
            raise LinearizerError(_bad(name, tp, value))
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            return float(value.strip())
        raise LinearizerError(_bad(name, tp, value))
    if tp is str:
        if isinstance(value, str):
            return value
        raise LinearizerError(_bad(name, tp, value))
    if tp is Any:
        return value
    raise TypeError(f"config key '{name}': unsupported annotation {tp}")


def _coerce_sequence(value: Any, tp: Any, origin: type, name: str) -> Any:
    args = get_args(tp)
    if isinstance(value, str):
        text = value.strip()
        if text.startswith(("[", "(")) and text.endswith(("]", ")")):
            text = text[1:-1]
        items: list[Any] = [s.strip() for s in text.split(",") if s.strip()] if text else []
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise LinearizerError(_bad(name, tp, value))
    if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        if len(items) != len(args):
            raise LinearizerError(
                f"config key '{name}' expects {len(args)} values ({type_name(tp)}), got {value!r}"
            )
        return tuple(coerce(v, a, f"{name}[{i}]") for i, (v, a) in enumerate(zip(items, args)))
    elem = args[0] if args else Any
    out = [coerce(v, elem, f"{name}[{i}]") for i, v in enumerate(items)]
    return tuple(out) if origin is tuple else out


# ----------------------------------------------------------------------------- overrides


def apply_overrides(cfg: C, overrides: list[str] | tuple[str, ...] | None) -> C:
    """Return a copy of ``cfg`` with ``["key=value", "nested.key=value", ...]`` applied.

    Values are parsed from the field's annotation: ``none`` for optional fields, ``true/false``
    for booleans, ``1,2,3`` (or ``[1,2,3]``) for tuples and lists.
    """
    out = copy.deepcopy(cfg)
    for item in overrides or ():
        if "=" not in item:
            raise LinearizerError(f"override {item!r} is not of the form key=value")
        key, raw = item.split("=", 1)
        _set_path(out, key.strip(), raw)
    out.validate()
    return out


def _set_path(cfg: Config, key: str, raw: str) -> None:
    parts = key.split(".")
    target: Config = cfg
    for depth, part in enumerate(parts):
        names = [f.name for f in dataclasses.fields(target)]
        prefix = ".".join(parts[:depth])
        if part not in names:
            valid = [f"{prefix}.{n}" if prefix else n for n in names]
            raise LinearizerError(_unknown_key(key, valid))
        if depth < len(parts) - 1:
            child = getattr(target, part)
            if not isinstance(child, Config):
                raise LinearizerError(f"config key '{prefix or part}' has no sub-keys ({key})")
            target = child
        else:
            tp = _hints(type(target))[part]
            if isinstance(tp, type) and issubclass(tp, Config):
                raise LinearizerError(f"config key '{key}' is a section; set '{key}.<name>=...'")
            object.__setattr__(target, part, coerce(raw, tp, key))
    # Nested sections validate themselves here; the root is validated by the caller.
    if target is not cfg:
        target.validate()


# ----------------------------------------------------------------------------- documentation


def describe(cfg_or_cls: Config | type[Config]) -> list[tuple[str, str, Any, str]]:
    """``[(dotted name, type, default/current value, help)]`` for every leaf option."""
    cls = cfg_or_cls if isinstance(cfg_or_cls, type) else type(cfg_or_cls)
    inst = cfg_or_cls if not isinstance(cfg_or_cls, type) else None
    hints = _hints(cls)
    rows = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if inst is not None:
            value = getattr(inst, f.name)
        elif f.default is not MISSING:
            value = f.default
        elif f.default_factory is not MISSING:
            value = f.default_factory()
        else:
            value = MISSING
        if isinstance(tp, type) and issubclass(tp, Config):
            sub = value if isinstance(value, Config) else tp
            rows += [(f"{f.name}.{n}", t, v, h) for n, t, v, h in describe(sub)]
        else:
            shown = "(required)" if value is MISSING else value
            rows.append((f.name, type_name(tp), shown, f.metadata.get("help", "")))
    return rows


def undocumented(cls: type[Config]) -> list[str]:
    """Names of fields (dotted) that lack a ``help`` text."""
    return [name for name, _, _, help_ in describe(cls) if not help_.strip()]


def render_options(cfg_or_cls: Config | type[Config], markdown: bool = False) -> str:
    """All options with type, default and help: plain text for ``--help``, or a Markdown table."""
    rows = describe(cfg_or_cls)
    if markdown:
        lines = ["| option | type | default | meaning |", "|---|---|---|---|"]
        for name, tp, value, help_ in rows:
            tp_cell = tp.replace("|", "\\|")
            lines.append(f"| `{name}` | {tp_cell} | `{_show(value)}` | {help_} |")
        return "\n".join(lines) + "\n"
    width = max((len(r[0]) for r in rows), default=0)
    lines = [f"  {n:<{width}}  {h} [{t}, default: {_show(v)}]" for n, t, v, h in rows]
    return "\n".join(lines) + "\n"


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)


# ----------------------------------------------------------------------------- presets

_PRESETS: dict[str, dict[str, Config]] = {}


def register_preset(kind: str, name: str, cfg: Config) -> None:
    """Make ``cfg`` available as ``get_preset(kind, name)``; every field must be documented."""
    if not isinstance(cfg, Config):
        raise TypeError(f"preset {kind}/{name} must be a Config, got {type(cfg).__name__}")
    missing = undocumented(type(cfg))
    if missing:
        raise TypeError(f"{type(cfg).__name__} fields lack help text: {', '.join(missing)}")
    bucket = _PRESETS.setdefault(kind, {})
    if bucket:
        first = next(iter(bucket.values()))
        if type(first) is not type(cfg):
            raise TypeError(f"presets of kind {kind!r} must all be {type(first).__name__}")
    bucket[name] = copy.deepcopy(cfg)


def _ensure_kind(kind: str) -> dict[str, Config]:
    if kind not in _PRESETS:
        try:  # convention: importing linearizer.<kind> registers that kind's presets
            importlib.import_module(f"linearizer.{kind}")
        except ImportError:
            pass
    if kind not in _PRESETS:
        known = ", ".join(sorted(_PRESETS)) or "none registered"
        raise LinearizerError(f"unknown config kind '{kind}'; known kinds: {known}")
    return _PRESETS[kind]


def preset_names(kind: str) -> list[str]:
    return list(_ensure_kind(kind))


def get_preset(kind: str, name: str) -> Config:
    """A fresh copy of preset ``name`` of ``kind``."""
    bucket = _ensure_kind(kind)
    if name not in bucket:
        raise LinearizerError(
            f"unknown {kind} preset '{name}'; available: {', '.join(bucket) or 'none'}"
        )
    return copy.deepcopy(bucket[name])


def config_class(kind: str) -> type[Config]:
    """The config class of ``kind`` (the class of its presets)."""
    return type(next(iter(_ensure_kind(kind).values())))


def resolve(kind: str, preset: str, overrides: list[str] | None = None) -> Config:
    """Preset + overrides: the fully resolved config a run records in its ``config.json``."""
    return apply_overrides(get_preset(kind, preset), overrides)


# ----------------------------------------------------------------------------- training settings


@dataclass
class TrainConfig(Config):
    """Settings the generic trainer reads; each trainer's config derives from this one.

    ``batch_size`` is the *global* batch: under ``torchrun`` each of the W processes takes
    ``batch_size / W`` rows of the same draw, so W processes train like one.
    ``RESUME_MUTABLE`` lists the keys ``--resume`` may change (subclasses may extend it).
    """

    RESUME_MUTABLE = frozenset(
        {"max_steps", "max_minutes", "ckpt_every", "keep_last", "log_every", "eval_every",
         "tracker", "tracker_project", "progress", "threads"}
    )  # fmt: skip

    seed: int = option(0, "seed of every random draw (weights init, data order, noise)")
    max_steps: int = option(1000, "optimizer steps to train for (total, including resumed ones)")
    max_minutes: float = option(
        0.0, "wall-clock budget in minutes (0 = none); stops at a step boundary, not bit-exact"
    )
    batch_size: int = option(64, "global batch size (split evenly over torchrun processes)")
    optimizer: Literal["adam", "adamw"] = option("adam", "adam (L2 decay) or adamw (decoupled)")
    lr: float = option(1e-4, "peak learning rate")
    betas: tuple[float, float] = option((0.9, 0.999), "Adam beta1,beta2")
    eps: float = option(1e-8, "Adam epsilon")
    weight_decay: float = option(0.0, "weight decay")
    schedule: Literal["constant", "cosine", "linear"] = option(
        "constant", "learning-rate decay after warm-up, reaching min_lr_ratio*lr at max_steps"
    )
    warmup_steps: int = option(0, "linear learning-rate warm-up steps")
    min_lr_ratio: float = option(0.0, "final learning rate of a decaying schedule, relative to lr")
    grad_clip: float = option(0.0, "clip the global gradient norm to this (0 = no clipping)")
    ema_decay: float = option(0.999, "EMA decay of the weights (0 = no EMA)")
    ema_warmup: int = option(100, "EMA decay ramps linearly from 0 to ema_decay over these steps")
    init_pass: bool = option(
        True, "run the loss once without gradients on the first global batch (data-dependent init)"
    )
    ckpt_every: int = option(1000, "checkpoint every N steps (0 = only at the end)")
    keep_last: int = option(3, "checkpoints kept in RUN/checkpoints (older ones are deleted)")
    log_every: int = option(10, "write metrics every N steps")
    eval_every: int = option(0, "call the task's on_eval every N steps (0 = only at the end)")
    threads: int = option(0, "torch CPU threads per process (0 = torch default)")
    device: str = option("auto", "auto, cpu, cuda or cuda:N (auto: the local GPU if any)")
    tracker: Literal["jsonl", "trackio", "none"] = option(
        "jsonl", "experiment tracker besides metrics.jsonl (always written): trackio or none"
    )
    tracker_project: str = option("linearizer", "trackio project name")
    progress: bool = option(True, "show a progress bar (tqdm if installed) on rank 0")
    ddp_find_unused: bool = option(False, "DDP find_unused_parameters (slower; for partial graphs)")

    def validate(self) -> None:
        super().validate()
        positive = {"max_steps": self.max_steps, "batch_size": self.batch_size,
                    "keep_last": self.keep_last, "log_every": self.log_every}  # fmt: skip
        for name, value in positive.items():
            if value < 1:
                raise LinearizerError(f"config key '{name}' must be >= 1, got {value}")
        non_negative = {"max_minutes": self.max_minutes, "lr": self.lr, "eps": self.eps,
                        "weight_decay": self.weight_decay, "warmup_steps": self.warmup_steps,
                        "grad_clip": self.grad_clip, "ema_warmup": self.ema_warmup,
                        "ckpt_every": self.ckpt_every, "eval_every": self.eval_every,
                        "threads": self.threads}  # fmt: skip
        for name, value in non_negative.items():
            if not value >= 0:
                raise LinearizerError(f"config key '{name}' must be >= 0, got {value}")
        if not 0.0 <= self.ema_decay < 1.0:
            raise LinearizerError(f"config key 'ema_decay' must be in [0, 1), got {self.ema_decay}")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise LinearizerError(
                f"config key 'min_lr_ratio' must be in [0, 1], got {self.min_lr_ratio}"
            )
        if not all(0.0 <= b < 1.0 for b in self.betas):
            raise LinearizerError(f"config key 'betas' must be in [0, 1), got {self.betas}")
        if self.device != "auto" and not self.device.startswith(("cpu", "cuda")):
            raise LinearizerError(
                f"config key 'device' must be auto, cpu or cuda[:N]; got {self.device!r}"
            )
