"""Shared pieces of the sub-commands: run-folder options, the training driver, option checks,
user image files and round-trip notes."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..errors import LinearizerError
from ..registry import Registry
from ..training.config import config_class, preset_names, render_options, resolve
from ..training.resume import resume_config
from ..training.trainer import train


def add_train_options(p: argparse.ArgumentParser, kind: str, default_preset: str) -> None:
    p.add_argument(
        "--preset",
        default=default_preset,
        help=f"named configuration ({', '.join(preset_names(kind))})",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config option (repeatable); see --list-options",
    )
    p.add_argument(
        "--out", default=None, help="run folder (default: runs/<kind>-<preset>-<timestamp>)"
    )
    p.add_argument(
        "--resume",
        default=None,
        metavar="RUN",
        help="continue RUN bit-for-bit from its newest usable checkpoint",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the resolved config and the run folder, then exit",
    )
    p.add_argument(
        "--list-options",
        action="store_true",
        help="print every config option with its default and exit",
    )


def run_training(kind: str, task: Any, args: argparse.Namespace) -> int:
    """Resolve the config (preset + overrides, or the resumed run's), then train or dry-run."""
    if args.list_options:
        print(render_options(config_class(kind)))
        return 0
    if args.resume:
        run = Path(args.resume)
        if not (run / "config.json").is_file():
            raise LinearizerError(f"cannot resume {run}: not a run folder (no config.json)")
        cfg = resume_config(run, config_class(kind), args.overrides)
    else:
        cfg = resolve(kind, args.preset, args.overrides)
        run = Path(args.out or f"runs/{kind}-{args.preset}-{time.strftime('%Y%m%d-%H%M%S')}")
    if args.dry_run:
        print(f"run folder: {run}{' (resume)' if args.resume else ''}")
        print(cfg.to_json())
        return 0
    result = train(task, cfg, run, resume=bool(args.resume))
    if os.environ.get("RANK", "0") != "0":  # under torchrun only rank 0 reports
        return 0
    print(
        f"{kind} run {run}: step {result.step}, {result.seconds:.0f} s, stopped at {result.stopped}"
    )
    return 0


def check_min(flag: str, value: int, low: int) -> None:
    """The one-line error a command gives for an option ``flag`` whose ``value`` is below
    ``low``."""
    if value < low:
        raise LinearizerError(f"{flag} must be >= {low}, got {value}")


def set_threads(args: argparse.Namespace) -> None:
    """``--threads N``: torch's CPU threads; 0 leaves torch's default."""
    if args.threads:
        torch.set_num_threads(args.threads)


# kind -> the register(kinds) that adds ``linearizer train KIND``
TRAIN_KINDS: Registry[Callable[[argparse._SubParsersAction], None]] = Registry(
    "train kind",
    {
        "flow": "linearizer.cli.train_flow:register",
        "projective": "linearizer.cli.train_projective:register",
        "style": "linearizer.cli.train_style:register",
    },
)


def parse_numbers(text: str, kind: Callable[[str], Any], bad: str, empty: str) -> list:
    """The comma-separated numbers of ``text`` (blank items skipped), each made by ``kind``;
    the one-line error ``bad`` when one does not parse, ``empty`` when there are none."""
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise LinearizerError(bad) from None
    if not values:
        raise LinearizerError(empty)
    return values


def read_image_batch(path: str | os.PathLike, shape: tuple[int, ...], what: str) -> torch.Tensor:
    """Images ``[N, *shape]`` (float32) from a user's file, every problem a one-line error.

    ``.png``/``.jpg``: one image, in [0, 1]. Anything else: a numeric ``.npy``, or a ``.npz``
    (member ``images``, else the first), holding ``[N, H, W]`` (one channel) or ``[N, C, H, W]``;
    ``uint8`` arrays are divided by 255. Pickled objects are refused, sizes checked first.
    """
    import numpy as np

    from ..io import read_array, read_image

    path = Path(path)
    if path.suffix.lower() in (".png", ".jpg", ".jpeg"):
        img = read_image(path, "RGB" if shape[0] == 3 else "L")
        array = np.asarray(img, dtype=np.uint8)
        array = array.transpose(2, 0, 1)[None] if array.ndim == 3 else array[None, None]
    else:
        array = read_array(path)
    if array.ndim == 3 and shape[0] == 1:
        array = array[:, None]
    if array.ndim != 4 or tuple(array.shape[1:]) != tuple(shape) or len(array) == 0:
        want = ", ".join(map(str, shape))
        raise LinearizerError(
            f"{what} {path} holds an array of shape {list(array.shape)}; "
            f"need images [N, {want}] with N >= 1"
        )
    x = torch.from_numpy(np.ascontiguousarray(array)).to(torch.float32)
    if array.dtype == np.uint8:
        x = x / 255.0
    if not bool(torch.isfinite(x).all()):
        raise LinearizerError(f"{what} {path} contains NaN or infinite values")
    return x


def note_round_trip(x: torch.Tensor, back: torch.Tensor, where: str = "") -> None:
    """The warning :func:`~linearizer.flow.inversion.round_trip_note` has on the round trip
    ``x`` -> ``back``, if any, as one line on stderr; ``where`` (with its separator) says of
    which images."""
    from ..flow.inversion import round_trip_note

    note = round_trip_note(x, back)
    if note:
        print(f"note: {where}{note}", file=sys.stderr)


def write_npz(path: str | os.PathLike, arrays: dict[str, Any]) -> Path:
    """``arrays`` as one ``.npz`` file, written atomically; numbers and strings, no pickles."""
    import numpy as np

    from ..io import atomic_write

    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)

    return atomic_write(path, write)
