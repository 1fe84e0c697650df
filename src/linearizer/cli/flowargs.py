"""Options shared by the commands that use a trained flow run (sample, invert, interpolate)."""

from __future__ import annotations

import argparse
import copy
import sys

import torch

from ..errors import LinearizerError
from ..flow.solvers import METHODS
from .common import parse_dtype

# On every trained model we evaluated (docs/flow/ablation.md; all but one row whose samples had
# collapsed), T = 1000 gave a lower FID (LeNet) than the authors' T = 100, and the jump to the
# prediction on the last interval a lower one (or within 1); a sample costs the same for any T.
# Commands that invert B keep "skip", which leaves B invertible.
DEFAULT_STEPS = 1000


def add_sampler_options(
    p: argparse.ArgumentParser, steps: int = DEFAULT_STEPS, final: str = "skip"
) -> None:
    p.add_argument("run", help="a flow run folder (trained, or converted from the authors')")
    p.add_argument(
        "--steps", type=int, default=steps, help="T: time grid of the sampler (authors: 100)"
    )
    p.add_argument(
        "--method",
        default="euler",
        choices=METHODS,
        help="solver (rk4-authors: the authors' first-order matrix)",
    )
    p.add_argument(
        "--final",
        default=final,
        choices=["skip", "predict"],
        help="last interval [1-1/T, 1]: skip it (authors) or jump to A's prediction",
    )
    p.add_argument(
        "--dtype",
        default="float64",
        choices=["float32", "float64"],
        help="precision of B and of the latent solver",
    )
    p.add_argument(
        "--form",
        default="auto",
        choices=["auto", "dense", "factored"],
        help="one-step matrix B: dense D x D, factored c I + U V^T, or auto (factored when "
        "D >= 4096 and U, V are at most half of D x D)",
    )
    p.add_argument("--no-ema", action="store_true", help="use the raw weights, not the EMA")
    add_calibration_option(p)
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--dry-run", action="store_true", help="check the inputs and exit")


def add_calibration_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-calibration", action="store_true",
                   help="sample the trained map without the run's latent calibration (linearizer "
                   "calibrate)")  # fmt: skip


def apply_calibration_option(model, args: argparse.Namespace) -> None:
    """``--no-calibration``: drop the latent calibration the run attached to ``model``."""
    if args.no_calibration:
        model.calibration = None


def note_uncalibrated(run, args: argparse.Namespace) -> None:
    """One line on stderr when the run holds a latent calibration, but not for the weights
    loaded (training fits the EMA ones only): these sample without it."""
    from ..flow.calibration import calibration_info

    if args.no_calibration or run.model.calibration is not None:
        return
    info = calibration_info(run.path)
    names = {"ema": "EMA", "model": "raw"}
    if info and info.get("step") == run.step and run.weights not in info.get("sections", []):
        print(f"note: the run's latent calibration was fitted for its "
              f"{' and '.join(names.get(s, s) for s in info['sections'])} weights, not the "
              f"{names.get(run.weights, run.weights)} ones; these sample without it (linearizer "
              f"calibrate RUN fits both)", file=sys.stderr)  # fmt: skip


def warn_temperature(model, tau: float) -> None:
    """One line on stderr when the latent calibration was fitted on noise of another
    temperature than the one sampled: it then matches other latents than it was fitted to."""
    cal = model.calibration
    if cal is not None and cal.temperature is not None and abs(cal.temperature - tau) > 1e-9:
        print(f"note: the latent calibration was fitted at temperature {cal.temperature:g}; "
              f"sampling at {tau:g} (linearizer calibrate RUN --temperature {tau:g} refits it)",
              file=sys.stderr)  # fmt: skip


def load_model(args: argparse.Namespace):
    from ..training.runs import load_run

    run = load_run(args.run, use_ema=not args.no_ema, expect="flow")
    model, cfg, step = run.model, run.config, run.step
    note_uncalibrated(run, args)
    apply_calibration_option(model, args)
    dtype = parse_dtype(args.dtype)
    if dtype == torch.float64:  # end to end: networks too, so nothing rounds to float32
        model = copy.deepcopy(model).double()
    return model, cfg, step, dtype


def read_images(path: str, shape: tuple[int, ...]) -> torch.Tensor:
    """Images ``[N, *shape]`` in [0, 1] from .npy/.npz (array 'images' or the first) or a PNG."""
    from .common import read_image_batch

    return read_image_batch(path, shape, "images file")


def test_images(cfg, indices: list[int]) -> torch.Tensor:
    from ..flow.task import load_images

    images, _ = load_images(cfg, "test")
    bad = [i for i in indices if not 0 <= i < len(images)]
    if bad:
        raise LinearizerError(f"test indices out of range 0..{len(images) - 1}: {bad}")
    return images[indices]


def parse_indices(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise LinearizerError(f"indices must be comma-separated integers, got {text!r}") from None
