"""Evaluating a class-conditional one-step flow: class accuracy and a guidance sweep.

A conditional model (``conditional=true``) holds one exact linear generator per class and
guidance weight, ``x = g_data^-1(B_{c,w} g_noise(x0))``. :func:`guidance_sweep` draws, for each
``w``, the same ``n`` noise images and the same classes (from the training frequencies), samples
the class mixture, and measures:

* the mixture's FID (LeNet), FID (judge), precision and recall against the test images
  (:class:`~linearizer.flow.evaluate.Reference`);
* per class, the share of samples that the LeNet, and the held-out judge
  (:mod:`linearizer.metrics.judge`), classify as the class asked for.

Every row names its full :class:`~linearizer.flow.spec.SamplerSpec`; the trained map alone is
the only sampler a conditional model has (no post-hoc maps are fitted for it).

The sweep's ``recommended_guidance`` is the smallest ``w`` at which every class reaches
:data:`THRESHOLD` LeNet accuracy (:func:`recommended_guidance`), chosen on the LeNet alone so
that the judge still reports it; :func:`write_guidance` records it in the run folder, where the
flow commands take it for ``--class`` given without ``--guidance``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import torch
from torch import Tensor

from ..errors import LinearizerError
from ..io import write_json, write_text
from ..metrics.classifier import lenet_view, load_classifier, predict_logits
from ..report import markdown_table, new_figure, save_figure
from ..training.runs import GUIDANCE_FILE
from . import evaluate
from .evaluate import EvalOptions, Progress, Reference, draw_samples, sampler_row
from .model import OneStepFlow
from .spec import SamplerSpec

GUIDANCE = (0.0, 0.5, 1.0, 2.0, 4.0)
# The recommended guidance: chosen on the LeNet, so the held-out judge can still report it.
THRESHOLD = 0.97


def guidance_rule(threshold: float = THRESHOLD) -> str:
    """The rule of :func:`recommended_guidance` in words.

    >>> guidance_rule()[:56]
    'the smallest w at which every class reaches LeNet accura'
    """
    return (
        f"the smallest w at which every class reaches LeNet accuracy >= {threshold:g} (the share "
        "of samples that the LeNet classifies as the class asked for); chosen on the LeNet, "
        "reported on the held-out judge"
    )


def class_accuracy(predicted: Tensor, labels: Tensor, classes: int) -> list[float]:
    """Per class, the share of rows asked for it that were predicted as it (NaN if none).

    >>> class_accuracy(torch.tensor([0, 1, 1, 2]), torch.tensor([0, 1, 2, 2]), 3)
    [1.0, 1.0, 0.5]
    """
    out = []
    for c in range(classes):
        rows = labels == c
        out.append(float((predicted[rows] == c).double().mean()) if rows.any() else float("nan"))
    return out


def recommended_guidance(rows: Sequence[dict], threshold: float = THRESHOLD) -> float | None:
    """The smallest ``w`` among the sweep's rows whose ``lenet_accuracy_min`` is at least
    ``threshold`` (None if no row reaches it); a row names its weight by ``w`` or its spec.

    >>> rows = [{"w": 0.0, "lenet_accuracy_min": 0.83}, {"w": 1.0, "lenet_accuracy_min": 0.98},
    ...         {"w": 0.5, "lenet_accuracy_min": 0.97}]
    >>> recommended_guidance(rows)
    0.5
    >>> recommended_guidance(rows, threshold=0.99) is None
    True
    """
    passing = [_weight(r) for r in rows if r["lenet_accuracy_min"] >= threshold]
    return min(passing) if passing else None


def _weight(row: dict) -> float:
    return float(row["w"] if "w" in row else row["spec"]["guidance"])


def write_guidance(folder: str | Path, results: dict, source: str) -> Path:
    """The sweep's recommended guidance as the run folder's ``guidance.json``
    (:data:`~linearizer.training.runs.GUIDANCE_FILE`): what ``load_run`` reads back, and the
    flow commands use when ``--class`` is given without ``--guidance``."""
    record = {**results["recommended_guidance"], "source": source, "n": results["n"]}
    return write_json(Path(folder) / GUIDANCE_FILE, record)


def guidance_sweep(
    model: OneStepFlow,
    reference: Tensor,
    spec: SamplerSpec,
    guidances: Sequence[float] = GUIDANCE,
    opts: EvalOptions | None = None,
    progress: Progress | None = None,
) -> tuple[dict, dict[str, Tensor]]:
    """One row per guidance weight: the class mixture's quality and per-class accuracy.

    Every row draws the same noise and classes (``opts.seed``). Returns ``(results,
    samples)``, ``samples`` holding one 10-per-class grid per row (class ``c`` in column ``c``).
    """
    if not model.classes:
        raise LinearizerError("guidance_sweep needs a class-conditional model")
    opts = opts or EvalOptions()
    spec = spec.replace(component=None)
    ref = Reference(reference, load_classifier(), opts)
    gen = torch.Generator().manual_seed(opts.seed)
    noise = spec.noise(opts.n, model.image_shape, gen)
    labels = model.draw_labels(opts.n, gen)
    grid_labels = torch.arange(model.classes).repeat(8)
    grid_noise = spec.noise(len(grid_labels), model.image_shape, gen)
    rows, grids = [], {}
    for w in guidances:
        row_spec = spec.replace(guidance=float(w))
        start = time.perf_counter()
        images = draw_samples(model, noise, row_spec, opts, progress, labels=labels)
        seconds = time.perf_counter() - start
        measured = ref.measure(images)
        view = lenet_view(images)
        lenet_acc = class_accuracy(
            predict_logits(ref.classifier, view).argmax(1), labels, model.classes
        )
        judge_acc = class_accuracy(predict_logits(ref.judge, view).argmax(1), labels, model.classes)
        name = f"w={w:g}"
        rows.append(
            {
                **sampler_row(name, f"class mixture, {row_spec.describe()}", row_spec, seconds),
                **measured,
                "lenet_accuracy": lenet_acc,
                "judge_accuracy": judge_acc,
                "lenet_accuracy_mean": _mean(lenet_acc),
                "lenet_accuracy_min": min(lenet_acc),
                "judge_accuracy_mean": _mean(judge_acc),
                "judge_accuracy_min": min(judge_acc),
            }
        )
        grids[name] = (
            model.sample(grid_noise.to(noise.dtype), row_spec, labels=grid_labels).float().cpu()
        )
    results = {
        "n": opts.n,
        "classes": model.classes,
        "class_prior": model.class_prior.double().tolist(),
        "options": asdict(opts),
        "rows": rows,
        "recommended_guidance": {"w": recommended_guidance(rows), "rule": guidance_rule()},
    }
    return results, grids


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


# the evaluation's columns that a class mixture keeps, then the two accuracies
COLUMNS = [c for c in evaluate.COLUMNS if c[1] in ("fid_lenet", "fid_judge", "precision", "recall")]
ACCURACY = {"lenet": "accuracy (LeNet) mean / min", "judge": "accuracy (judge) mean / min"}


def results_tables(results: dict) -> str:
    """The sweep table (one row per w) and the per-class accuracy table."""
    sweep, per_class = [], []
    for row in results["rows"]:
        cells = [fmt.format(row[key]) for _, key, fmt in COLUMNS]
        for who in ACCURACY:
            cells.append(f"{row[who + '_accuracy_mean']:.3f} / {row[who + '_accuracy_min']:.3f}")
        sweep.append([f"{row['name']}: {row['what']}", *cells])
        pairs = zip(row["lenet_accuracy"], row["judge_accuracy"], strict=True)
        per_class.append([row["name"], *(f"{a:.3f} / {b:.3f}" for a, b in pairs)])
    sweep_table = markdown_table(["sampler", *(c[0] for c in COLUMNS), *ACCURACY.values()], sweep)
    class_table = markdown_table(["w", *range(results["classes"])], per_class)
    note = "Per class, the share of samples classified as the class asked for (LeNet / judge):"
    return f"{sweep_table}\n\n{note}\n\n{class_table}\n"


def sweep_figure(results: dict, path: Path) -> Path:
    """FID (LeNet) and FID (judge) against mean LeNet accuracy, one point per w."""
    rows = results["rows"]
    fig = new_figure(5, 3.6, dpi=120)
    ax = fig.add_subplot(1, 1, 1)
    for key, label in (("fid_lenet", "FID (LeNet)"), ("fid_judge", "FID (judge)")):
        xs = [r["lenet_accuracy_mean"] for r in rows]
        ys = [r[key] for r in rows]
        ax.plot(xs, ys, "o-", label=label)
        for r, x, y in zip(rows, xs, ys, strict=True):
            ax.annotate(r["name"], (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel("class accuracy of the samples (LeNet, mean over classes)")
    ax.set_ylabel("FID of the class mixture")
    ax.legend()
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def write_sweep(results: dict, grids: dict[str, Tensor], out: str | Path) -> list[Path]:
    """``results.json``, ``results.md``, ``guidance.png`` and one class grid per w."""
    from ..data import save_grid

    out = Path(out)
    paths = [write_json(out / "results.json", results)]
    title = results.get("title", "Class-conditional evaluation")
    paths.append(write_text(out / "results.md", f"# {title}\n\n{results_tables(results)}"))
    paths.append(sweep_figure(results, out / "guidance.png"))
    for name, images in grids.items():
        path = out / f"grid_{name.replace('=', '')}.png"
        save_grid(images.clamp(0, 1), path, nrow=results["classes"], scale=2)
        paths.append(path)
    return paths
