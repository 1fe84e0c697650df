"""``linearizer restore-report``: every method on every task, side by side: ``results.json``,
``REPORT.md``, one strip per task (``strip_<task>.png``) and the residuals of the alternating
projections per iteration (``residuals.png``).

``results.json`` holds ``tasks.<task>.<method>.<score>`` (scores: :func:`.evaluate.score` plus
``seconds_per_image``), ``tasks.<task>.history`` (:class:`.algorithms.History`),
``tasks.<task>.info`` (noise, weight of the data term, rank of ``A_H``...) and ``meta``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..errors import LinearizerError
from ..io import write_json, write_text
from ..report import markdown_table, render_report, section
from .algorithms import fit_coord_prior, fit_induced_operator, observed_rank
from .degradations import TASKS, Degradation, make_degradation
from .evaluate import EXACT, METHODS, Prior, prior_mse, restore, score
from .figures import save_residuals, save_strip_figure
from .spec import DEFAULT, RestoreSpec

LABELS = {
    "pinv": "H⁺y",
    "project": "P(H⁺y)",
    "ign": "IGN(H⁺y)",
    "noise-opt": "noise opt.",
    "ddnm": "DDNM (P prior)",
    "alternating": "alternating",
    "induced-rns": "induced RNS",
    "range-map": "MAP on range",
}


def prepare_prior(prior: Prior, train: Tensor) -> None:
    """The prior's error scale and its coordinates' Gaussian, from the first 2,000 ``train``."""
    prior.prior_mse = prior_mse(prior.ours, train[:2000])
    prior.coord_prior = fit_coord_prior(prior.coords, train[:2000])


def observe(deg: Degradation, truth: Tensor, seed: int) -> Tensor:
    """The observations of ``truth`` under ``deg`` (per-image state and noise from ``seed``)."""
    deg.fit_shape(len(truth))
    return deg.measure(truth, torch.Generator().manual_seed(int(seed) + 99))


def shown_observation(deg: Degradation, y: Tensor) -> Tensor:
    """``y`` as an image: upsampled when smaller, missing pixels mid-grey for inpainting."""
    if getattr(deg, "mask", None) is not None:
        m = deg.mask.to(y)
        return y * m + 0.5 * (1 - m)
    if y.shape[-1] != deg.image_shape[-1]:
        s = deg.image_shape[-1] // y.shape[-1]
        return y.repeat_interleave(s, -2).repeat_interleave(s, -1)
    return y


def run_task(
    prior: Prior,
    task: str,
    truth: Tensor,
    labels: Tensor,
    *,
    lenet,
    ref_features: Tensor | None,
    fit_images: Tensor,
    seed: int = 0,
    spec: RestoreSpec = DEFAULT,
    noise_n: int | None = None,
    methods: tuple[str, ...] = METHODS,
    log: Callable[[str], None] = print,
) -> tuple[dict[str, Any], dict[str, Tensor], Tensor, Degradation]:
    """One task: restore, score every method; ``(results, outputs, y, degradation)``."""
    deg = make_degradation(task, tuple(truth.shape[1:]), seed)
    y = observe(deg, truth, seed)
    info: dict[str, Any] = {"sigma": deg.sigma, "linear": deg.linear}
    induced = None
    if "induced-rns" in methods and deg.sigma == 0 and task != "inpaint-random":
        t0 = time.perf_counter()
        rank = observed_rank(deg, math.prod(deg.image_shape))
        induced = fit_induced_operator(prior.encode, deg, fit_images, rank)
        info.update(
            induced_rank=induced.rank,
            induced_fit_error=induced.fit_error,
            induced_fit_seconds=time.perf_counter() - t0,
        )
    outs, secs, extras = restore(
        prior,
        deg,
        y,
        methods=methods,
        spec=spec,
        noise_n=noise_n,
        induced=induced,
        progress=lambda name: log(f"  {task}: {name}"),
    )
    info["data_weight"] = extras["weight"]
    if "noise_lam" in extras:
        info["noise_lam"] = extras["noise_lam"]
    res: dict[str, Any] = {"info": info, "history": extras.get("history")}
    if "noise_trace" in extras:
        res["noise_trace"] = extras["noise_trace"][:: max(1, spec.noise_steps // 20)]
    for name, x in outs.items():
        k = len(x)  # the noise optimisation may run on the first noise_n only
        sub = deg.select(slice(0, k))
        scores = score(x, truth[:k], labels[:k], sub, y[:k], lenet, ref_features)
        res[name] = {**scores, "n": k, "seconds_per_image": secs[name]}
    res["observation"] = score(
        shown_observation(deg, y), truth, labels, deg, y, lenet, ref_features, consistency=False
    )
    return res, outs, y, deg


def restore_report(
    prior: Prior,
    truth: Tensor,
    labels: Tensor,
    train: Tensor,
    out: str | Path,
    *,
    classifier: bool = True,
    tasks: tuple[str, ...] = TASKS,
    seed: int = 0,
    spec: RestoreSpec = DEFAULT,
    noise_n: int | None = None,
    runs: dict[str, Any] | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Measure every method on the digits ``truth`` (true ``labels``) for every task; ``train``:
    training digits (the prior's error scale from the first 2,000, ``A_H`` fitted on the last
    ``spec.fit_n``); ``spec``: the solvers' settings (:class:`.spec.RestoreSpec`);
    ``classifier``: score with the MNIST LeNet (MNIST 32x32 only). Writes the report into
    ``out`` and returns the results."""
    for t in tasks:
        make_degradation(t, (1, 8, 8))  # unknown names fail before any work
    if len(train) <= math.prod(truth.shape[1:]):
        raise LinearizerError(f"need more training images than pixels, got {len(train)}")
    out = Path(out)
    t_start = time.perf_counter()
    prepare_prior(prior, train)
    n = len(truth)
    lenet = ref = truth_fid = None
    if classifier:
        from ..metrics import fid_from_features, lenet_features, load_classifier

        lenet = load_classifier()
        ref = lenet_features(train[-10000:], lenet)
        truth_fid = fid_from_features(lenet_features(truth, lenet), ref)
    results: dict[str, Any] = {"tasks": {}}
    for task in tasks:
        log(f"task {task} ({n} digits)")
        res, outs, y, deg = run_task(
            prior,
            task,
            truth,
            labels,
            lenet=lenet,
            ref_features=ref,
            fit_images=train[-spec.fit_n :],
            seed=seed,
            spec=spec,
            noise_n=noise_n,
            log=log,
        )
        results["tasks"][task] = res
        rows = {"truth": truth[:8], "observed": shown_observation(deg.select(slice(0, 8)), y[:8])}
        rows.update({LABELS[k]: outs[k][:8] for k in METHODS if k in outs})
        save_strip_figure(rows, out / f"strip_{task}.png", title=task)
    if lenet is not None:
        results["reference"] = {"fid_lenet_truth": truth_fid}
    save_residuals(results["tasks"], out / "residuals.png")
    results["meta"] = {
        "n": n,
        "seed": seed,
        "iters": spec.iters,
        "noise_steps": spec.noise_steps,
        "noise_n": noise_n,
        "map_steps": spec.map_steps,
        "fit_n": spec.fit_n,
        "prior_mse": prior.prior_mse,
        "runs": runs or {},
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "eval_seconds": time.perf_counter() - t_start,
    }
    write_json(out / "results.json", results)
    write_text(out / "REPORT.md", restoration_report(results))
    return results


def _fmt(v: Any, kind: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if kind == "exp":
        return f"{v:.1e}"
    if kind == "pct":
        return f"{100 * v:.1f}"
    if kind == "ms":
        return f"{1000 * v:.2g}" if v < 0.01 else f"{1000 * v:.0f}"
    return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"


COLUMNS = (
    ("PSNR (dB)", "psnr", ""),
    ("SSIM", "ssim", ""),
    ("LeNet acc. (%)", "lenet_accuracy", "pct"),
    ("‖Hx̂−y‖/‖y‖ max", "consistency_max", "exp"),
    ("model consistency max", "model_consistency_max", "exp"),
    ("FID (LeNet)", "fid_lenet", ""),
    ("ms / image", "seconds_per_image", "ms"),
)


def summary_table(results: dict[str, Any]) -> list[str]:
    """Tasks as rows, methods as columns: PSNR (dB) / LeNet accuracy (%)."""
    tasks = results["tasks"]
    names = [m for m in METHODS if any(m in r for r in tasks.values())]
    has_acc = any("lenet_accuracy" in r.get(m, {}) for r in tasks.values() for m in names)
    what = "PSNR (dB) / LeNet accuracy (%)" if has_acc else "PSNR (dB)"
    table = [[task, *(_summary_cell(res.get(m)) for m in names)] for task, res in tasks.items()]
    head = ["task", *(LABELS[m] for m in names)]
    return [f"Summary, {what}:", "", markdown_table(head, table), ""]


def _summary_cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "—"
    text = _fmt(r["psnr"])
    if "lenet_accuracy" in r:
        text += " / " + _fmt(r["lenet_accuracy"], "pct")
    return text


def restoration_report(results: dict[str, Any]) -> str:
    """The ``REPORT.md`` of ``linearizer restore``: the summary, then one table per task with
    every method a row."""
    meta = results["meta"]
    setup = (
        f"{meta['n']} test digits per task, seed {meta['seed']}, float32, torch {meta['torch']}, "
        f"{meta['threads']} thread(s); {meta['iters']} alternating iterations; MAP on the range "
        f"{meta['map_steps']} Adam steps; noise optimisation {meta['noise_steps']} Adam steps"
        + (f" on the first {meta['noise_n']} digits" if meta.get("noise_n") else "")
        + f"; A_H fitted on {meta['fit_n']} training digits; prior MSE (P on training digits) "
        f"{meta['prior_mse']:.4f}."
    )
    truth = None
    if "reference" in results:
        truth = (
            f"FID (LeNet) of the true digits themselves: "
            f"{_fmt(results['reference']['fid_lenet_truth'])}."
        )
    tasks = [_task_section(task, res, meta["n"]) for task, res in results["tasks"].items()]
    return render_report(
        "Restoration: measurements",
        setup,
        summary_table(results),
        truth,
        *tasks,
        "FID (LeNet): against the last 10,000 training digits; on fewer samples (the noise "
        "optimisation's rows) it is biased upwards and not comparable with the other rows. "
        "`*` ends with an exact consistency step (x ← x + H⁺(y − Hx); relaxed by the data "
        "weight when the observation is noisy). PSNR, SSIM, accuracy and FID on outputs "
        'clamped to [0, 1]; consistency on the raw outputs. "model consistency": in the '
        "operator the solvers use (the truncated blur for deblur and blur-gamma; H otherwise).",
    )


def _task_section(task: str, res: dict[str, Any], n: int) -> str:
    info = res["info"]
    extra = f"noise σ = {info['sigma']:g}, data weight {info['data_weight']:.3g}"
    if "induced_rank" in info:
        extra += f"; A_H rank {info['induced_rank']}, fit residual {info['induced_fit_error']:.3g}"
    cols = [c for c in COLUMNS if any(c[1] in v for v in res.values() if isinstance(v, dict))]
    table = []
    for name in ("observation", *METHODS):
        if name not in res:
            continue
        label = "observation (as shown)" if name == "observation" else LABELS[name]
        if name in EXACT:
            label += " *"
        if res[name].get("n", n) < n:
            label += f" (first {res[name]['n']})"
        table.append([label, *(_fmt(res[name].get(key), kind) for _, key, kind in cols)])
    return section(
        task,
        f"{extra}. Figure: `strip_{task}.png`.",
        markdown_table(["method", *(c[0] for c in cols)], table),
    )
