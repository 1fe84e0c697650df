"""Whether a run's one-step samples spread like the data: the data latents' mean against their
spread, and the spread of each component's samples against the test images'.

    python benchmarks/latent_spread.py RUN [RUN ...] [--n 1000] [--samples 256] [--out FILE]

A component whose samples spread far less than the test images draws nearly one image (its
mean) for every noise. The script encodes ``--n`` test images with the data side (the norm of
their mean, and the median distance of a latent from that mean) and draws ``--samples`` samples
of each component with the run's sampler by the multi-step solver (B's images to float64
rounding); spreads are median distances from the mean in pixels (images in [0, 1]), float64
throughout. One JSON row per run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch
from torch import Tensor

from linearizer.data.config import load_images
from linearizer.errors import LinearizerError
from linearizer.flow.model import DATA
from linearizer.io import write_text
from linearizer.training.runs import load_run


def spread(rows: Tensor) -> float:
    """The median distance of the rows from their mean."""
    return float((rows - rows.mean(0)).norm(dim=1).median())


def measure(path: str, n: int, samples: int) -> dict:
    run = load_run(path, expect="flow")
    model, cfg = run.model.double(), run.config
    x = load_images(cfg.data, cfg.network.img_size, "test")[0][:n].double()
    spec = cfg.sampler.replace(component=None)
    ks = range(int(getattr(model, "components", 1)))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        z = model.encode(x, DATA).reshape(len(x), -1)
        per = []
        for k in ks:
            x0 = spec.noise(samples, model.image_shape, gen).double()
            part = spec.replace(component=k) if len(ks) > 1 else spec
            per.append(spread(model.sample(x0, part, one_step=False).reshape(samples, -1)))
    return {
        "run": path,
        "step": run.step,
        "test_images": len(x),
        "samples_per_component": samples,
        "data_latent_mean_norm": float(z.mean(0).norm()),
        "data_latent_spread": spread(z),
        "test_image_spread": spread(x.reshape(len(x), -1)),
        "sample_spread_per_component": per,
        "sample_spread_median": statistics.median(per),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="flow run folders")
    parser.add_argument("--n", type=int, default=1000, help="test images encoded")
    parser.add_argument("--samples", type=int, default=256, help="samples per component")
    parser.add_argument("--out", default="", help="JSON file to write (default: print only)")
    args = parser.parse_args()
    try:
        rows = [measure(run, args.n, args.samples) for run in args.runs]
        text = json.dumps({"torch": torch.__version__, "rows": rows}, indent=2)
        print(text)
        if args.out:
            write_text(args.out, text + "\n")
    except LinearizerError as err:
        print(f"latent_spread.py: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
