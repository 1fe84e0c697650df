"""Measurements of projective models (ours and IGN): ``results.json``, ``REPORT.md``, figures.

Keys of ``results.json`` (flat, dotted; ``<m>`` is ``ours`` or ``ign``):

* ``idempotence.<m>.<family>``: the *largest* relative error ``|f(f(x)) - f(x)| / |f(x)|``
  (float32, Euclidean norms per sample) over the family; ``idempotence_mean.<m>.<family>``
  the mean. Families: ``data`` (test digits), ``noise`` (the source noise), ``far``
  (noise at 100x the source scale), ``ood`` (another dataset: Fashion-MNIST for MNIST models)
  and ``corrupt_<name>`` (corrupted test digits, see :mod:`linearizer.projective.corrupt`).
* ``fid_lenet.<m>``: FID (LeNet) of ``f(noise)`` against the test images;
  ``fid_lenet.<m>.rec`` of the reconstructions ``f(test)``; ``fid_lenet.reference.train_vs_test``
  for scale. Only for 32x32 MNIST (the classifier's domain); otherwise None.
* ``psnr.rec.<m>``: PSNR of ``f(test)`` against ``test``; ``psnr.<corruption>.<m>``: of
  ``f(corrupted)`` against the clean digit, and ``psnr.<corruption>.input`` of the corrupted
  input itself. Outputs are clamped to [0, 1] first, as they are shown.
* ``lenet.<m>.confidence`` and ``lenet.<m>.classes``: the classifier's mean top probability and
  class histogram on ``f(noise)`` (mode collapse shows in the histogram).

Models with BatchNorm (IGN) are applied as they were trained, with batch statistics, in
batches of 500 inputs of one family (:func:`as_trained`).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ..data import load_dataset, save_grid
from ..errors import LinearizerError
from ..io import read_json, write_json, write_text
from ..report import markdown_table, render_report
from ..training.runs import load_run
from .config import ProjectiveConfig
from .corrupt import CORRUPTIONS, corrupt
from .ign import as_trained
from .task import KIND, load_images

FAR_SCALE = 100.0
BATCH = 500


def ood_images(cfg: ProjectiveConfig, n: int, seed: int = 0) -> Tensor:
    """Out-of-distribution inputs: Fashion-MNIST for MNIST models (and the reverse); uniform
    noise images for every other dataset (no download)."""
    size = cfg.network.img_size
    if cfg.data.dataset not in ("mnist", "fashion-mnist"):
        shape = (cfg.data.channels, size, size)
        return torch.rand(n, *shape, generator=torch.Generator().manual_seed(seed + 3))
    other = "fashion-mnist" if cfg.data.dataset == "mnist" else "mnist"
    return load_dataset(other, "test", None, size)[0][:n]


def source_noise(cfg: ProjectiveConfig, n: int, seed: int = 0, scale: float = 1.0) -> Tensor:
    gen = torch.Generator().manual_seed(seed + 1)
    size = cfg.network.img_size
    shape = (n, cfg.data.channels, size, size)
    return scale * cfg.noise_std * torch.randn(shape, generator=gen)


def input_families(cfg: ProjectiveConfig, n: int, seed: int = 0) -> dict[str, Tensor]:
    """Every input family of the idempotence table (see the module docstring)."""
    test = load_images(cfg, "test")[0]
    if len(test) < n:
        raise LinearizerError(f"--n {n} exceeds the {len(test)} test images")
    test = test[:n]
    fams = {
        "data": test,
        "noise": source_noise(cfg, n, seed),
        "far": source_noise(cfg, n, seed, FAR_SCALE),
        "ood": ood_images(cfg, n, seed),
    }
    for name in CORRUPTIONS:
        fams[f"corrupt_{name}"] = corrupt(test, name, seed)
    return fams


@torch.no_grad()
def apply(model: nn.Module, x: Tensor, batch: int = BATCH) -> Tensor:
    """``model(x)`` in batches (of one family each: BatchNorm models see batch statistics),
    float32, on the model's device; the result on the CPU."""
    model = as_trained(model)
    p = next(model.parameters())
    return torch.cat(
        [model(x[i : i + batch].to(p.device, p.dtype)).cpu() for i in range(0, len(x), batch)]
    )


def relative_errors(fx: Tensor, ffx: Tensor) -> Tensor:
    """``|f(f(x)) - f(x)| / |f(x)|`` per sample (norms computed in float64)."""
    a, b = fx.flatten(1).double(), ffx.flatten(1).double()
    return (b - a).norm(dim=1) / a.norm(dim=1).clamp_min(1e-300)


def _psnr(a: Tensor, b: Tensor) -> float:
    from ..metrics import psnr

    return float(psnr(a.clamp(0, 1), b))


def _fid_ok(cfg: ProjectiveConfig) -> bool:
    return cfg.data.dataset == "mnist" and cfg.network.img_size == 32


def evaluate_model(
    model: nn.Module, cfg: ProjectiveConfig, fams: dict[str, Tensor], name: str
) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """Metrics of one model on the input families, and the outputs the figures need."""
    res: dict[str, Any] = {}
    outs: dict[str, Tensor] = {}
    for fam, x in fams.items():
        fx = apply(model, x)
        ffx = apply(model, fx)
        err = relative_errors(fx, ffx)
        res[f"idempotence.{name}.{fam}"] = float(err.max())
        res[f"idempotence_mean.{name}.{fam}"] = float(err.mean())
        outs[fam], outs[f"{fam}_twice"] = fx, ffx
    clean = fams["data"]
    res[f"psnr.rec.{name}"] = _psnr(outs["data"], clean)
    for c in CORRUPTIONS:
        res[f"psnr.{c}.{name}"] = _psnr(outs[f"corrupt_{c}"], clean)
    if _fid_ok(cfg):
        from ..metrics import classifier_stats, fid_lenet, load_classifier

        lenet = load_classifier()
        samples = outs["noise"].clamp(0, 1)
        res[f"fid_lenet.{name}"] = fid_lenet(samples, clean, lenet)
        res[f"fid_lenet.{name}.rec"] = fid_lenet(outs["data"].clamp(0, 1), clean, lenet)
        stats = classifier_stats(samples, model=lenet)
        res[f"lenet.{name}.confidence"] = stats["mean_max_prob"]
        res[f"lenet.{name}.classes"] = stats["class_histogram"]
    else:
        res[f"fid_lenet.{name}"] = None
    res[f"params.{name}"] = sum(p.numel() for p in model.parameters())
    if hasattr(model, "rank"):
        res[f"rank.{name}"] = model.rank
    return res, outs


def _run_facts(run: Path, name: str, step: int) -> dict[str, Any]:
    status = read_json(run / "run.json") if (run / "run.json").is_file() else {}
    return {f"steps.{name}": step, f"train_seconds.{name}": status.get("seconds")}


def save_figures(out: Path, name: str, fams: dict[str, Tensor], outs: dict[str, Tensor]) -> None:
    """samples_<m>.png (f(noise)), and strips: input / f / f o f for each family."""
    save_grid(outs["noise"][:64].clamp(0, 1), out / f"samples_{name}.png", nrow=8, scale=2)
    for fam in fams:
        rows = [fams[fam][:8], outs[fam][:8], outs[f"{fam}_twice"][:8]]
        if fam.startswith("corrupt_"):
            rows.insert(0, fams["data"][:8])
        if fam in ("noise", "far"):
            rows[0] = rows[0] / (3 * rows[0].std()) + 0.5  # show noise at a visible contrast
        save_grid(torch.cat(rows).clamp(0, 1), out / f"project_{name}_{fam}.png", nrow=8, scale=2)


def project_report(
    runs: dict[str, str | Path], out: str | Path, n: int = 2000, seed: int = 0
) -> dict[str, Any]:
    """Evaluate the runs (``{"ours": RUN, "ign": RUN}``, either may be missing) on the same
    inputs; write ``results.json``, ``REPORT.md`` and figures to ``out``; return the results."""
    if not runs:
        raise LinearizerError("give at least one run to report on (--ours RUN and/or --ign RUN)")
    out = Path(out)
    t0 = time.perf_counter()
    loaded = {name: load_run(run, expect=KIND) for name, run in runs.items()}
    for name, run in loaded.items():
        if run.config.model != name:
            raise LinearizerError(f"run {runs[name]} is a '{run.config.model}' model, not '{name}'")
    cfgs = [run.config for run in loaded.values()]
    setups = [(c.data, c.network.img_size, c.noise_std) for c in cfgs]
    if any(setup != setups[0] for setup in setups):
        raise LinearizerError("the runs differ in dataset, img_size or noise_std")
    first = cfgs[0]
    fams = input_families(first, n, seed)
    results: dict[str, Any] = {}
    for name, run in loaded.items():
        res, outs = evaluate_model(run.model, run.config, fams, name)
        results.update(res)
        results.update(_run_facts(Path(runs[name]), name, run.step))
        save_figures(out, name, fams, outs)
    clean = fams["data"]
    for c in CORRUPTIONS:
        results[f"psnr.{c}.input"] = _psnr(fams[f"corrupt_{c}"], clean)
    if _fid_ok(first):
        from ..metrics import fid_lenet

        train = load_images(first, "train")[0][:n]
        results["fid_lenet.reference.train_vs_test"] = fid_lenet(train, clean)
    meta = {
        "n": n,
        "seed": seed,
        "families": list(fams),
        "far_scale": FAR_SCALE,
        "runs": {k: str(v) for k, v in runs.items()},
        "eval_seconds": time.perf_counter() - t0,
    }
    write_json(out / "results.json", {**results, "meta": meta})
    write_text(out / "REPORT.md", measurements_report(results, meta))
    return {**results, "meta": meta}


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        if math.isinf(v) or math.isnan(v):
            return str(v)
        if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e5):
            return f"{v:.1e}"
        return f"{v:.3g}" if abs(v) < 100 else f"{v:.1f}"
    return str(v)


def measurements_report(results: dict[str, Any], meta: dict[str, Any]) -> str:
    """The ``REPORT.md`` of ``linearizer evaluate`` on projective runs: a table of
    ``results``, one column per model, and the reference points."""
    models = [m for m in ("ours", "ign") if f"params.{m}" in results]
    fams = meta["families"]
    rows: list[tuple[str, str]] = [
        ("parameters", "params.{m}"),
        ("rank k of the projector", "rank.{m}"),
        ("training steps", "steps.{m}"),
        ("training seconds", "train_seconds.{m}"),
        ("FID (LeNet) of f(noise) vs test", "fid_lenet.{m}"),
        ("FID (LeNet) of f(test) vs test", "fid_lenet.{m}.rec"),
        ("LeNet confidence on f(noise)", "lenet.{m}.confidence"),
        ("PSNR f(test) vs test (dB)", "psnr.rec.{m}"),
    ]
    rows += [(f"PSNR f(corrupted: {c}) vs clean (dB)", f"psnr.{c}.{{m}}") for c in CORRUPTIONS]
    rows += [(f"idempotence error, {f} (max)", f"idempotence.{{m}}.{f}") for f in fams]
    rows += [(f"idempotence error, {f} (mean)", f"idempotence_mean.{{m}}.{f}") for f in fams]
    runs = ", ".join(f"{k} = `{v}`" for k, v in meta["runs"].items())
    table = []
    for label, key in rows:
        values = [results.get(key.format(m=m)) for m in models]
        if any(v is not None for v in values):
            table.append([label, *(_fmt(v) for v in values)])
    points = []
    ref = results.get("fid_lenet.reference.train_vs_test")
    if ref is not None:
        points.append(f"- FID (LeNet), {meta['n']} train vs {meta['n']} test images: {_fmt(ref)}")
    for c in CORRUPTIONS:
        value = _fmt(results[f"psnr.{c}.input"])
        points.append(f"- PSNR of the corrupted ({c}) input itself vs clean: {value} dB")
    for m in models:
        hist = results.get(f"lenet.{m}.classes")
        if hist is not None:
            points.append(f"- LeNet classes of {m}'s f(noise) (digits 0-9): {hist}")
    return render_report(
        "Projective model: measurements",
        f"n = {meta['n']} inputs per family, seed {meta['seed']}; runs: {runs}",
        markdown_table(["measurement", *models], table),
        "Reference points:",
        points,
        "Idempotence error: |f(f(x)) - f(x)| / |f(x)| per input, float32. Families: data = test "
        f"digits, noise = source noise, far = noise x{FAR_SCALE:g}, ood = another dataset, "
        "corrupt_* = corrupted test digits.",
    )
