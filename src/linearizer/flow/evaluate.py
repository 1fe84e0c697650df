"""Sample quality of a one-step flow model: FID/KID (LeNet), precision/recall, LeNet confidence.

:func:`evaluate_flow` draws ``n`` one-step samples per sampler (the same noise for every
sampler, ``x0 ~ N(0, tau^2 I)`` at the first row's temperature), decodes them, and measures
them against the reference images (the run's test split: the 10,000 MNIST test images) on the
84-d features of our MNIST classifier (:mod:`linearizer.metrics.classifier`):

* FID (LeNet) and KID (LeNet) (:mod:`linearizer.metrics.fid`),
* FID (judge): the same distance on the held-out classifier's features
  (:mod:`linearizer.metrics.judge`), which no setting was ever chosen on,
* improved precision and recall, ``k = 3`` (:mod:`linearizer.metrics.precision_recall`),
* LeNet mean confidence (mean max-softmax), entropy and the histogram of predicted classes.

Every row names its full :class:`~linearizer.flow.spec.SamplerSpec`. The trained map alone (the
paper's method) is always the first row; rows with the post-hoc latent maps
(:mod:`linearizer.flow.calibration`) come only when the spec asks for them, after it.

Reference rows put the numbers in scale: ``n`` random training images (the best a generator
can do) and ``n`` uniform-noise images (about the worst). Samples are clamped to [0, 1] before
the classifier sees them, as in every grid. Nothing here depends on the CLI; the command
``linearizer evaluate`` (``cli/cmd_evaluate.py``) adds loading and writing.

>>> [name for name, _ in default_rows(SamplerSpec(maps="transport"))]
['method', 'authors-grid', 'calibration', 'transport']
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import Tensor

from ..config import Config, option
from ..data import save_grid
from ..errors import LinearizerError
from ..io import write_json, write_text
from ..metrics import classifier_stats, fid_from_features, kid_from_features, lenet_features
from ..metrics.classifier import LeNet, lenet_view, load_classifier
from ..metrics.judge import judge_features, load_judge
from ..metrics.precision_recall import coverage_share, knn_radii
from ..report import markdown_table
from .model import OneStepFlow
from .spec import SamplerSpec

Row = tuple[str, SamplerSpec]


def default_rows(spec: SamplerSpec) -> list[Row]:
    """The rows of every evaluation: ``spec``'s sampler with the trained map alone, the
    authors' grid (T = 100, last interval skipped) and, when ``spec`` asks for post-hoc maps,
    the calibration K and then K with the transport, each beside the method alone."""
    rows = [("method", spec.replace(maps="none"))]
    if spec.schedule != (100, spec.method, "skip"):
        rows.append(("authors-grid", spec.replace(steps=100, final="skip", maps="none")))
    if spec.maps != "none":
        rows.append(("calibration", spec.replace(maps="calibration")))
    if spec.maps == "transport":
        rows.append(("transport", spec))
    return rows


@dataclass(frozen=True)
class EvalOptions(Config):
    """The sizes of an evaluation (``linearizer evaluate``'s options, one per field), checked
    when made."""

    n: int = option(10_000, "samples per sampler")
    seed: int = option(0, "seed of the noise (same for all samplers)")
    batch: int = option(1000, "images per network pass")
    k: int = option(3, "nearest neighbours of precision/recall")
    kid_subsets: int = option(50, "random subsets of KID")
    references: bool = option(True, "the training-images and uniform-noise rows")

    def validate(self) -> None:
        if self.n < max(self.k + 1, 2):
            raise LinearizerError(f"--n must be at least {max(self.k + 1, 2)}, got {self.n}")
        if self.batch < 1 or self.k < 1 or self.kid_subsets < 1:
            raise LinearizerError("--batch, --k and --kid-subsets must be >= 1")


Progress = Callable[[int], None]


class Reference:
    """Features, k-NN radii and classifier view of the reference images, computed once."""

    def __init__(self, images: Tensor, classifier: LeNet, opts: EvalOptions) -> None:
        self.classifier, self.opts = classifier, opts
        self.judge = load_judge()
        self.images = lenet_view(images)
        self.features = lenet_features(self.images, classifier, opts.batch)
        self.judged = judge_features(self.images, self.judge, opts.batch)
        self.radii = knn_radii(self.features, opts.k)

    def measure(self, images: Tensor) -> dict:
        """Every number of one image set against the reference (see the module docstring)."""
        x = lenet_view(images)
        f = lenet_features(x, self.classifier, self.opts.batch)
        m = min(1000, len(f), len(self.features))
        kid, kid_std = kid_from_features(f, self.features, m, self.opts.kid_subsets)
        stats = classifier_stats(x, model=self.classifier)
        hist = stats["class_histogram"]
        return {
            "n": len(x),
            "fid_lenet": fid_from_features(f, self.features),
            "fid_judge": fid_from_features(
                judge_features(x, self.judge, self.opts.batch), self.judged
            ),
            "kid_lenet": kid,
            "kid_lenet_std": kid_std,
            "precision": coverage_share(f, self.features, self.radii),
            "recall": coverage_share(self.features, f, knn_radii(f, self.opts.k)),
            "confidence": stats["mean_max_prob"],
            "entropy": stats["mean_entropy"],
            "class_histogram": hist,
            "min_class_share": min(hist) / max(sum(hist), 1),
        }


def draw_samples(
    model: OneStepFlow,
    noise: Tensor,
    spec: SamplerSpec,
    opts: EvalOptions,
    progress: Progress | None = None,
    labels: Tensor | None = None,
) -> Tensor:
    """Decode ``noise`` through the collapsed sampler, batch by batch (float32 images, CPU);
    ``labels``: each row's class, for a class-conditional model's mixture."""
    param = next(model.parameters())
    out = []
    chunks = noise.split(opts.batch)
    parts = labels.split(opts.batch) if labels is not None else [None] * len(chunks)
    for part, part_labels in zip(chunks, parts, strict=True):
        x = model.sample(part.to(param.device, param.dtype), spec, labels=part_labels)
        out.append(x.float().cpu())
        if progress:
            progress(len(part))
    return torch.cat(out)


def sampler_row(name: str, what: str, spec: SamplerSpec, seconds: float) -> dict:
    """The fields a sampler's row of results starts with: its name, what it is, its full spec
    and the seconds its samples took (the measurements follow)."""
    return {"name": name, "what": what, "spec": spec.to_dict(), "sample_seconds": seconds}


def _components(model: OneStepFlow, opts: EvalOptions) -> Tensor | None:
    """A mixture's component per sample, drawn once from the mixture weights with the
    evaluation's seed (its own stream, so the noise and the reference rows stay as they are):
    every row then draws the same images' components, and a rerun the same samples."""
    if model.components == 1:
        return None
    return model.draw_labels(opts.n, torch.Generator().manual_seed(opts.seed * 1000 + 1))


def evaluate_flow(
    model: OneStepFlow,
    reference: Tensor,
    rows: Iterable[Row] | None = None,
    opts: EvalOptions | None = None,
    train_images: Tensor | None = None,
    classifier: LeNet | None = None,
    progress: Progress | None = None,
) -> tuple[dict, dict[str, Tensor]]:
    """Measure ``model``'s samples against ``reference`` images.

    ``rows``: ``(name, spec)`` pairs (default :func:`default_rows` of :class:`SamplerSpec`);
    every row draws the same noise, at the first row's temperature. Returns
    ``(results, samples)``: ``results["rows"]`` holds one dict per sampler, with its full spec
    (and the reference rows ``train images`` / ``uniform noise`` when ``opts.references`` and
    ``train_images`` is given for the first), ``samples`` the first 64 images of each sampler.
    """
    opts = opts or EvalOptions()
    rows = list(rows or default_rows(SamplerSpec()))
    classifier = classifier or load_classifier()
    if len(reference) < max(opts.k + 1, 2):
        raise LinearizerError(f"the reference set needs more than {opts.k} images")
    ref = Reference(reference, classifier, opts)
    for _, spec in rows:
        model.maps(spec)  # refuse a row the model cannot sample before any work
    gen = torch.Generator().manual_seed(opts.seed)
    noise = rows[0][1].noise(opts.n, model.image_shape, gen)
    labels = _components(model, opts)
    measured, keep = [], {}
    for name, spec in rows:
        start = time.perf_counter()
        images = draw_samples(model, noise, spec, opts, progress, labels)
        seconds = time.perf_counter() - start
        measured.append(
            {**sampler_row(name, spec.describe(), spec, seconds), **ref.measure(images)}
        )
        keep[name] = images[:64]
    if opts.references:
        if train_images is not None:
            pick = torch.randperm(len(train_images), generator=gen)[: opts.n]
            measured.append(
                {
                    "name": "train",
                    "what": f"{len(pick)} random training images",
                    **ref.measure(train_images[pick]),
                }
            )
        uniform = torch.rand(opts.n, 1, 32, 32, generator=gen)
        measured.append(
            {"name": "uniform", "what": f"{opts.n} uniform-noise images", **ref.measure(uniform)}
        )
    results = {
        "n": opts.n,
        "reference_images": len(reference),
        "reference_confidence": classifier_stats(ref.images, model=classifier)["mean_max_prob"],
        "options": asdict(opts),
        "rows": measured,
    }
    return results, keep


# --- writing ---------------------------------------------------------------------------------

COLUMNS = (
    ("FID (LeNet)", "fid_lenet", "{:.1f}"),
    ("FID (judge)", "fid_judge", "{:.1f}"),
    ("KID (LeNet)", "kid_lenet", "{:.1f}"),
    ("precision", "precision", "{:.3f}"),
    ("recall", "recall", "{:.3f}"),
    ("confidence", "confidence", "{:.3f}"),
    ("smallest class", "min_class_share", "{:.1%}"),
)


def results_table(results: dict) -> str:
    """The results as a markdown table, one row per sampler or reference set."""
    rows = [
        [f"{row['name']}: {row['what']}", *(fmt.format(row[key]) for _, key, fmt in COLUMNS)]
        for row in results["rows"]
    ]
    return markdown_table(["set", *(c[0] for c in COLUMNS)], rows) + "\n"


def write_results(results: dict, samples: dict[str, Tensor], out: str | Path) -> list[Path]:
    """``results.json``, ``results.md`` and one grid ``grid_<sampler>.png`` per sampler."""
    out = Path(out)
    paths = [write_json(out / "results.json", results)]
    title = results.get("title", "Evaluation")
    paths.append(write_text(out / "results.md", f"# {title}\n\n{results_table(results)}"))
    for name, images in samples.items():
        path = out / f"grid_{name}.png"
        save_grid(images.clamp(0, 1), path, nrow=8, scale=2)
        paths.append(path)
    return paths
