"""``linearizer evaluate RUN``: FID/KID (LeNet), precision/recall and LeNet confidence of a flow
run's one-step samples, for four samplers, with reference rows; writes results.json,
results.md and one grid per sampler."""

from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
import time
from pathlib import Path

from ..errors import LinearizerError
from ..flow.evaluate import EvalOptions, default_rows, evaluate_flow, write_results
from ..training.weights import weights_label
from .common import parse_numbers, set_threads
from .configargs import add_config_options, config_from_args
from .flowargs import add_spec_options, load_spec_run


def run(args: argparse.Namespace) -> int:
    opts = config_from_args(EvalOptions, args)
    set_threads(args)
    run, spec = load_spec_run(args)
    model, cfg, step = run.model, run.config, run.step
    rows = default_rows(spec)
    out = Path(args.out) if args.out else Path(run.path) / "evaluation"
    if model.image_shape[0] != 1:
        raise LinearizerError(
            f"{args.run}: FID (LeNet) needs one-channel images, the run makes {model.image_shape}"
        )
    if model.classes:
        return _run_conditional(args, run, spec, opts, out)
    names = ", ".join(name for name, _ in rows)
    if args.dry_run:
        print(
            f"would evaluate {args.run} (step {step}, {cfg.data.dataset}): {opts.n} samples "
            f"each for {names} ({spec.describe()}) at temperature {spec.temperature:g} "
            f"-> {out}"
        )
        return 0
    from ..flow.task import load_images

    reference, _ = load_images(cfg, "test")
    train_images = load_images(cfg, "train")[0] if opts.references else None
    start = time.perf_counter()
    with _progress(opts.n * len(rows), not args.no_progress) as tick:
        results, samples = evaluate_flow(
            model, reference, rows, opts, train_images=train_images, progress=tick
        )
    cal = model.calibration
    fitted = None if cal is None else {"fitted_for": cal.sampler.to_dict(), "maps": cal.describe()}
    results.update(_record(args, run, spec, "Evaluation", start, calibration=fitted))
    write_results(results, samples, out)
    for row in results["rows"]:
        print(
            f"{row['name']:>14}: FID (LeNet) {row['fid_lenet']:8.2f}  FID (judge) "
            f"{row['fid_judge']:8.2f}  precision "
            f"{row['precision']:.3f}  recall {row['recall']:.3f}  confidence "
            f"{row['confidence']:.3f}  smallest class {row['min_class_share']:.1%}"
        )
    print(f"-> {out / 'results.json'}, {out / 'results.md'}, grids in {out}")
    return 0


def _run_conditional(args, run, spec, opts, out: Path) -> int:
    """A class-conditional run: the guidance sweep of the class mixture (flow.conditional)."""
    from ..flow.conditional import guidance_sweep, write_sweep
    from ..flow.task import load_images

    weights = _guidances(args.guidances)
    if spec.maps != "none":
        raise LinearizerError(
            "a class-conditional run samples the trained map alone: use --maps none"
        )
    if args.dry_run:
        print(
            f"would evaluate {args.run} (step {run.step}, class-conditional): {opts.n} "
            f"samples of the class mixture at guidance {', '.join(f'{w:g}' for w in weights)} "
            f"({spec.describe()}) -> {out}"
        )
        return 0
    reference, _ = load_images(run.config, "test")
    start = time.perf_counter()
    with _progress(opts.n * len(weights), not args.no_progress) as tick:
        results, grids = guidance_sweep(run.model, reference, spec, weights, opts, tick)
    results.update(_record(args, run, spec, "Class-conditional evaluation", start))
    write_sweep(results, grids, out)
    note = _record_guidance(args, run, spec, results, out)
    for row in results["rows"]:
        print(
            f"{row['name']:>8}: FID (LeNet) {row['fid_lenet']:8.2f}  FID (judge) "
            f"{row['fid_judge']:8.2f}  accuracy (LeNet) mean {row['lenet_accuracy_mean']:.3f} "
            f"min {row['lenet_accuracy_min']:.3f}  (judge) mean "
            f"{row['judge_accuracy_mean']:.3f} min {row['judge_accuracy_min']:.3f}"
        )
    print(f"-> {out / 'results.json'}, {out / 'results.md'}, {out / 'guidance.png'}")
    print(note)
    return 0


def _record_guidance(args, run, spec, results: dict, out: Path) -> str:
    """Write the sweep's recommended guidance to the run folder when the sweep measured the
    run's own sampler with its EMA weights (a shipped model keeps the one it ships with);
    the line that says what was done."""
    from ..flow.conditional import write_guidance

    w = results["recommended_guidance"]["w"]
    said = "none of the weights swept" if w is None else f"w = {w:g}"
    line = f"recommended guidance: {said} ({results['recommended_guidance']['rule']})"
    own = run.config.sampler.replace(component=None, guidance=0.0)
    if str(args.run).startswith("pretrained:"):
        return f"{line}; a shipped model keeps its own"
    if args.no_ema or spec.replace(component=None, guidance=0.0) != own:
        return f"{line}; not recorded: the sweep did not use the run's own sampler and weights"
    path = write_guidance(run.path, results, str(out / "results.json"))
    return f"{line} -> {path} (the default of --class without --guidance)"


def _record(args, run, spec, title: str, start: float, **extra) -> dict:
    """What results.json says besides the measurements: the run, the sampler, the command."""
    import torch

    weights = weights_label("model" if args.no_ema else "ema")
    return {
        "title": f"{title} of {args.run} (step {run.step}, {weights} weights, "
        f"temperature {spec.temperature:g})",
        "run": str(args.run),
        "step": run.step,
        "ema": not args.no_ema,
        "dataset": run.config.data.dataset,
        "spec": spec.to_dict(),
        **extra,
        "seconds": time.perf_counter() - start,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "command": "linearizer " + shlex.join(sys.argv[1:]),
    }


def _guidances(text: str) -> list[float]:
    bad = f"--guidances takes comma-separated numbers, got {text!r}"
    return parse_numbers(text, float, bad, "--guidances needs at least one value")


@contextlib.contextmanager
def _progress(total: int, enabled: bool):
    """A tqdm bar over the samples drawn (no bar without tqdm or with ``enabled=False``)."""
    try:
        from tqdm import tqdm
    except ImportError:
        enabled = False
    bar = tqdm(total=total, unit="img", desc="evaluate", file=sys.stderr) if enabled else None
    try:
        yield None if bar is None else bar.update
    finally:
        if bar is not None:
            bar.close()


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate",
        help="sample quality of a flow run: FID/KID (LeNet), precision/recall",
        description="Draw --n one-step samples from RUN (a flow run folder, a converted "
        "authors' run or pretrained:NAME) with the run's sampler (the spec options change it): "
        "the trained map alone, the authors' grid (T = 100, last interval skipped) and, with "
        "--maps calibration or transport, the post-hoc maps, each row beside the trained map "
        "alone; and measure them against the test images on our LeNet's features: FID (LeNet), "
        "KID (LeNet), improved precision/recall (k-NN balls), mean confidence and predicted-class "
        "histogram. Reference rows: training images and uniform noise. A class-conditional run "
        "gets the guidance sweep instead: per w, the class mixture's FID and every class's "
        "accuracy on the LeNet and the held-out judge.",
    )
    p.add_argument("run", help="flow run folder or pretrained:NAME")
    p.add_argument("--out", default=None, help="output folder (default: RUN/evaluation)")
    add_config_options(p, EvalOptions)
    add_spec_options(p)
    p.add_argument(
        "--guidances",
        default="0,0.5,1,2,4",
        help="a class-conditional run: the guidance weights w of the sweep",
    )
    p.add_argument("--no-ema", action="store_true", help="use the raw weights, not the EMA")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--dry-run", action="store_true", help="check the inputs, say what would run")
    p.set_defaults(func=run)
