"""Options shared by the commands that use a trained flow run (sample, invert, interpolate)."""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

import numpy as np
import torch

from ..errors import LinearizerError
from .common import parse_dtype


def add_sampler_options(p: argparse.ArgumentParser, steps: int = 100) -> None:
    p.add_argument("run", help="a flow run folder (trained, or converted from the authors')")
    p.add_argument("--steps", type=int, default=steps, help="T: time grid of the sampler")
    p.add_argument(
        "--method",
        default="euler",
        choices=["euler", "rk4", "rk4-authors"],
        help="solver (rk4-authors: the authors' first-order matrix)",
    )
    p.add_argument(
        "--final",
        default="skip",
        choices=["skip", "predict"],
        help="last interval [1-1/T, 1]: skip it (authors) or jump to A's prediction",
    )
    p.add_argument(
        "--dtype",
        default="float64",
        choices=["float32", "float64"],
        help="precision of B and of the latent solver",
    )
    p.add_argument(
        "--form",
        default="auto",
        choices=["auto", "dense", "factored"],
        help="one-step matrix B: dense D x D, factored c I + U V^T, or auto (factored when "
        "D >= 4096 and U, V are at most half of D x D)",
    )
    p.add_argument("--no-ema", action="store_true", help="use the raw weights, not the EMA")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--dry-run", action="store_true", help="check the inputs and exit")


def load_model(args: argparse.Namespace):
    from ..training.runs import load_run

    run = load_run(args.run, use_ema=not args.no_ema, expect="flow")
    model, cfg, step = run.model, run.config, run.step
    dtype = parse_dtype(args.dtype)
    if dtype == torch.float64:  # end to end: networks too, so nothing rounds to float32
        model = copy.deepcopy(model).double()
    return model, cfg, step, dtype


def read_images(path: str, shape: tuple[int, ...]) -> torch.Tensor:
    """Images ``[N, *shape]`` in [0, 1] from .npy/.npz (array 'images' or the first) or a PNG."""
    file = Path(path)
    if not file.is_file():
        raise LinearizerError(f"no such file: {file}")
    try:
        if file.suffix == ".png":
            from PIL import Image

            mode = "RGB" if shape[0] == 3 else "L"
            arr = np.asarray(Image.open(file).convert(mode), dtype=np.float32) / 255.0
            arr = arr.transpose(2, 0, 1)[None] if arr.ndim == 3 else arr[None, None]
        elif file.suffix == ".npz":
            with np.load(file, allow_pickle=False) as z:
                arr = z["images"] if "images" in z else z[z.files[0]]
        else:
            arr = np.load(file, allow_pickle=False)
    except (OSError, ValueError, KeyError) as e:
        raise LinearizerError(f"cannot read images from {file}: {e}") from None
    x = torch.as_tensor(np.asarray(arr, dtype=np.float32))
    if x.dim() == 3:
        x = x[:, None]
    if tuple(x.shape[1:]) != tuple(shape):
        raise LinearizerError(
            f"{file} holds images of shape {list(x.shape[1:])}, need {list(shape)}"
        )
    return x


def test_images(cfg, indices: list[int]) -> torch.Tensor:
    from ..flow.task import load_images

    images, _ = load_images(cfg, "test")
    bad = [i for i in indices if not 0 <= i < len(images)]
    if bad:
        raise LinearizerError(f"test indices out of range 0..{len(images) - 1}: {bad}")
    return images[indices]


def parse_indices(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise LinearizerError(f"indices must be comma-separated integers, got {text!r}") from None
