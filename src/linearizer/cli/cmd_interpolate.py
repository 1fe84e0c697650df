"""``linearizer interpolate RUN``: walk between two real images in noise or induced space."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from ..data import save_grid
from ..errors import LinearizerError
from ..flow.inversion import interpolate
from .common import note_round_trip
from .flowargs import add_sampler_options, invertible_spec, load_model, parse_indices, test_images


def run(args: argparse.Namespace) -> int:
    pair = parse_indices(args.pair)
    if len(pair) != 2:
        raise LinearizerError(f"--pair needs two test indices, got {args.pair!r}")
    if args.n < 2:
        raise LinearizerError("--n must be >= 2")
    model, cfg, step, spec = load_model(args)
    xa, xb = test_images(cfg, pair).to(spec.torch_dtype).split(1)
    if args.dry_run:
        print(f"would interpolate test images {pair} with {args.run} into {args.out}")
        return 0
    spaces = ["noise", "latent"] if args.space == "both" else [args.space]
    with torch.no_grad():
        b = model.one_step_operator(invertible_spec(spec), form=args.form)
        rows = [interpolate(model, xa, xb, b, args.n, s) for s in spaces]
    path = Path(args.out) / "interpolation.png"
    save_grid(torch.cat(rows).float().clamp(0, 1), path, nrow=args.n, scale=2)
    print(f"rows: {', '.join(spaces)} interpolation, {args.n} frames -> {path}")
    for space, row in zip(spaces, rows, strict=True):  # a path's ends are round trips
        where = f"{space} path, image 0 = test {pair[0]}, 1 = test {pair[1]}: "
        note_round_trip(torch.cat([xa, xb]), torch.cat([row[:1], row[-1:]]), where)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("interpolate", help="interpolate between two real images")
    add_sampler_options(p)
    p.add_argument("--pair", default="0,1", help="two indices into the test split")
    p.add_argument("--n", type=int, default=10, help="frames, endpoints included")
    p.add_argument(
        "--space",
        default="both",
        choices=["noise", "latent", "both"],
        help="noise: linear in pixel noise (authors); latent: the induced space",
    )
    p.set_defaults(func=run)
