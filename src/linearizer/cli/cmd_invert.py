"""``linearizer invert RUN``: encode real images to noise through B and regenerate them."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

from ..data import save_grid
from ..flow.inversion import condition_number, psnr_per_image, round_trip
from ..io import write_json
from .common import note_round_trip, read_image_batch
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
        parts, why = components_of(model, x1, inv)
        x0, back, conds = torch.empty_like(x1), torch.empty_like(x1), []
        for k in parts.unique().tolist():
            rows = parts == k
            part_spec = inv if k < 0 else inv.replace(component=int(k))
            b = model.one_step_operator(part_spec, form=args.form)
            x0[rows], back[rows] = round_trip(model, x1[rows], b)
            conds.append(condition_number(b))
    psnr = psnr_per_image(x1, back)
    rows = torch.cat([x1, (x0 * 0.25 + 0.5), back]).float().clamp(0, 1)
    save_grid(rows, Path(args.out) / "inversion.png", nrow=len(x1), scale=2)
    print(
        f"B: {inv.describe()} (the run's sampler, last interval skipped so B inverts), "
        f"condition number {max(conds):.3g}"
    )
    if why:
        print(f"components ({why}): " + ", ".join(map(str, parts.tolist())))
    print("round-trip PSNR (dB): " + ", ".join(f"{p:.1f}" for p in psnr))
    record = {"spec": inv.to_dict(), "components": parts.tolist(), "chosen_by": why}
    record["psnr_db"] = [p if math.isfinite(p) else None for p in psnr]
    write_json(Path(args.out) / "inversion.json", record)
    note_round_trip(x1, back)
    print(f"rows: image, noise (x0/4 + 1/2), regenerated -> {Path(args.out) / 'inversion.png'}")
    return 0


def components_of(model, x1: torch.Tensor, spec) -> tuple[torch.Tensor, str]:
    """Each image's component: the spec's, or for a mixture without one the most likely
    (:meth:`~linearizer.flow.mixture.MixtureFlow.likeliest`); ``-1`` for one generator."""
    if model.components == 1:
        return torch.full((len(x1),), -1), ""
    if spec.component is not None:
        return torch.full((len(x1),), spec.component), "given"
    return model.likeliest(x1, spec)[0], "most likely: weight, noise density and volume of B_k"


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
