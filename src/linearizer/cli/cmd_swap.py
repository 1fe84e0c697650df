"""``linearizer swap RUN --to 3``: the exact class swap of a class-conditional flow run.

Images ``x`` of class ``c`` go to their noise under that class's generator,
``z0 = B_c^-1 g_data(x)``, and come back through another class's, ``g_data^-1(B_c' z0)``: the
same noise drawn as another digit. Swapping back to ``c`` returns ``x`` to rounding; the
command prints that round trip's PSNR.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from ..data import save_grid
from ..errors import LinearizerError
from .common import check_min, note_round_trip, parse_numbers, read_image_batch, write_npz
from .flowargs import add_sampler_options, guidance_note, load_run_model


def run(args: argparse.Namespace) -> int:
    from ..flow.inversion import psnr_per_image

    # --from and --to always name classes: the model's recommended guidance unless --guidance
    loaded, model, spec, recommended = load_run_model(args, classes_given=True)
    cfg, step = loaded.config, loaded.step
    if not model.classes:
        raise LinearizerError(
            f"{args.run} is not class-conditional: swap needs a run trained "
            "with --set conditional=true (or pretrained:mnist-cond)"
        )
    source = _class(args.source, model.classes, "--from")
    targets = _targets(args.to, model.classes)
    spec = spec.replace(component=source).invertible()
    if args.images:
        x = read_image_batch(args.images, model.image_shape, "images file")
    else:
        x = _test_digits(cfg, source, args.n)
    x = x.to(spec.torch_dtype)
    if args.dry_run:
        print(
            f"would swap {len(x)} images of class {source} to {', '.join(map(str, targets))} "
            f"with {args.run} (step {step}) into {args.out}"
        )
        return 0
    with torch.no_grad():
        swapped = [model.swap(x, spec, to) for to in targets]
        back = model.swap(swapped[0], spec.replace(component=targets[0]), source)
    psnr = psnr_per_image(x, back)
    out = Path(args.out)
    columns = torch.stack([x, *swapped], 1).flatten(0, 1).float().clamp(0, 1)
    save_grid(columns, out / "swap.png", nrow=1 + len(targets), scale=2)
    arrays = {
        "images": x.float().numpy(),
        "targets": np.asarray(targets, dtype=np.int64),
        "swapped": torch.stack(swapped, 1).float().numpy(),
    }
    write_npz(out / "swap.npz", arrays)
    print(
        f"B_c: {spec.describe()} (last interval skipped so B_c inverts{guidance_note(recommended)})"
    )
    print(
        f"swap {source} -> {targets[0]} -> {source}, round-trip PSNR (dB): "
        + ", ".join(f"{p:.1f}" for p in psnr)
    )
    note_round_trip(x, back)
    print(
        f"rows: one image each; columns: the image, then classes "
        f"{', '.join(map(str, targets))} -> {out / 'swap.png'}, {out / 'swap.npz'}"
    )
    return 0


def _class(value: int | None, classes: int, flag: str) -> int:
    if value is None or not 0 <= value < classes:
        raise LinearizerError(f"{flag} must be a class in 0..{classes - 1}, got {value}")
    return value


def _targets(text: str, classes: int) -> list[int]:
    if text == "all":
        return list(range(classes))
    bad = f"--to takes classes like 3 or 1,2,3 or all, got {text!r}"
    values = parse_numbers(text, int, bad, "--to needs at least one class")
    return [_class(v, classes, "--to") for v in values]


def _test_digits(cfg, label: int, n: int) -> torch.Tensor:
    from ..flow.task import load_images

    check_min("--n", n, 1)
    images, labels = load_images(cfg, "test")
    rows = (labels == label).nonzero().squeeze(1)[:n]
    if len(rows) == 0:
        raise LinearizerError(f"the test split has no images of class {label}")
    return images[rows]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "swap",
        help="exact class swap of a class-conditional flow run",
        description="Invert images of class --from through that class's one-step matrix and "
        "regenerate the same noise as each class in --to (linearizer.flow.model.OneStepFlow."
        "swap). Without --images, the first --n test images of class --from.",
    )
    add_sampler_options(p, recommended=True)
    p.add_argument("--from", dest="source", type=int, required=True, help="the images' class")
    p.add_argument("--to", required=True, help="target classes: 3, or 1,2,3, or all")
    p.add_argument("--images", default=None, help=".npy/.npz/.png images [N, C, H, W] in [0, 1]")
    p.add_argument("--n", type=int, default=8, help="test images (when --images is not given)")
    p.set_defaults(func=run)
