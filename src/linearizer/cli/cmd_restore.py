"""``linearizer restore RUN``: solve an inverse problem with a trained projective model as the
prior; ``linearizer restore-report``: every method on every task (results.json, REPORT.md,
figures).

``restore`` degrades its input with ``--task`` (or reads observations with ``--observed``),
runs every method and writes a labelled strip (truth when known, observation, each method) and
``restore_<task>.npz`` (``truth``, ``observation``, ``x_<method>``, ``consistency_<method>``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import LinearizerError
from ..restore.spec import RestoreSpec
from .common import check_min, read_image_batch, write_npz
from .configargs import add_config_options, config_from_args
from .flowargs import add_spec_options, spec_from_args


def _load(spec: str, expect: str) -> tuple[Any, Any, int]:
    """``(model, config, step)`` of a run folder or ``pretrained:NAME`` of kind ``expect``."""
    from ..training.runs import load_run

    run = load_run(spec, expect="projective" if expect == "ign" else expect)
    kind = "projective" if run.kind in ("ours", "projective") else run.kind
    if kind != expect:
        raise LinearizerError(f"{spec} is a {run.kind} run, not {expect}")
    return run.model, run.config, run.step


def _prior(args: argparse.Namespace):
    """The models of ``args`` as a :class:`~linearizer.restore.evaluate.Prior`, the config of
    ours, and the facts to record."""
    from ..restore.evaluate import Prior

    ours, cfg, step = _load(args.run, "projective")
    facts: dict[str, Any] = {"ours": str(args.run), "ours_step": step}
    prior = Prior(ours)
    if args.ign:
        prior.ign, _, facts["ign_step"] = _load(args.ign, "ign")
        facts["ign"] = str(args.ign)
    if args.flow:
        prior.flow, fcfg, facts["flow_step"] = _load(args.flow, "flow")
        prior.flow_spec = spec_from_args(args, fcfg.sampler)
        facts["flow"] = str(args.flow)
        facts["flow_spec"] = prior.flow_spec.to_dict()
    return prior, cfg, facts


def _methods(text: str) -> tuple[str, ...]:
    from ..restore.evaluate import METHODS

    names = tuple(m.strip() for m in text.split(",") if m.strip())
    bad = [m for m in names if m not in METHODS]
    if bad or not names:
        raise LinearizerError(
            f"--methods: unknown {bad or text!r}; choose from {', '.join(METHODS)}"
        )
    return names


def run_restore(args: argparse.Namespace) -> int:
    from ..restore.degradations import make_degradation

    methods = _methods(args.methods)
    spec = restore_spec(args)
    check_min("--n", args.n, 1)
    if args.input != "test" and not Path(args.input).is_file():
        raise LinearizerError(f"--input must be 'test' or an existing .npy/.png file: {args.input}")
    make_degradation(args.task, (1, 8, 8))  # an unknown task fails before loading anything
    out = Path(args.out)
    if args.dry_run:
        print(
            f"run {args.run}; task {args.task}; input {args.input} (n <= {args.n}); "
            f"methods {', '.join(methods)}; output {out}"
        )
        return 0
    prior, cfg, _ = _prior(args)
    shape = tuple(prior.ours.image_shape)
    deg = make_degradation(args.task, shape, args.seed)
    from ..projective.task import load_images

    train = load_images(cfg, "train")[0]
    truth = None
    if args.input == "test":
        truth = load_images(cfg, "test")[0][: args.n]
    elif not args.observed:
        truth = read_image_batch(args.input, shape, "input file")[: args.n]
    if truth is not None:
        from ..restore.report import observe

        y = observe(deg, truth, args.seed)
    else:
        if args.task == "inpaint-random":
            raise LinearizerError(
                "inpaint-random observations need their masks; give clean "
                "images instead of --observed"
            )
        y = read_image_batch(args.input, deg.obs_shape(), "input file")[: args.n]
        deg.fit_shape(len(y))
    return _restore_and_save(args, prior, deg, y, truth, train, methods, spec, out)


def _restore_and_save(args, prior, deg, y, truth, train, methods, spec, out) -> int:
    import math

    from ..restore.algorithms import consistency, fit_induced_operator, observed_rank
    from ..restore.evaluate import restore
    from ..restore.figures import save_strip_figure
    from ..restore.report import LABELS, prepare_prior, shown_observation

    prepare_prior(prior, train)
    induced = None
    fit = train[-spec.fit_n :]
    dim = math.prod(deg.image_shape)
    if "induced-rns" in methods and deg.sigma == 0 and args.task != "inpaint-random":
        if len(fit) > dim:
            induced = fit_induced_operator(prior.encode, deg, fit, observed_rank(deg, dim))
        else:
            print(f"induced-rns skipped: A_H needs more than {dim} training images")
    print(f"{args.task}: {len(y)} observations; prior MSE {prior.prior_mse:.4f}")
    outs, secs, extras = restore(
        prior,
        deg,
        y,
        methods=methods,
        spec=spec,
        induced=induced,
        progress=lambda m: print(f"  {m} ..."),
    )
    arrays: dict[str, np.ndarray] = {"observation": y.numpy()}
    rows = {}
    if truth is not None:
        arrays["truth"] = truth.numpy()
        rows["truth"] = truth[:8]
    rows["observed"] = shown_observation(deg.select(slice(0, 8)), y[:8])
    for name, x in outs.items():
        c = consistency(deg, x, y)
        arrays[f"x_{name}"] = x.numpy()
        arrays[f"consistency_{name}"] = c.numpy()
        rows[LABELS[name]] = x[:8]
        line = f"{name:12s} |Hx-y|/|y| max {float(c.max()):.1e}  {1000 * secs[name]:.2f} ms/image"
        if truth is not None:
            from ..metrics import psnr

            line += f"  PSNR {float(psnr(x.clamp(0, 1), truth)):.2f} dB"
        print(line)
    if "history" in extras:
        hist = extras["history"]
        print(
            "alternating: consistency of P's iterate per iteration "
            + " ".join(f"{v:.3g}" for v in hist["consistency"])
        )
    save_strip_figure(rows, out / f"strip_{args.task}.png", title=args.task)
    write_npz(out / f"restore_{args.task}.npz", arrays)
    print(f"-> {out / f'strip_{args.task}.png'}, {out / f'restore_{args.task}.npz'}")
    return 0


def run_report(args: argparse.Namespace) -> int:
    from ..restore.degradations import TASKS, make_degradation
    from ..restore.report import restore_report

    tasks = TASKS if args.tasks == "all" else tuple(t.strip() for t in args.tasks.split(","))
    for t in tasks:
        make_degradation(t, (1, 8, 8))
    check_min("--n", args.n, 2)
    spec = restore_spec(args)
    if args.dry_run:
        print(
            f"would measure {', '.join(tasks)} on {args.n} test digits with {args.run} "
            f"(ign {args.ign}, flow {args.flow}) into {args.out}"
        )
        return 0
    check_min("--noise-n", args.noise_n, 0)
    args.noise_n = args.noise_n or None
    prior, cfg, facts = _prior(args)
    from ..projective.task import load_images

    truth, labels = load_images(cfg, "test")
    train = load_images(cfg, "train")[0]
    if len(truth) < args.n:
        raise LinearizerError(f"--n {args.n} exceeds the {len(truth)} test images")
    classifier = cfg.data.dataset == "mnist" and truth.shape[-1] == 32
    restore_report(
        prior,
        truth[: args.n],
        labels[: args.n],
        train,
        args.out,
        classifier=classifier,
        tasks=tasks,
        seed=args.seed,
        spec=spec,
        noise_n=args.noise_n,
        runs=facts,
    )
    print(Path(args.out) / "REPORT.md")
    return 0


def add_restore_options(p: argparse.ArgumentParser, names: tuple[str, ...]) -> None:
    """``--name`` for the :class:`~linearizer.restore.spec.RestoreSpec` fields ``names``, with
    the field's type, default and help."""
    add_config_options(p, RestoreSpec, only=names)


def restore_spec(args: argparse.Namespace) -> RestoreSpec:
    """The :class:`~linearizer.restore.spec.RestoreSpec` of the options ``args`` holds."""
    return config_from_args(RestoreSpec, args)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run folder (or pretrained:NAME) of `linearizer train projective`")
    p.add_argument("--ign", default=None, help="run folder of the IGN baseline (optional)")
    p.add_argument(
        "--flow",
        default=None,
        help="run folder of a one-step flow, for the noise-optimisation baseline",
    )
    add_spec_options(p)  # the --flow run's sampler
    p.add_argument("--out", required=True, help="output folder")
    add_restore_options(p, ("iters", "noise_steps", "map_steps", "fit_n"))
    p.add_argument("--seed", type=int, default=0, help="seed of masks and measurement noise")
    p.add_argument("--dry-run", action="store_true", help="check the arguments and exit")


def register(sub: argparse._SubParsersAction) -> None:
    from ..restore.degradations import TASKS
    from ..restore.evaluate import METHODS

    p = sub.add_parser(
        "restore", help="solve an inverse problem with a projective model as the prior"
    )
    _common(p)
    p.add_argument("--task", required=True, help=" | ".join(TASKS))
    p.add_argument(
        "--input",
        default="test",
        help="test (test digits) | FILE.npy ([N, H, W] or [N, 1, H, W]) | FILE.png",
    )
    p.add_argument(
        "--observed",
        action="store_true",
        help="the file holds observations y (not clean images to degrade)",
    )
    p.add_argument("--n", type=int, default=16, help="number of images (at most)")
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated methods")
    add_restore_options(p, ("noise_lam",))
    p.set_defaults(func=run_restore)

    r = sub.add_parser(
        "restore-report", help="every restoration method on every task: results.json, REPORT.md"
    )
    _common(r)
    r.add_argument("--tasks", default="all", help="comma-separated tasks, or all")
    r.add_argument("--n", type=int, default=1000, help="test digits per task")
    r.add_argument(
        "--noise-n",
        type=int,
        default=200,
        help="run the (slow) noise optimisation on the first NOISE_N digits only (0: all)",
    )
    r.set_defaults(func=run_report)
