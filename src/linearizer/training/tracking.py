"""Experiment tracking: ``RUN/metrics.jsonl`` always, trackio when asked (``--tracker trackio``).

Every record is one JSON line with a ``step``: scalar metrics (losses, learning rate,
throughput), ``{"images": {name: path}}`` for figures saved in the run folder, and
``{"summary": {...}}`` for final results. On resume, :func:`truncate_metrics` drops the records
after the resumed step (and a line torn by a crash), so the file reads as one clean run.

trackio is optional (``pip install 'linearizer[tracking]'``) and imported only when asked for;
it stores runs locally (SQLite under ``~/.cache/huggingface/trackio``) and needs no network.

>>> import tempfile, json, pathlib
>>> run = pathlib.Path(tempfile.mkdtemp())
>>> tracker = make_tracker("jsonl", run, config={"lr": 1e-3})
>>> tracker.log(10, {"loss": 0.5})
>>> tracker.close()
>>> json.loads((run / "metrics.jsonl").read_text())
{'step': 10, 'loss': 0.5}
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..errors import LinearizerError
from ..io import write_text

METRICS_FILE = "metrics.jsonl"


def _number(value: Any) -> Any:
    """Python scalars from 0-d tensors / numpy values; other things pass through."""
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        return value.item()
    return value


class Tracker:
    """Interface: scalar metrics, image paths, a final summary."""

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        pass

    def log_images(self, step: int, images: dict[str, str | Path]) -> None:
        pass

    def log_summary(self, step: int, results: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


class JsonlTracker(Tracker):
    """Appends one JSON object per line to ``RUN/metrics.jsonl`` (flushed after each line)."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / METRICS_FILE
        try:
            self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (kept open)
        except OSError as e:
            raise LinearizerError(f"cannot write {self.path}: {e.strerror or e}") from None

    def _write(self, record: dict[str, Any]) -> None:
        try:
            self._fh.write(json.dumps(record) + "\n")
            self._fh.flush()
        except OSError as e:
            raise LinearizerError(f"cannot write {self.path}: {e.strerror or e}") from None

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        self._write({"step": int(step), **{k: _number(v) for k, v in metrics.items()}})

    def log_images(self, step: int, images: dict[str, str | Path]) -> None:
        self._write({"step": int(step), "images": {k: str(v) for k, v in images.items()}})

    def log_summary(self, step: int, results: dict[str, Any]) -> None:
        self._write({"step": int(step), "summary": results})

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()


class TrackioTracker(JsonlTracker):
    """``metrics.jsonl``, with scalars, images and the summary mirrored to a local trackio
    project (named after the run folder)."""

    def __init__(self, run_dir: str | Path, project: str, config: dict[str, Any] | None) -> None:
        super().__init__(run_dir)
        try:
            try:
                import trackio
            except ImportError:
                raise LinearizerError(
                    "--tracker trackio needs the optional trackio package: "
                    "pip install 'linearizer[tracking]' (or use --tracker jsonl)"
                ) from None
            self._trackio = trackio
            name = Path(run_dir).resolve().name
            trackio.init(project=project, name=name, config=config or {}, resume="allow")
        except BaseException:
            super().close()
            raise

    def _mirror(self, step: int, metrics: dict[str, Any]) -> None:
        scalars = {k: _number(v) for k, v in metrics.items()}
        scalars = {k: v for k, v in scalars.items() if isinstance(v, (int, float))}
        self._trackio.log(scalars, step=int(step))

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        super().log(step, metrics)
        self._mirror(step, metrics)

    def log_images(self, step: int, images: dict[str, str | Path]) -> None:
        super().log_images(step, images)
        media = {k: self._trackio.Image(str(v), caption=k) for k, v in images.items()}
        self._trackio.log(media, step=int(step))

    def log_summary(self, step: int, results: dict[str, Any]) -> None:
        super().log_summary(step, results)
        self._mirror(step, {f"final/{k}": _number(v) for k, v in _flatten(results).items()})

    def close(self) -> None:
        super().close()
        self._trackio.finish()


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}/"))
        else:
            out[f"{prefix}{k}"] = v
    return out


def make_tracker(
    kind: str,
    run_dir: str | Path,
    config: dict[str, Any] | None = None,
    project: str = "linearizer",
    is_main: bool = True,
) -> Tracker:
    """``jsonl`` and ``none``: metrics.jsonl only; ``trackio``: metrics.jsonl + trackio.

    Processes other than rank 0 get a tracker that writes nothing.
    """
    if kind not in ("jsonl", "trackio", "none"):
        raise LinearizerError(f"unknown tracker '{kind}'; choose jsonl, trackio or none")
    if not is_main:
        return Tracker()
    if kind == "trackio":
        return TrackioTracker(run_dir, project, config)
    return JsonlTracker(run_dir)


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """All well-formed records of ``RUN/metrics.jsonl`` (a torn last line is skipped)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def truncate_metrics(run_dir: str | Path, step: int) -> int:
    """Keep records with ``step <= step``, less a summary at ``step`` (that run's end, not this
    one's); atomic rewrite; returns how many records were dropped."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return 0
    lines = path.read_text(encoding="utf-8").splitlines()
    kept = []
    for record in read_metrics(run_dir):
        s = record.get("step")
        if not isinstance(s, (int, float)) or math.isnan(s) or s > step:
            continue
        if s == step and "summary" in record:  # an interim run's final record
            continue
        kept.append(json.dumps(record))
    write_text(path, "".join(line + "\n" for line in kept))
    return len(lines) - len(kept)
