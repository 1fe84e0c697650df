"""``linearizer evaluate RUN``: FID/KID (LeNet), precision/recall and LeNet confidence of a flow
run's one-step samples, for four samplers, with reference rows; writes results.json,
results.md and one grid per sampler."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

from ..errors import LinearizerError
from .flowargs import (
    add_calibration_option,
    apply_calibration_option,
    note_uncalibrated,
    warn_temperature,
)


def run(args: argparse.Namespace) -> int:
    import torch

    from ..flow.evaluate import EvalOptions, default_samplers, evaluate_flow, write_results
    from ..training.runs import load_run

    given = 1.0 if args.temperature is None else args.temperature  # checked before loading
    opts = EvalOptions(n=args.n, seed=args.seed, batch=args.batch, k=args.k,
                       kid_subsets=args.kid_subsets, references=not args.no_references,
                       temperature=given)  # fmt: skip
    opts.check()
    samplers = default_samplers(args.steps, args.long_steps, args.method)
    for s in samplers:
        if s.steps < 2:
            raise LinearizerError(f"--steps and --long-steps must be >= 2, got {s.steps}")
    if args.threads:
        torch.set_num_threads(args.threads)
    run = load_run(args.run, use_ema=not args.no_ema, expect="flow")
    model, cfg, step, folder = run.model, run.config, run.step, Path(run.path)
    note_uncalibrated(run, args)
    apply_calibration_option(model, args)
    calibrated = _calibration_words(model.calibration)
    if args.temperature is None:
        opts = replace(opts, temperature=cfg.sample_temperature)
    tau = opts.temperature
    warn_temperature(model, tau)
    out = Path(args.out) if args.out else folder / "evaluation"
    if model.image_shape[0] != 1:
        raise LinearizerError(
            f"{args.run}: FID (LeNet) needs one-channel images, the run makes {model.image_shape}"
        )
    names = ", ".join(s.name for s in samplers)
    if args.dry_run:
        print(f"would evaluate {args.run} (step {step}, {cfg.data.dataset}): {opts.n} samples each "
              f"for {names} at temperature {tau:g}, {calibrated} -> {out}")  # fmt: skip
        return 0
    from ..flow.task import load_images

    reference, _ = load_images(cfg, "test")
    train_images = load_images(cfg, "train")[0] if opts.references else None
    start = time.perf_counter()
    with _progress(opts.n * len(samplers), not args.no_progress) as tick:
        results, samples = evaluate_flow(model, reference, samplers, opts,
                                         train_images=train_images, progress=tick)  # fmt: skip
    results.update({
        "title": f"Evaluation of {args.run} (step {step}, {'raw' if args.no_ema else 'EMA'} "
                 f"weights, temperature {tau:g}, {calibrated})",
        "run": str(args.run), "step": step, "ema": not args.no_ema, "dataset": cfg.data.dataset,
        "calibration": None if model.calibration is None else {
            "steps": model.calibration.steps, "method": model.calibration.method,
            "final": model.calibration.final},
        "seconds": time.perf_counter() - start, "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "command": "linearizer " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
    })  # fmt: skip
    write_results(results, samples, out)
    for row in results["rows"]:
        print(f"{row['name']:>14}: FID (LeNet) {row['fid_lenet']:8.2f}  precision "
              f"{row['precision']:.3f}  recall {row['recall']:.3f}  confidence "
              f"{row['confidence']:.3f}  smallest class {row['min_class_share']:.1%}")  # fmt: skip
    print(f"-> {out / 'results.json'}, {out / 'results.md'}, grids in {out}")
    return 0


def _calibration_words(cal) -> str:
    if cal is None:
        return "no latent calibration"
    return f"{cal.describe()} for {cal.method} T = {cal.steps}, final {cal.final}"


class _progress:
    """A tqdm bar over the samples drawn (no bar without tqdm or with ``enabled=False``)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.bar = None
        if enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, unit="img", desc="evaluate", file=sys.stderr)
            except ImportError:
                self.bar = None

    def __enter__(self):
        return self.bar.update if self.bar is not None else None

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.close()


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate", help="sample quality of a flow run: FID/KID (LeNet), precision/recall",
        description="Draw --n one-step samples from RUN (a flow run folder, a converted "
        "authors' run or pretrained:NAME) for four samplers (T = --steps and T = --long-steps, "
        "each with the last interval skipped and replaced by the jump to the prediction) and "
        "measure them against the test images on our LeNet's features: FID (LeNet), KID (LeNet), "
        "improved precision/recall (k-NN balls), mean confidence and predicted-class "
        "histogram. Reference rows: training images and uniform noise.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )  # fmt: skip
    p.add_argument("run", help="flow run folder or pretrained:NAME")
    p.add_argument("--out", default=None, help="output folder (default: RUN/evaluation)")
    p.add_argument("--n", type=int, default=10_000, help="samples per sampler")
    p.add_argument("--steps", type=int, default=100, help="T of the main samplers")
    p.add_argument("--long-steps", type=int, default=1000, help="T of the long sampler")
    p.add_argument("--method", default="euler", choices=["euler", "rk4", "rk4-authors"],
                   help="solver collapsed into the one-step matrix")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="seed of the noise (same for all samplers)")
    p.add_argument("--temperature", type=float, default=None,
                   help="std tau of the noise, x0 ~ N(0, tau^2 I) (default: the run's "
                   "sample_temperature)")  # fmt: skip
    p.add_argument("--k", type=int, default=3, help="nearest neighbours of precision/recall")
    p.add_argument("--kid-subsets", type=int, default=50, help="random subsets of KID")
    p.add_argument("--batch", type=int, default=1000, help="images per network pass")
    p.add_argument("--no-references", action="store_true",
                   help="skip the training-images and uniform-noise rows")  # fmt: skip
    p.add_argument("--no-ema", action="store_true", help="use the raw weights, not the EMA")
    add_calibration_option(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--dry-run", action="store_true", help="check the inputs, say what would run")
    p.set_defaults(func=run)
