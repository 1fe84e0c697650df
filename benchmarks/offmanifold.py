"""The exact paths of flow runs off the data manifold, side by side: which run (and which
data-side logit tails) meets float32's tolerance where.

    python benchmarks/offmanifold.py RUN [RUN ...] [--tails sigmoid,linear] [--n 64]
                                     [--threads 2] [--out DIR]

Per run and per logit tail (``sigmoid``: as trained; ``linear``: the same logit on [0, 1],
continued linearly outside, :class:`~linearizer.invertible.logit.FlagLogit`), measured in
float32 (the networks' precision) and float64:

* ``x -> z -> x``: the data side's round trip ``decode(encode(x, 1), 1)`` on the input families
  of ``benchmarks/roundtrip.py`` (digits, noisy digits, uniform noise, grey, strokes on paper):
  max abs pixel error;
* ``z -> x -> z``: the latents of the induced scalar multiplication, ``z = a g(v)`` for test
  digits ``v`` and ``a`` in [-2, 2], decoded and encoded again: max error relative to max |z|;
* the noise side's ``z -> x -> z`` at ``a g_noise(x0)`` (where ``a < 0`` takes it);
* ``linearizer repro``'s linearity claim (additivity, homogeneity for ``a > 0`` and ``a < 0``);
* ``linearizer invert``'s round trip through ``B^-1`` (the run's invertible spec, float64; a
  class-conditional run through one class's generator, and without the linearity claim, which
  ``repro`` measures on unconditional runs): the worst PSNR and the share of images at or above
  80 dB, per family.

Writes ``DIR/offmanifold.json`` and ``DIR/offmanifold.md``; a few minutes per run and tail.
"""

from __future__ import annotations

import argparse
import copy
import platform
import sys
import time
from pathlib import Path

import torch
from torch import Tensor

import linearizer.pretrained  # noqa: F401  (registers pretrained:NAME)
from linearizer.flow.inversion import EXACT_PSNR, psnr_per_image, round_trip
from linearizer.io import write_json, write_text
from linearizer.report import markdown_table
from linearizer.training.runs import load_run

sys.path.insert(0, str(Path(__file__).resolve().parent))
from roundtrip import SCALARS, image_families  # noqa: E402

FAMILIES = ("digits", "noisy0.05", "noisy0.2", "uniform", "const0.5", "strokes-paper")
INVERT_FAMILIES = ("digits", "noisy0.05", "noisy0.2", "uniform")
CLASS = 3  # the class a class-conditional run inverts through (any one has its own exact B)
DATA, NOISE = 1.0, 0.0


def with_tails(model, tails: str):
    """A copy of ``model`` whose data-side logit has ``tails`` (None: the network has none)."""
    model = copy.deepcopy(model)
    logit = getattr(model.network, "logit", None)
    if logit is None:
        return model if tails == "sigmoid" else None
    logit.tails = tails
    return model


def max_err(a: Tensor, b: Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


def rel_err(a: Tensor, b: Tensor) -> float:
    return max_err(a, b) / max(float(b.double().abs().max()), 1e-300)


def data_round_trips(m32, m64, fams: dict) -> dict:
    out = {}
    for name in FAMILIES:
        x = fams[name][1]
        row = {}
        for label, m in (("float32", m32), ("float64", m64)):
            dtype = next(m.parameters()).dtype
            xd = x.to(dtype)
            row[label] = max_err(m.decode(m.encode(xd, DATA), DATA), xd)
        out[name] = row
    return out


def latent_round_trips(m32, m64, digits: Tensor, flag: float) -> dict:
    """``z -> x -> z`` relative error at ``z = a g(v)``, v test digits (flag 1) or noise (0)."""
    out = {}
    for a in SCALARS:
        if a == 0:
            continue
        row = {}
        for label, m in (("float32", m32), ("float64", m64)):
            dtype = next(m.parameters()).dtype
            z = a * m.encode(digits.to(dtype), flag)
            row[label] = rel_err(m.encode(m.decode(z, flag).to(dtype), flag), z)
        out[f"{a:g}"] = row
    return out


def linearity(model, run, cfg, step) -> dict:
    from linearizer.flow.task import load_images
    from linearizer.repro.claims import _linearity_errors
    from linearizer.repro.context import Context
    from linearizer.repro.options import ReproOptions

    ctx = Context(model, cfg, step, run, ReproOptions().resolved(), load_images(cfg, "test"))
    return {p: _linearity_errors(ctx, p) for p in ("float32", "float64")}


def invert_round_trips(m32, m64, cfg, fams: dict) -> dict:
    """As ``linearizer invert`` with the run's spec: networks in float64 when its dtype is; a
    class-conditional run inverts through class ``CLASS``'s generator."""
    label = CLASS if cfg.conditional else None
    spec = cfg.sampler.replace(maps="none", label=label).invertible()
    model = m64 if spec.torch_dtype == torch.float64 else m32
    b = model.one_step_operator(spec)
    out = {}
    for name in INVERT_FAMILIES:
        x = fams[name][1].to(spec.torch_dtype)
        _, back = round_trip(model, x, b)
        psnr = psnr_per_image(x, back)
        exact = sum(1 for p in psnr if p >= EXACT_PSNR)
        out[name] = {"worst_psnr": min(psnr), "exact_share": exact / len(psnr)}
    return out


def measure(run_name: str, tails: str, n: int, seed: int) -> dict | None:
    run = load_run(run_name)
    base = with_tails(run.model, tails)
    if base is None:
        return None
    m32, m64 = base.float().eval(), copy.deepcopy(base).double().eval()
    fams = image_families(n, m32.image_shape[-1], torch.Generator().manual_seed(seed))
    digits = fams["digits"][1]
    noise = torch.randn(n, *m32.image_shape, generator=torch.Generator().manual_seed(seed + 1))
    start = time.perf_counter()
    result = {
        "run": run_name,
        "tails": tails,
        "step": run.step,
        "x_z_x": data_round_trips(m32, m64, fams),
        "z_x_z_data": latent_round_trips(m32, m64, digits, DATA),
        "z_x_z_noise": latent_round_trips(m32, m64, noise, NOISE),
        # repro's claims measure unconditional runs only
        "linearity": None
        if run.config.conditional
        else linearity(m32, run.path, run.config, run.step),
        "invert": invert_round_trips(m32, m64, run.config, fams),
    }
    result["seconds"] = time.perf_counter() - start
    return result


def fmt(v: float) -> str:
    return "0" if v == 0 else f"{v:.1e}"


def pair(d: dict) -> str:
    return f"{fmt(d['float32'])} / {fmt(d['float64'])}"


def report(results: list[dict]) -> str:
    labels = [f"{r['run']} ({r['tails']})" for r in results]

    def table(title: str, columns: list[str], cell, prefix: str = "") -> list[str]:  # noqa: ANN001
        rows = [
            [lab, *(cell(r, c) for c in columns)] for lab, r in zip(labels, results, strict=True)
        ]
        head = ["run (tails)", *(prefix + c for c in columns)]
        return [f"## {title}", "", markdown_table(head, rows), ""]

    lines = table(
        "x -> z -> x, data side: max abs pixel error (float32 / float64)",
        list(FAMILIES),
        lambda r, c: pair(r["x_z_x"][c]),
    )
    for key, what in (
        ("z_x_z_data", "data side, z = a g(v) for test digits v"),
        ("z_x_z_noise", "noise side, z = a g(x0) for Gaussian x0"),
    ):
        lines += table(
            f"z -> x -> z, {what}: max error / max |z| (float32 / float64)",
            list(results[0][key]),
            lambda r, c, k=key: pair(r[k][c]),
            prefix="a = ",
        )
    parts = ["additivity", "homogeneity_a_pos", "homogeneity_a_neg"]
    lines += table(
        "linearity claim (repro): max relative error (float32 / float64)",
        parts,
        lambda r, c: (
            "n/a (conditional)"
            if r["linearity"] is None
            else f"{fmt(r['linearity']['float32'][c])} / {fmt(r['linearity']['float64'][c])}"
        ),
    )
    lines += table(
        f"invert through B^-1: worst PSNR (dB), share of images >= {EXACT_PSNR:g} dB",
        list(INVERT_FAMILIES),
        lambda r, c: f"{r['invert'][c]['worst_psnr']:.1f} ({r['invert'][c]['exact_share']:.0%})",
    )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="flow run folders or pretrained:NAME")
    p.add_argument("--tails", default="sigmoid,linear", help="data-side logit tails to try")
    p.add_argument("--n", type=int, default=64, help="images (latents) per family")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("runs/offmanifold"))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    results = []
    for run in args.runs:
        for tails in args.tails.split(","):
            r = measure(run, tails, args.n, args.seed)
            if r is not None:
                results.append(r)
                print(f"{run} ({tails}): {r['seconds']:.0f} s", flush=True)
    meta = {
        "command": "python " + " ".join(sys.argv),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "threads": args.threads,
        "date": time.strftime("%Y-%m-%d"),
    }
    write_json(args.out / "offmanifold.json", {"meta": meta, "results": results})
    text = report(results)
    write_text(args.out / "offmanifold.md", text)
    print(text)


if __name__ == "__main__":
    main()
