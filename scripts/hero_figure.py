"""The README's picture: one-step against multi-step samples of a pretrained model.

    .venv/bin/python scripts/hero_figure.py [--run pretrained:mnist-mix] [--out FILE.png]

The same noise (seed 0) through the run's sampler (the trained map alone) twice: once as one
matrix product ``g_data^-1(B g_noise(x0))``, once by the 1000-step solver in the latent. A
mixture draws each image's component once (seed 1) and both sides use it. The caption gives
their largest pixel difference; the sampler spec is printed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw

from linearizer.flow.mixture import MixtureFlow
from linearizer.training.runs import load_run


def grid(images: torch.Tensor, cols: int, scale: int) -> Image.Image:
    x = (images.clamp(0, 1).squeeze(1).numpy() * 255).round().astype(np.uint8)
    n, h, w = x.shape
    rows = -(-n // cols)
    canvas = np.full((rows * (h + 2) + 2, cols * (w + 2) + 2), 255, np.uint8)
    for i, img in enumerate(x):
        r, c = divmod(i, cols)
        canvas[2 + r * (h + 2) : 2 + r * (h + 2) + h, 2 + c * (w + 2) : 2 + c * (w + 2) + w] = img
    pil = Image.fromarray(canvas)
    return pil.resize((pil.width * scale, pil.height * scale), Image.NEAREST)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run", default="pretrained:mnist-mix")
    p.add_argument("--out", default="docs/flow/one_vs_multi.png")
    p.add_argument("--n", type=int, default=24)
    a = p.parse_args()
    run = load_run(a.run)
    model = run.model.double()
    spec = run.config.sampler.replace(maps="none")
    x0 = spec.noise(a.n, model.image_shape, torch.Generator().manual_seed(0)).double()
    drawn = {}
    if isinstance(model, MixtureFlow):
        drawn["labels"] = model.draw_components(a.n, torch.Generator().manual_seed(1))
    with torch.no_grad():
        one = model.sample(x0, spec, **drawn)
        multi = model.sample(x0, spec, one_step=False, **drawn)
    diff = float((one - multi).abs().max())
    left, right = grid(one.float(), 6, 3), grid(multi.float(), 6, 3)
    pad, head = 24, 34
    canvas = Image.new("L", (left.width + right.width + pad, left.height + head), 255)
    canvas.paste(left, (0, head))
    canvas.paste(right, (left.width + pad, head))
    draw = ImageDraw.Draw(canvas)
    draw.text((4, 4), "one step: g_data^-1(B g_noise(x0)), 2 network passes", fill=0)
    draw.text((left.width + pad + 4, 4), f"{spec.steps} solver steps (same noise)", fill=0)
    draw.text((4, 18), f"largest pixel difference {diff:.1e}", fill=0)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    canvas.save(out)
    print(
        f"{a.run} (step {run.step}), {spec.describe()}, temperature {spec.temperature:g}: "
        f"max |one-step - multi-step| = {diff:.2e} -> {out}"
    )


if __name__ == "__main__":
    main()
