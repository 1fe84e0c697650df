"""How far a negative scalar takes an odd noise side with a mean (``network.odd_noise=true
network.noise_mean=true``) from where it was trained.

    python benchmarks/noise_mean.py RUN [RUN ...] [--n 512] [--seed 0] [--out FILE]

With ``g_noise(x) = h(x) + mu`` and ``h`` odd, ``a g_noise(x)`` reaches ``h^-1`` at
``a h(x) + (a - 1) mu``: the mirrored point ``a h(x)``, which training covers for either sign
of ``a``, moved by ``(a - 1) mu``. The script measures ``|mu|`` against the noise latents
``h(x0)`` of ``--n`` noise images (the offset is at most ``3 |mu|`` for ``a`` in [-2, 2]), and
writes one JSON row per run.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from linearizer.errors import LinearizerError
from linearizer.flow.model import NOISE
from linearizer.flow.task import load_flow_run
from linearizer.io import write_text


def measure(run: str, n: int, seed: int) -> dict:
    model = load_flow_run(run)[0]
    mu = getattr(model.net, "latent_mean", None)
    if mu is None:
        raise LinearizerError(f"{run}: the run has no noise mean (network.noise_mean=true)")
    mu = mu.detach().double().reshape(-1)
    x0 = torch.randn(n, *model.image_shape, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        h = model.encode(x0, NOISE).double().reshape(n, -1) - mu
    norms = h.norm(dim=1)
    return {
        "run": run,
        "n": n,
        "mu_norm": float(mu.norm()),
        "mu_rms": float(mu.square().mean().sqrt()),
        "h_norm_median": float(norms.median()),
        "h_coordinate_std_median": float(h.std(0).median()),
        "mu_over_h": float(mu.norm() / norms.median()),
        "largest_offset_over_h": float(3 * mu.norm() / norms.median()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="flow runs trained with network.noise_mean")
    parser.add_argument("--n", type=int, default=512, help="noise images")
    parser.add_argument("--seed", type=int, default=0, help="the noise's seed")
    parser.add_argument("--out", default="", help="JSON file to write (default: print only)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    try:
        rows = [measure(run, args.n, args.seed) for run in args.runs]
        text = json.dumps({"torch": torch.__version__, "rows": rows}, indent=2)
        print(text)
        if args.out:
            write_text(args.out, text + "\n")
    except LinearizerError as err:
        print(f"noise_mean.py: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
