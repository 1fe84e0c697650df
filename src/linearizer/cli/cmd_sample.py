"""``linearizer sample RUN``: images from noise, in one step (one matrix) or with the solver."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from ..data import save_grid
from ..errors import LinearizerError
from ..io import write_json
from .common import read_image_batch, write_npz
from .flowargs import add_sampler_options, guidance_note, load_run_model


def run(args: argparse.Namespace) -> int:
    if args.n < 1:
        raise LinearizerError("--n must be >= 1")
    if args.noise and getattr(args, "temperature", None) is not None:
        raise LinearizerError("--temperature scales drawn noise; a --noise file is used as given")
    loaded, model, spec, recommended = load_run_model(args)
    step = loaded.step
    dtype = spec.torch_dtype
    gen = torch.Generator().manual_seed(args.seed)
    if args.noise:
        x0 = read_image_batch(args.noise, model.image_shape, "noise file").to(dtype)
    else:
        x0 = spec.noise(args.n, model.image_shape, gen).to(dtype)
    labels = None
    if model.components > 1:  # one component per sample: the spec's, or drawn for the mixture
        model.operator(spec.replace(label=spec.label if spec.label is not None else 0))
        labels = (
            torch.full((len(x0),), spec.label)
            if spec.label is not None
            else model.draw_labels(len(x0), gen)
        )
    else:
        model.operator(spec)  # one line for --class or --guidance without classes
    if args.dry_run:
        print(
            f"would sample {len(x0)} images from {args.run} (step {step}) into {args.out}"
            f"{guidance_note(recommended)}"
        )
        return 0
    start = time.perf_counter()
    chunks = []
    with torch.no_grad():
        parts = (
            labels.split(args.batch) if labels is not None else [None] * len(x0.split(args.batch))
        )
        for part, part_labels in zip(x0.split(args.batch), parts, strict=True):
            chunks.append(
                model.sample(
                    part, spec, one_step=not args.multi_step, form=args.form, labels=part_labels
                )
            )
    x = torch.cat(chunks).float()
    seconds = time.perf_counter() - start
    out = Path(args.out)
    mode = "multi-step" if args.multi_step else "one-step"
    meta = {
        "run": str(args.run),
        "step": step,
        "spec": spec.to_dict(),
        "mode": mode,
        "noise": args.noise or f"seed {args.seed}",
        "n": len(x),
    }
    if recommended is not None:  # spec.guidance is that w
        meta["guidance"] = "the model's recommended guidance (--class without --guidance)"
    if labels is not None:
        meta["labels"] = labels.tolist()
    save_grid(x[:64].clamp(0, 1), out / "samples.png", nrow=8, scale=2)
    arrays = {"samples": x.numpy(), "meta": np.array(json.dumps(meta))}  # the spec as JSON
    if labels is not None:
        arrays["labels"] = np.asarray(meta["labels"], dtype=np.int64)
    write_npz(out / "samples.npz", arrays)
    write_json(out / "samples.json", meta)
    temp = "" if args.noise else f", temperature {spec.temperature:g}"
    print(
        f"{len(x)} {mode} samples ({spec.describe()}{temp}) in {seconds:.1f} s -> "
        f"{out / 'samples.npz'}, {out / 'samples.png'}{guidance_note(recommended)}"
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sample", help="generate images from a flow run")
    add_sampler_options(p, recommended=True)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--one-step", action="store_true", help="one matrix product (default)")
    mode.add_argument("--multi-step", action="store_true", help="run the solver step by step")
    p.add_argument("--n", type=int, default=64, help="number of samples")
    p.add_argument("--seed", type=int, default=0, help="seed of the noise")
    p.add_argument("--noise", default=None, help="start from this .npy of noise [N, C, H, W]")
    p.add_argument("--batch", type=int, default=256, help="samples per batch")
    p.set_defaults(func=run)
