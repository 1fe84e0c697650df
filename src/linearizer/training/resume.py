"""What resuming a run checks: the config it was started with, and which settings may change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import LinearizerError
from ..io import read_json
from .config import Config, TrainConfig, apply_overrides


def resume_config(run_dir: str | Path, cls: type[Config], overrides: list[str] | None = None):
    """The config a run was started with (``RUN/config.json``), with ``overrides`` applied."""
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        raise LinearizerError(f"{run_dir} is not a run folder (no config.json)")
    return apply_overrides(cls.from_dict(read_json(path)), overrides)


def check_resume_changes(saved: dict[str, Any], cfg: TrainConfig) -> None:
    """Refuse a resume that changes a setting outside ``cfg.RESUME_MUTABLE`` (one line)."""
    # Compare leaf by leaf, through from_dict, so a run folder with old flat keys compares too.
    now, mutable = cfg.flat(), cfg.RESUME_MUTABLE
    saved = type(cfg).from_dict(saved).flat()
    changed = [k for k in now if k in saved and saved[k] != now[k] and k not in mutable]
    if changed:
        k = changed[0]
        raise LinearizerError(
            f"cannot change '{k}' when resuming (run has {saved[k]!r}, asked {now[k]!r}); "
            f"only {', '.join(sorted(mutable))} may change"
        )
