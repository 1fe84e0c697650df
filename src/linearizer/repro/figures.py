"""The reproduction's figures, drawn from tensors the claims kept (``Context.keep``)."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import Tensor

from ..algebra import InducedSpace
from ..invertible.base import Conditioned
from ..report import new_figure, save_figure
from ..training.tracking import read_metrics
from .context import DATA, Context
from .numbers import F64
from .plots import amplified, caption, image_rows, noise_view, show_images


def collapse_figure(ctx: Context, path: Path) -> Path:
    """One-step vs multi-step samples and their differences (Euler, ours RK4 vs authors')."""
    e, e32 = ctx.keep["collapse_euler"], ctx.keep["collapse_euler_f32"]
    rk = ctx.keep["collapse_rk4_authors"]
    d64, m64 = amplified(e["one"] - e["multi"])
    d32, m32 = amplified(e32["one"] - e32["multi"])
    drk, mrk = amplified(rk["one"] - rk["multi"])
    panels = [
        (e["one"], f"one-step B, Euler T={ctx.opts.steps}"),
        (e["multi"], "multi-step Euler"),
        (d64, f"|difference| float64\nwhite = {m64:.1e}"),
        (d32, f"|difference| float32\nwhite = {m32:.1e}"),
        (drk, f"|authors' rk B - RK4|\nwhite = {mrk:.1e}"),
    ]
    fig = new_figure(11, 2.8)
    for i, (img, title) in enumerate(panels):
        show_images(fig.add_subplot(1, len(panels), i + 1), img, nrow=4, title=title)
    caption(
        fig,
        (
            "The same 16 noise draws through the collapsed one-step matrix B and through the "
            "multi-step solver (float64 end to end unless marked). Difference panels are scaled so "
            "their largest value is white (the value is printed): the Euler collapse agrees to "
            "rounding, while the authors' first-order 'rk' matrix differs from true RK4 visibly."
        ),
    )
    return save_figure(fig, path)


def inversion_figure(ctx: Context, path: Path) -> Path:
    inv = ctx.keep["inversion"]
    diff, top = amplified(inv["back"] - inv["x1"])
    rows = [
        ("test image x1", inv["x1"]),
        ("noise x0 = inverse", noise_view(inv["x0"])),
        ("one-step f(x0)", inv["back"]),
        (f"|f(x0) - x1|\nwhite = {top:.1e}", diff),
    ]
    fig = new_figure(7, 4.4)
    image_rows(fig, rows, nrow=len(inv["x1"]))
    caption(
        fig,
        (
            f"Inversion through B (Euler T={ctx.opts.steps}, float64): x0 = g_noise^-1(B^-1 "
            "g_data(x1)) is the noise whose one-step sample is x1 (shown as 0.5 + x0/6). The "
            "last row "
            "is the round-trip error, scaled so its maximum is white."
        ),
    )
    return save_figure(fig, path)


def _two_digits(ctx: Context) -> tuple[Tensor, Tensor]:
    """Two test images of different classes (the first of each)."""
    labels = ctx.test_labels
    first = int(labels[0])
    other = next((i for i in range(len(labels)) if int(labels[i]) != first), 1)
    return ctx.test_images[0:1], ctx.test_images[other : other + 1]


@torch.no_grad()
def interpolation_figure(ctx: Context, path: Path, steps: int = 10) -> Path:
    """Between two real test images: in pixel-noise space (the authors'), in the induced latent
    space of g_data, and as a pixel blend."""
    model = ctx.model64
    a, b = (x.to(ctx.device, F64) for x in _two_digits(ctx))
    x0 = model.invert(torch.cat([a, b]), ctx.B(ctx.opts.steps, "euler", "float64", ctx.first))
    alphas = torch.linspace(0, 1, steps, dtype=F64, device=ctx.device)
    noise_path = torch.stack([(1 - t) * x0[0] + t * x0[1] for t in alphas])
    by_noise = model.sample(noise_path, ctx.spec(ctx.opts.steps, component=ctx.first))
    space = InducedSpace(Conditioned(model.net, DATA))
    induced = torch.cat([space.interpolate(a, b, float(t)) for t in alphas])
    pixels = torch.cat([(1 - t) * a + t * b for t in alphas])
    rows = [
        ("noise space\n(authors')", by_noise),
        ("induced latent\nspace of g_data", induced),
        ("pixel blend", pixels),
    ]
    fig = new_figure(7.5, 3.2)
    image_rows(fig, [(label, images.cpu()) for label, images in rows], nrow=steps)
    caption(
        fig,
        (
            "Interpolating between two real test images, alpha = 0 ... 1. Top: invert both to "
            "noise "
            "(through B^-1), blend the noise images linearly, sample in one step (the authors' "
            "procedure). Middle: (1 - alpha) (.) a (+) alpha (.) b in the space induced by g_data, "
            "which is exactly what the generator makes from the induced blend of the two noises. "
            "Bottom: plain pixel blend for comparison."
        ),
    )
    return save_figure(fig, path)


def samples_figure(ctx: Context, path: Path) -> Path:
    keys = [
        k
        for k in (f"samples_t{ctx.opts.steps}", f"samples_t{ctx.opts.long_steps}")
        if k in ctx.keep
    ]
    real = ctx.test_images[:64]
    fig = new_figure(3.2 * (len(keys) + 1), 3.6)
    for i, key in enumerate(keys):
        show_images(
            fig.add_subplot(1, len(keys) + 1, i + 1),
            ctx.keep[key],
            nrow=8,
            title=f"one-step, Euler T={key.split('_t')[1]}",
        )
    show_images(fig.add_subplot(1, len(keys) + 1, len(keys) + 1), real, nrow=8, title="test images")
    caption(
        fig,
        "One-step samples (float32 networks, float64 B) from the same noise at two "
        "time grids, beside real test images.",
    )
    return save_figure(fig, path)


def training_figure(run_dir: Path, path: Path) -> Path | None:
    """Loss terms and learning rate against the step, from the run's metrics.jsonl."""
    rows = [r for r in read_metrics(run_dir) if "loss" in r and "step" in r]
    if not rows:
        return None
    keys = [k for k in ("loss", "latent", "x0_rec", "x1_rec", "x1_pred_rec") if k in rows[0]]
    fig = new_figure(9, 3.4)
    ax = fig.add_subplot(1, 2, 1)
    steps = [r["step"] for r in rows]
    for k in keys:
        vals = [r.get(k, math.nan) for r in rows]
        ax.semilogy(steps, vals, label=k, lw=1.2 if k == "loss" else 0.9)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (mean over logging window)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    ax2 = fig.add_subplot(1, 2, 2)
    if "lr" in rows[0]:
        ax2.plot(steps, [r.get("lr", math.nan) for r in rows], color="C3")
        ax2.set_ylabel("learning rate")
    ax2.set_xlabel("step")
    ax2.grid(alpha=0.3)
    caption(
        fig,
        f"Training curves of {run_dir} (metrics.jsonl): the total loss and its four "
        "terms (latent x1-prediction, x0 and x1 reconstructions, decoded prediction), and "
        "the learning-rate schedule.",
    )
    return save_figure(fig, path)
