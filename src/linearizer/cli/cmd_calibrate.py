"""``linearizer calibrate RUN``: fit a flow run's latent calibration (``flow.calibration``) on
its training images and store it in the run, so every sampler of the run applies it."""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict

from ..errors import LinearizerError
from ..flow.calibration import FitOptions, fit_calibration, save_calibration
from .common import check_min, set_threads
from .configargs import add_config_options
from .flowargs import add_spec_options, spec_from_args


def run(args: argparse.Namespace) -> int:
    from ..pretrained import PRETRAINED
    from ..training.runs import load_run
    from ..training.weights import weights_label

    if str(args.run).startswith(PRETRAINED):
        raise LinearizerError(
            f"{args.run} ships with its calibration; calibrate a run folder (or sample with "
            "--maps none)"
        )
    check_min("--n", args.n, 2)
    set_threads(args)
    loads = [load_run(args.run, use_ema=use_ema, expect="flow") for use_ema in (False, True)]
    sections = {r.weights: r for r in loads}  # one entry when the checkpoint has no EMA
    loaded = loads[-1]
    cfg, step = loaded.config, loaded.step
    spec = spec_from_args(args, cfg.sampler)
    transport = cfg.transport_steps if args.transport_steps is None else args.transport_steps
    check_min("--transport-steps", transport, 0)
    opts = FitOptions(sampler=spec, n=args.n, seed=args.seed, transport_steps=transport)
    names = " and ".join(weights_label(s) for s in sorted(sections))
    if args.dry_run:
        print(
            f"would calibrate {args.run} (step {step}; {names} weights) on {opts.n} samples "
            f"at temperature {spec.temperature:g}, {spec.method} T = {spec.steps}, "
            f"final {spec.final}" + (f", latent transport {transport} steps" if transport else "")
        )
        return 0
    from ..flow.task import load_images

    images, _ = load_images(cfg, "train")
    start = time.perf_counter()
    fits = {s: fit_calibration(r.model, images, opts) for s, r in sections.items()}
    path = save_calibration(loaded.path, fits, step, opts)
    for s, cal in sorted(fits.items()):
        lo, hi = cal.spectrum()
        print(
            f"{weights_label(s)} weights: {cal.basis.shape[1]} directions, "
            f"scales {lo:.3g} .. {hi:.3g}"
            + (", latent transport" if cal.transport is not None else "")
        )
    print(
        f"calibrated {args.run} (step {step}) in {time.perf_counter() - start:.0f} s "
        f"-> {path} ({', '.join(f'{k}={v}' for k, v in asdict(opts).items())})"
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate",
        help="fit a flow run's latent calibration on its training images",
        description="Fit the symmetric linear map K on the generator's output latents that gives "
        "the samples the covariance of the training images' latents in the sampler's range "
        "(the Gaussian optimal-transport map), for the raw and the EMA weights of RUN's newest "
        "checkpoint, and store it in RUN (calibration.safetensors). The sampler it is fitted "
        "for (the run's, changed by --steps, --method, --final, --temperature) then draws "
        "g_data^-1(K B g_noise(x0)) when asked with --maps calibration; a sampler of another "
        "schedule that asks for it is refused. With --transport-steps > 0 a latent transport "
        "follows K: a small invertible flow in the sampler's range, fitted by maximum "
        "likelihood to all training images' latents there, so the samples take the data's "
        "shape, not only its covariance (--maps transport draws "
        "g_data^-1(tau(K B g_noise(x0)))). Training with "
        "calibration_samples > 0 (the cpu preset) does this at the end.",
    )
    p.add_argument("run", help="a flow run folder")
    add_config_options(p, FitOptions, only=("n",))
    add_spec_options(p)
    p.add_argument(
        "--transport-steps",
        type=int,
        default=None,
        help="Adam steps of the latent transport fitted after K (flow.transport; "
        "0: none; default: the run's transport_steps)",
    )
    add_config_options(p, FitOptions, only=("seed",))
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--dry-run", action="store_true", help="check the inputs, say what would run")
    p.set_defaults(func=run)
