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

A class may list keys it renamed in ``RENAMED``: an old flat key moved into a section
(``{"hidden": "network.hidden"}``), or a field renamed in place (``{"label": "component"}``). An
old key, in a run folder's ``config.json`` or an override, is read as its new name; an in-place
rename also reads (``cfg.label``) and, with :func:`accepts_renamed`, constructs under its old
name, with a ``DeprecationWarning``.
Presets and the training settings live in :mod:`linearizer.training.config`.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import json
import types
import typing
import warnings
from collections.abc import Callable
from dataclasses import MISSING, field
from typing import Any, ClassVar, Literal, TypeVar, Union, get_args, get_origin

from .errors import LinearizerError

C = TypeVar("C", bound="Config")

_TRUE = {"1", "true", "yes", "on", "y", "t"}
_FALSE = {"0", "false", "no", "off", "n", "f"}
_NONE = {"none", "null", "~"}


def option(default: Any, help: str, **metadata: Any) -> Any:
    """A documented dataclass field; mutable defaults (lists, dicts) are copied per instance."""
    meta = {"help": help, **metadata}
    mutable = isinstance(default, (list, dict, set)) or dataclasses.is_dataclass(default)
    if mutable and not isinstance(default, type):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return field(default=default, metadata=meta)


class Config:
    """Base of every typed config: strict ``from_dict``, ``to_dict``, validation hook.

    Not a dataclass itself (it has no fields), so a config may be a frozen dataclass.
    """

    # Old keys -> new names: dotted in a section, or plain in place (not a field: no annotation).
    RENAMED: ClassVar[dict[str, str]] = {}
    # Old keys whose setting no longer exists: read (and dropped) from files written before.
    RETIRED: ClassVar[frozenset[str]] = frozenset()
    # Set by @dataclass on every subclass (declared for type checkers; no value here).
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    def __post_init__(self) -> None:
        self.validate()

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails: old flat names read through (cfg.hidden).
        target = type(self).RENAMED.get(name)
        if target is None or name in {f.name for f in dataclasses.fields(self)}:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        if "." not in target:
            _warn_renamed(type(self), name, target)
            return getattr(self, target)
        section, leaf = target.split(".", 1)
        return getattr(getattr(self, section), leaf)

    def validate(self) -> None:
        """Raise :class:`LinearizerError` on inconsistent values; subclasses extend it."""

    def _require(
        self, names: str, rule: str, ok: Callable[[Any], bool], *, got: bool = True
    ) -> None:
        """The range checks of ``validate()``: raise :class:`LinearizerError` ``config key
        '<name>' must be <rule>, got <value>`` for the first of ``names`` (space-separated keys)
        whose value fails ``ok`` (``got=False``: without the value). A key may name its section,
        as the user writes it (``network.clamp``); the value is this config's field (``clamp``).

        ``ok`` keeps each check's own comparison: a NaN passes ``not v < 0`` but fails ``v >= 0``.

        >>> from dataclasses import dataclass
        >>> @dataclass
        ... class Demo(Config):
        ...     lr: float = option(1e-3, "learning rate")
        ...     def validate(self) -> None:
        ...         self._require("lr", "> 0", lambda v: v > 0)
        >>> try:
        ...     Demo(lr=0.0)
        ... except LinearizerError as e:
        ...     print(e)
        config key 'lr' must be > 0, got 0.0
        """
        for key in names.split():
            value = getattr(self, key.rsplit(".", 1)[-1])
            if not ok(value):
                tail = f", got {value}" if got else ""
                raise LinearizerError(f"config key '{key}' must be {rule}{tail}")

    @classmethod
    def from_dict(cls: type[C], data: dict[str, Any], _prefix: str = "") -> C:
        """Build from a (JSON) dict; unknown keys are errors, missing keys take defaults."""
        if not isinstance(data, dict):
            raise LinearizerError(f"config {_prefix or cls.__name__} must be a mapping")
        hints = _hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        data = {k: v for k, v in _nest_renamed(cls, data).items() if k not in cls.RETIRED}
        for key in data:
            if key not in fields:
                raise LinearizerError(
                    _unknown_key(_prefix + str(key), [_prefix + n for n in fields])
                )
        values = {}
        for name in (n for n in fields if n in data):
            value = data[name]
            if _is_section(hints[name]) and isinstance(value, dict):
                # A partial section keeps this class's defaults for the keys it leaves out.
                value = {**_default(fields[name]).to_dict(), **_nest_renamed(hints[name], value)}
            values[name] = coerce(value, hints[name], _prefix + name)
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


def _is_section(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, Config)


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not MISSING else f.default


def accepts_renamed(cls: type[C]) -> type[C]:
    """Let a config dataclass's constructor take its in-place renamed keys (with a warning).

    >>> from dataclasses import dataclass
    >>> @accepts_renamed
    ... @dataclass(frozen=True)
    ... class Spec(Config):
    ...     RENAMED = {"label": "component"}
    ...     component: int = option(0, "which component")
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     Spec(label=3).component, Spec(label=3).label, caught[0].category.__name__
    (3, 3, 'DeprecationWarning')
    """
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **renamed_kwargs(type(self), kwargs))

    setattr(cls, "__init__", __init__)  # noqa: B010 (mypy refuses assigning to a method)
    return cls


def renamed_kwargs(cls: type[Config], kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with ``cls``'s in-place renamed keys under their new names (with a warning)."""
    out = dict(kwargs)
    for old, new in cls.RENAMED.items():
        if "." in new or old not in out:
            continue
        _warn_renamed(cls, old, new, stacklevel=4)  # the caller of __init__ or replace
        if new in out:
            raise LinearizerError(f"{cls.__name__}: give {new} or its old name {old}, not both")
        out[new] = out.pop(old)
    return out


def _warn_renamed(cls: type, old: str, new: str, stacklevel: int = 3) -> None:
    warnings.warn(
        f"{cls.__name__}.{old} is renamed {new}; the old name goes in a later release",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


def _renamed(cls: type[Config], key: str) -> str | None:
    """The new name of an old ``key``: dotted when ``cls`` has the section it moved into, or a
    field of ``cls`` itself for an in-place rename."""
    target = cls.RENAMED.get(key)
    if target is None:
        return None
    if "." not in target:
        return target if target in cls.__dataclass_fields__ and key not in _hints(cls) else None
    section = target.split(".", 1)[0]
    hints = _hints(cls)
    if section not in hints or not _is_section(hints[section]):
        return None
    if key in hints and not _is_section(hints[key]):
        return None  # still a plain field of this class
    return target


def _nest_renamed(cls: type[Config], data: dict[str, Any]) -> dict[str, Any]:
    """``{"hidden": 8, "network": "cpu"}`` -> ``{"network": {"hidden": 8, "kind": "cpu"}}``."""
    out: dict[str, Any] = {}
    moved: list[tuple[str, Any]] = []
    for key, value in data.items():
        target = _renamed(cls, key) if not isinstance(value, dict) else None
        if target is None:
            out[key] = value
        elif "." not in target:
            if target in data:
                raise LinearizerError(f"config has both {key} and its new name {target}")
            out[target] = value
        else:
            moved.append((target, value))
    for target, value in moved:
        section, leaf = target.split(".", 1)
        sub = out.get(section, {})
        out[section] = {**(sub if isinstance(sub, dict) else {}), leaf: value}
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
    if _is_section(tp):
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
    if tp is Any:
        return value
    if tp not in (bool, int, float, str):
        raise TypeError(f"config key '{name}': unsupported annotation {tp}")
    if isinstance(value, bool) and tp is not bool:  # an int to Python, but no number here
        raise LinearizerError(_bad(name, tp, value))
    if tp is bool and isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    if tp is float and isinstance(value, (int, float)):
        return float(value)
    if tp is float and isinstance(value, str):
        return float(value.strip())
    if isinstance(value, tp):  # a bool, int or str as it is
        return value
    if tp is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if tp is int and isinstance(value, str):
        text = value.strip().replace("_", "")
        try:
            return int(text)
        except ValueError:
            as_float = float(text)  # "1e4" is a fine way to say 10000
            if as_float.is_integer():
                return int(as_float)
    raise LinearizerError(_bad(name, tp, value))


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
    # after every override, so that settings that need each other may come in any order
    _validate_sections(out)
    out.validate()
    return out


def _validate_sections(cfg: Config) -> None:
    """Validate every nested section of ``cfg``, innermost first (not ``cfg`` itself)."""
    for f in dataclasses.fields(cfg):
        child = getattr(cfg, f.name)
        if isinstance(child, Config):
            _validate_sections(child)
            child.validate()


def _set_path(cfg: Config, key: str, raw: str) -> None:
    key = _renamed(type(cfg), key) or key
    parts = key.split(".")
    target: Config = cfg
    for depth, part in enumerate(parts):
        names = [f.name for f in dataclasses.fields(target)]
        if depth and part not in names:  # an in-place rename inside a section
            part = parts[depth] = _renamed(type(target), part) or part
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
            if _is_section(tp):
                raise LinearizerError(f"config key '{key}' is a section; set '{key}.<name>=...'")
            object.__setattr__(target, part, coerce(raw, tp, key))


def describe(cfg_or_cls: Config | type[Config]) -> list[tuple[str, str, Any, str]]:
    """``[(dotted name, type, default/current value, help)]`` for every leaf option."""
    cls = cfg_or_cls if isinstance(cfg_or_cls, type) else type(cfg_or_cls)
    inst = cfg_or_cls if not isinstance(cfg_or_cls, type) else None
    hints = _hints(cls)
    rows = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        value = getattr(inst, f.name) if inst is not None else _default(f)
        if _is_section(tp):
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
        from .report import markdown_table

        table = [[f"`{name}`", tp, f"`{_show(value)}`", help_] for name, tp, value, help_ in rows]
        return markdown_table(["option", "type", "default", "meaning"], table) + "\n"
    width = max((len(r[0]) for r in rows), default=0)
    lines = [f"  {n:<{width}}  {h} [{t}, default: {_show(v)}]" for n, t, v, h in rows]
    return "\n".join(lines) + "\n"


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)
