"""One row of samples per component of a mixture, the same noise in every row.

    .venv/bin/python scripts/component_grid.py [--run pretrained:mnist-mix] [--n 10]
                                               [--out docs/mixture/components.png]

Row ``k`` is component ``k``'s exact generator ``g_data^-1(B_k g_noise(x0))`` (the run's sampler,
the trained map alone) on the same ``n`` noise images (seed 0), so a column shows one noise
drawn by every component. The row labels give each component's mixture weight.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw

from linearizer.errors import LinearizerError
from linearizer.flow.mixture import MixtureFlow
from linearizer.training.runs import load_run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run", default="pretrained:mnist-mix")
    p.add_argument("--n", type=int, default=10)
    p.add_argument("--scale", type=int, default=2)
    p.add_argument("--out", default="docs/mixture/components.png")
    a = p.parse_args()
    run = load_run(a.run, expect="flow")
    model = run.model
    if not isinstance(model, MixtureFlow):
        raise SystemExit(f"component_grid: {a.run} has one generator, not a mixture")
    spec = run.config.sampler.replace(maps="none")
    x0 = spec.noise(a.n, model.image_shape, torch.Generator().manual_seed(0))
    rows = []
    with torch.no_grad():
        for k in range(model.components):
            try:
                rows.append(model.sample(x0, spec.replace(component=k)).clamp(0, 1))
            except LinearizerError as e:
                raise SystemExit(f"component_grid: {e}") from None
    h, w = model.image_shape[1:]
    s, label = a.scale, 70
    canvas = Image.new("L", (label + a.n * (w * s + 2), len(rows) * (h * s + 2)), 255)
    draw = ImageDraw.Draw(canvas)
    weights = model.mixture_weights.tolist()
    for k, images in enumerate(rows):
        top = k * (h * s + 2)
        draw.text((4, top + h * s // 2 - 6), f"k={k}, w={weights[k]:.2f}", fill=0)
        for i, img in enumerate(images[:, 0].float().numpy()):
            tile = Image.fromarray((img * 255).round().astype(np.uint8)).resize((w * s, h * s))
            canvas.paste(tile, (label + i * (w * s + 2), top))
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    canvas.save(out)
    print(f"{a.run} (step {run.step}), {spec.describe()}: {len(rows)} components -> {out}")


if __name__ == "__main__":
    main()
