"""``linearizer sample RUN``: images from noise, in one step (one matrix) or with the solver."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ..data import save_grid
from ..errors import LinearizerError
from ..flow.model import OneStepFlow
from ..flow.spec import SamplerSpec
from ..io import write_json
from .common import read_image_batch, write_npz
from .flowargs import add_sampler_options, guidance_note, load_run_model

# A generator that draws more than dim / BUILD_ROWS samples builds its B: per step a collapse
# costs about 4 r D^2 flops and the solver 4 r D per sample, equal at D samples; a quarter of
# that already pays, because the built B stays cached for every later call.
BUILD_ROWS = 4


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
        model.operator(spec.replace(component=spec.component if spec.component is not None else 0))
        labels = (
            torch.full((len(x0),), spec.component)
            if spec.component is not None
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
    one_step = True if args.one_step else False if args.multi_step else None
    mode = "one-step" if one_step else "multi-step"
    if one_step is None:
        mode = route(model, spec, labels, len(x0), args.form)
    chunks = []
    with torch.no_grad():
        parts = (
            labels.split(args.batch) if labels is not None else [None] * len(x0.split(args.batch))
        )
        for part, part_labels in zip(x0.split(args.batch), parts, strict=True):
            chunks.append(
                model.sample(part, spec, one_step=one_step, form=args.form, labels=part_labels)
            )
    x = torch.cat(chunks).float()
    seconds = time.perf_counter() - start
    out = Path(args.out)
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
        f"{len(x)} samples ({spec.describe()}{temp}), {mode}, in {seconds:.1f} s -> "
        f"{out / 'samples.npz'}, {out / 'samples.png'}{guidance_note(recommended)}"
    )
    return 0


def route(model: OneStepFlow, spec: SamplerSpec, labels: Tensor | None, n: int, form: str) -> str:
    """Builds B for each generator that draws more than ``dim / BUILD_ROWS`` of the samples
    (there a collapse costs less than the solver), so :meth:`sample` with ``one_step=None``
    takes B where it is at hand and the solver elsewhere; says which ran."""
    if labels is None:
        groups = [(spec, n)]
    else:
        ks, counts = labels.unique(return_counts=True)
        groups = [(spec.replace(component=int(k)), int(c)) for k, c in zip(ks, counts)]
    at_hand = 0
    for one, count in groups:
        if BUILD_ROWS * count > model.dim:
            model.one_step_operator(one, form=form)
        at_hand += model.is_cached(one, form)
    if at_hand == len(groups):
        return "one-step"
    solver = "multi-step: no B at hand, the same map to rounding (--one-step builds and keeps it)"
    if at_hand == 0:
        return solver
    return f"one-step for {at_hand} of {len(groups)} generators, {solver} for the rest"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sample", help="generate images from a flow run")
    add_sampler_options(p, recommended=True)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--one-step",
        action="store_true",
        help="one matrix product, B built and cached first if needed (default: B where it is "
        "cached or pays for its build, the solver for generators that draw few samples)",
    )
    mode.add_argument("--multi-step", action="store_true", help="run the solver step by step")
    p.add_argument("--n", type=int, default=64, help="number of samples")
    p.add_argument("--seed", type=int, default=0, help="seed of the noise")
    p.add_argument("--noise", default=None, help="start from this .npy of noise [N, C, H, W]")
    p.add_argument("--batch", type=int, default=256, help="samples per batch")
    p.set_defaults(func=run)
