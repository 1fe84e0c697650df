"""``linearizer invert RUN``: encode real images to noise through B and regenerate them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from ..data import save_grid
from ..flow.inversion import condition_number, psnr_per_image, round_trip, round_trip_note
from .common import read_image_batch
from .flowargs import add_sampler_options, invertible_spec, load_model, parse_indices, test_images


def run(args: argparse.Namespace) -> int:
    model, cfg, step, spec = load_model(args)
    dtype, inv = spec.torch_dtype, invertible_spec(spec)
    if args.images:
        x1 = read_image_batch(args.images, model.image_shape, "images file")
    else:
        x1 = test_images(cfg, parse_indices(args.test_index))
    x1 = x1.to(dtype)
    if args.dry_run:
        print(f"would invert {len(x1)} images with {args.run} (step {step}) into {args.out}")
        return 0
    with torch.no_grad():
        b = model.one_step_operator(inv, form=args.form)
        x0, back = round_trip(model, x1, b)
    psnr = psnr_per_image(x1, back)
    rows = torch.cat([x1, (x0 * 0.25 + 0.5), back]).float().clamp(0, 1)
    save_grid(rows, Path(args.out) / "inversion.png", nrow=len(x1), scale=2)
    print(f"B: {inv.describe()} (the run's sampler, last interval skipped so B inverts), "
          f"condition number {condition_number(b):.3g}")  # fmt: skip
    print("round-trip PSNR (dB): " + ", ".join(f"{p:.1f}" for p in psnr))
    note = round_trip_note(x1, back)
    if note:
        print(f"note: {note}", file=sys.stderr)
    print(f"rows: image, noise (x0/4 + 1/2), regenerated -> {Path(args.out) / 'inversion.png'}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("invert", help="invert real images to noise through B^-1")
    add_sampler_options(p)
    p.add_argument("--images", default=None, help=".npy/.npz/.png images [N, C, H, W] in [0, 1]")
    p.add_argument(
        "--test-index",
        default="0,1,2,3,4,5,6,7",
        help="indices into the dataset's test split (when --images is not given)",
    )
    p.set_defaults(func=run)
