"""Measurements of a style bank, and the comparison with the authors' index interpolation.

* **Mixing exactness**: ``f_w(x)`` (one pass through the mixed operator) against the induced-space
  combination ``(+)_i w_i (.) f_i(x)`` of the separately stylised images (plus ``w_0 (.) x`` for
  strengths), relative error per image. Rounding only: the identity is exact algebra.
* **Fidelity**: PSNR/SSIM of ``f_s(content)`` to each style's target (and, as a floor, of the
  content itself to the target).
* **Smoothness of interpolation strips** ``a -> b`` with evenly spaced ``alpha``:
  ``path_dev_g`` — largest distance of a frame from the straight line between the end frames in
  the model's own latent ``g_y``, relative to the end frames' distance (0 for operator mixing);
  ``path_ratio`` — pixel path length over end-to-end distance (1: no detour);
  ``step_unevenness`` — largest pixel step over the mean step (1: even steps);
  ``curvature`` — summed pixel second differences over end-to-end distance.

:func:`evaluate_bank` writes ``results.json`` and the pictures; ``linearizer style evaluate``
calls it.
"""

from __future__ import annotations

import copy
import itertools
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..errors import LinearizerError
from ..io import read_json, write_json, write_text
from ..metrics import psnr, ssim
from ..report import markdown_table, render_report, section
from .bank import StyleBank
from .images import save_picture
from .index_net import IndexStyleNet
from .model import StyleModel
from .task import StyleData

ALPHAS = (0.1, 0.25, 0.5, 0.75, 0.9)


def _rel(a: Tensor, b: Tensor) -> float:
    """Largest per-image relative error ``||a - b|| / ||b||``."""
    num = (a - b).flatten(1).double().norm(dim=1)
    den = b.flatten(1).double().norm(dim=1).clamp_min(1e-30)
    return float((num / den).max())


def weight_cases(n_styles: int, seed: int = 0) -> list[tuple[str, list[float], float, bool]]:
    """(label, weights, identity weight, convex) cases.

    Convex (weights >= 0 summing to 1, the identity counted): every pair at several alphas,
    random mixtures of all styles, each style at strength 0.5. General: each style at strength
    1.5, an extrapolation ``1.5 A_0 - 0.5 A_1``, and random signed weights, whose images lie far
    from the training images, where ``g`` is least well conditioned.
    """

    def weights(entries: dict[int, float]) -> list[float]:
        return [entries.get(i, 0.0) for i in range(n_styles)]

    cases = []
    for i, j in itertools.combinations(range(n_styles), 2):
        for a in ALPHAS:
            cases.append((f"pair {i},{j} a={a}", weights({i: a, j: 1 - a}), 0.0, True))
    gen = torch.Generator().manual_seed(seed)
    for k in range(3):
        w = -torch.log(torch.rand(n_styles, generator=gen, dtype=torch.float64))
        cases.append((f"mixture {k}", (w / w.sum()).tolist(), 0.0, True))
    signed = torch.randn(n_styles, generator=gen, dtype=torch.float64)
    cases.append(("signed", (0.5 * signed).tolist(), 0.3, False))
    for i in range(n_styles):
        for a in (0.5, 1.5):
            cases.append((f"strength {i} a={a}", weights({i: a}), 1 - a, a <= 1))
    if n_styles >= 2:
        cases.append(("extrapolation 0,1", weights({0: 1.5, 1: -0.5}), 0.0, False))
    return cases


@torch.no_grad()
def mixing_errors(bank: StyleBank, x: Tensor, dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """Relative error of ``f_w(x)`` against ``(+)_i w_i (.) f_i(x) (+) w_0 (.) x`` for every case
    of :func:`weight_cases`, computed in ``dtype`` (the bank is copied, not changed).

    ``rel_err`` is the worst convex case (mixtures and interpolations of styles, strengths in
    [0, 1]); ``rel_err_general`` the worst of all cases, extrapolations and signed weights
    included.
    """
    if not isinstance(bank, StyleBank):
        raise LinearizerError("mixing errors need an operator bank (bank='operators')")
    model = copy.deepcopy(bank).to(dtype).eval()
    x = x.to(dtype)
    singles = [model.stylise(x, s) for s in range(len(model.styles))]
    # the identity operator's image: x itself when g_x = g_y
    plain = x if model.same_sides else model.decode(model.encode(x))
    space = model.space_y
    convex, general = [], []
    by_style = dict.fromkeys(model.styles, 0.0)
    for label, w, w0, is_convex in weight_cases(len(model.styles)):
        lhs = model.apply_weights(x, w, w0)
        coeffs, vecs = ([*w, w0], [*singles, plain]) if w0 else (w, singles)
        err = _rel(lhs, space.lincomb(coeffs, vecs))
        (convex if is_convex else general).append((err, label))
        if is_convex:
            for name, ws in zip(model.styles, w):
                if ws != 0.0:
                    by_style[name] = max(by_style[name], err)
    everything = convex + general
    return {
        "rel_err": max(convex)[0],
        "worst_case": max(convex)[1],
        "median": float(torch.tensor([e for e, _ in convex]).median()),
        "cases": len(convex),
        "rel_err_by_style": by_style,
        "rel_err_general": max(everything)[0],
        "worst_general_case": max(everything)[1],
        "general_cases": len(everything),
        "dtype": str(dtype).split(".")[-1],
    }


@torch.no_grad()
def kernel_linearity_error(bank: StyleBank, x: Tensor, dtype: torch.dtype = torch.float64) -> float:
    """``(sum w_i A_i) z`` (combined parameters) vs ``sum w_i (A_i z)`` (separate outputs)."""
    model = copy.deepcopy(bank).to(dtype)
    z = model.encode(x.to(dtype))
    w = torch.linspace(-1, 2, len(model.styles), dtype=dtype)
    combined = model.latent_apply(z, w)
    separate = sum(
        w[s] * model.latent_style(z, torch.full((z.shape[0],), s)) for s in range(len(model.styles))
    )
    return _rel(combined, separate)


def _scores(y: Tensor, t: Tensor) -> dict[str, float]:
    y, t = y.double(), t.double()
    return {"psnr": round(float(psnr(y, t)), 3), "ssim": round(float(ssim(y, t)), 4)}


@torch.no_grad()
def fidelity(model: StyleModel, data: StyleData) -> dict[str, dict[str, float]]:
    """PSNR (dB) and SSIM of ``f_s(content)`` to each style's targets, averaged over contents."""
    return {
        name: _scores(model.stylise(data.contents, s).clamp(0, 1), data.targets[s])
        for s, name in enumerate(data.style_names)
    }


def identity_fidelity(data: StyleData) -> dict[str, dict[str, float]]:
    """The floor: the content image itself scored against each target."""
    return {name: _scores(data.contents, t) for name, t in zip(data.style_names, data.targets)}


@torch.no_grad()
def strip_metrics(model: StyleModel, frames: Tensor, alphas: Tensor) -> dict[str, float]:
    """Smoothness measures of one strip (see the module docstring)."""
    f = frames.double().flatten(1)
    ends = (f[-1] - f[0]).norm().clamp_min(1e-30)
    steps = (f[1:] - f[:-1]).norm(dim=1)
    second = (f[2:] - 2 * f[1:-1] + f[:-2]).norm(dim=1) if len(f) > 2 else torch.zeros(1)
    z = model.view("y")(frames).double().flatten(1)
    a = alphas.double()[:, None]
    line = (1 - a) * z[:1] + a * z[-1:]
    dev = (z - line).norm(dim=1).max() / (z[-1] - z[0]).norm().clamp_min(1e-30)
    return {
        "path_dev_g": float(dev),
        "path_ratio": float(steps.sum() / ends),
        "step_unevenness": float(steps.max() / steps.mean().clamp_min(1e-30)),
        "curvature": float(second.sum() / ends),
    }


def _save(images: Tensor, out_dir: Path, name: str, nrow: int, fmt: str, written: list) -> None:
    save_picture(images, out_dir / f"{name}.{fmt}", nrow=nrow)
    written.append(f"{name}.{fmt}")


def _mean(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: float(sum(r[k] for r in rows) / len(rows)) for k in rows[0]}


@torch.no_grad()
def interpolation_comparison(
    bank: StyleBank,
    index: IndexStyleNet | None,
    x: Tensor,
    frames: int,
    out_dir: Path | None,
    written: list[str] | None = None,
    fmt: str = "png",
    single_strips: bool = False,
) -> dict[str, Any]:
    """Strips for every pair of styles, ours vs the index model's: metrics, and pictures in
    ``out_dir`` (``compare_A_B``: ours on top, the index model below; ``strip_A_B`` without an
    index model or with ``single_strips``), their names appended to ``written``."""
    written = [] if written is None else written
    pairs = list(itertools.combinations(range(len(bank.styles)), 2))
    ours, theirs, per_pair = [], [], {}
    for i, j in pairs:
        a, b = bank.styles[i], bank.styles[j]
        strip, alphas = bank.interpolate(x, i, j, frames)
        m = strip_metrics(bank, strip, alphas)
        ours.append(m)
        entry = {"ours": m}
        if out_dir is not None and (index is None or single_strips):
            _save(strip, out_dir, f"strip_{a}_{b}", frames, fmt, written)
        if index is not None:
            istrip, _ = index.interpolate(x, i, j, frames)
            mi = strip_metrics(index, istrip, alphas)
            theirs.append(mi)
            entry["index"] = mi
            if out_dir is not None:
                if single_strips:
                    _save(istrip, out_dir, f"strip_{a}_{b}_index", frames, fmt, written)
                _save(torch.cat([strip, istrip]), out_dir, f"compare_{a}_{b}", frames, fmt, written)
        per_pair[f"{a}->{b}"] = entry
    result: dict[str, Any] = {"frames": frames, "pairs": len(pairs), "ours": _mean(ours)}
    if theirs:
        result["index"] = _mean(theirs)
    result["per_pair"] = per_pair
    return result


@torch.no_grad()
def mixing_pictures(
    bank: StyleBank, x: Tensor, out_dir: Path, grid: int = 5, fmt: str = "png"
) -> list[str]:
    """A bilinear mixing grid of the first four styles (corners) and a strength strip each."""
    written: list[str] = []
    s = len(bank.styles)
    corners = [0, 1, 2, 3] if s >= 4 else [0, min(1, s - 1), 0, min(1, s - 1)]
    t = torch.linspace(0, 1, grid)
    weights = torch.zeros(grid * grid, s, dtype=x.dtype)
    for r, c in itertools.product(range(grid), range(grid)):
        u, v = float(t[r]), float(t[c])
        for corner, coef in zip(corners, ((1 - u) * (1 - v), (1 - u) * v, u * (1 - v), u * v)):
            weights[r * grid + c, corner] += coef
    z = bank.encode(x).expand(grid * grid, -1, -1, -1)
    pictures = bank.decode(bank.latent_apply(z, weights))
    _save(pictures, out_dir, "mix_grid", grid, fmt, written)
    alphas = torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5])
    rows = [bank.strength(x.expand(len(alphas), -1, -1, -1), name, alphas) for name in bank.styles]
    _save(torch.cat(rows), out_dir, "strength", len(alphas), fmt, written)
    return written


def evaluate_bank(
    bank: StyleBank,
    data: StyleData,
    out_dir: str | Path,
    *,
    index: IndexStyleNet | None = None,
    frames: int = 9,
    wall_time: dict[str, float] | None = None,
    extra: dict | None = None,
    image_format: str = "png",
    single_strips: bool = False,
) -> dict[str, Any]:
    """All measurements and pictures (``image_format`` png or jpg) for a bank, and optionally an
    index model on the same data; writes ``OUT/results.json`` and ``OUT/REPORT.md`` atomically
    and returns the results."""
    if image_format not in ("png", "jpg"):
        raise LinearizerError(f"image_format must be png or jpg, got {image_format!r}")
    out, fmt = Path(out_dir), image_format
    strips: list[str] = []
    t0 = time.perf_counter()
    x = data.contents[:1]
    results: dict[str, Any] = {
        "styles": data.style_names,
        "contents": data.content_names,
        "mix": mixing_errors(bank, x, torch.float32),
        "mix_float64": mixing_errors(bank, x, torch.float64),
        "kernel_linearity_float64": kernel_linearity_error(bank, x),
    }
    results["index_interpolation"] = interpolation_comparison(
        bank, index, x, frames, out, strips, fmt, single_strips
    )
    results["fidelity"] = {"bank": fidelity(bank, data), "identity": identity_fidelity(data)}
    if index is not None:
        results["fidelity"]["index"] = fidelity(index, data)
    with torch.no_grad():
        rows = [data.contents[:1]] + [bank.stylise(x, s) for s in range(len(data.style_names))]
        targets = [data.contents[:1]] + [data.targets[s, :1] for s in range(len(data.style_names))]
        pictures: list[str] = []
        _save(torch.cat(rows + targets), out, "styles", len(rows), fmt, pictures)
        pictures += mixing_pictures(bank, x, out, fmt=fmt)
    results["pictures"] = pictures + strips
    timing = dict(wall_time or {})
    timing["evaluate"] = round(time.perf_counter() - t0, 2)
    if timing.get("before_evaluate") is not None:
        # the demo passes the pipeline's time up to this call; the total adds this call
        timing["total"] = round(float(timing["before_evaluate"]) + timing["evaluate"], 2)
    results["wall_time_s"] = timing
    results["threads"] = torch.get_num_threads()
    if extra:
        results.update(extra)
    write_json(out / "results.json", results)
    write_text(out / "REPORT.md", bank_report(results))
    return results


def run_seconds(run_dir: str | Path) -> float | None:
    """Training wall time recorded in ``RUN/run.json`` (None when absent)."""
    path = Path(run_dir) / "run.json"
    if not path.is_file():
        return None
    value = read_json(path).get("seconds")
    return None if value is None else round(float(value), 2)


def bank_report(results: dict[str, Any]) -> str:
    """The ``REPORT.md`` of :func:`evaluate_bank`: mixing exactness, fidelity to the targets,
    the interpolation strips and the wall time."""
    mix, mix64 = results["mix"], results["mix_float64"]
    exact = markdown_table(
        ["dtype", "convex, worst", "convex, median", "all, worst", "worst case (all)"],
        [
            [
                m["dtype"],
                f"{m['rel_err']:.2e}",
                f"{m['median']:.2e}",
                f"{m['rel_err_general']:.2e}",
                m["worst_general_case"],
            ]
            for m in (mix, mix64)
        ],
    )
    by = mix.get("rel_err_by_style", {})
    worst = ", ".join(f"{k} {v:.1e}" for k, v in by.items())
    fid = results["fidelity"]
    cols = [k for k in ("bank", "index", "identity") if k in fid]
    fidelity = markdown_table(
        ["style", *cols],
        [
            [name, *(f"{fid[c][name]['psnr']:.2f} / {fid[c][name]['ssim']:.3f}" for c in cols)]
            for name in results["styles"]
        ],
    )
    interp = results["index_interpolation"]
    strips = [
        [
            label,
            f"{m['path_dev_g']:.2e}",
            f"{m['path_ratio']:.3f}",
            f"{m['step_unevenness']:.2f}",
            f"{m['curvature']:.3f}",
        ]
        for who, label in (("ours", "operator mixing (ours)"), ("index", "index interpolation"))
        if (m := interp.get(who)) is not None
    ]
    timing = results.get("wall_time_s", {})
    wall = None
    if timing:
        wall = section(
            "Wall time (seconds)",
            markdown_table(
                ["phase", "seconds"], [[k, f"{v:.0f}"] for k, v in timing.items() if v is not None]
            ),
            f"Threads: training {results.get('train_threads', '?')}, "
            f"evaluation {results.get('threads', '?')}.",
        )
    return render_report(
        "Style bank: measurements",
        f"Styles: {', '.join(results['styles'])}; content: {', '.join(results['contents'])}.",
        section(
            "Mixing exactness",
            "Relative error of `f_w(x)` (one pass through the mixed operator) against the "
            "induced-space combination of the separately stylised images. Convex: worst of "
            f"{mix['cases']} weightings (pairs at 5 alphas, mixtures of all styles, strengths "
            f"0.5); all: worst of {mix['general_cases']}, adding strengths 1.5, an "
            "extrapolation and signed weights.",
            exact,
            f"Worst float32 error of the convex cases involving each style: {worst}."
            if by
            else None,
        ),
        section("Fidelity to the targets (PSNR dB / SSIM)", fidelity),
        section(
            f"Interpolation strips ({interp['frames']} frames, mean over {interp['pairs']} pairs)",
            markdown_table(
                ["model", "path_dev_g", "path_ratio", "step_unevenness", "curvature"], strips
            ),
        ),
        wall,
    )
