"""The recommended guidance of a class-conditional model, on a finer grid of w.

    python benchmarks/guidance_choice.py [RUN] [--n 300] [--out DIR]

For each guidance weight ``w`` of the grid (default 0.5, 0.625, 0.75, 0.875, 1) and each class
``c``, draws ``--n`` samples of class ``c`` from the run's sampler (EMA weights, the trained map
alone) with the same noise for every ``w`` (seed ``c``), and measures the share that the LeNet,
and the held-out judge, classify as ``c``. The recommended guidance is chosen by the rule of
:func:`linearizer.flow.conditional.recommended_guidance`, on the LeNet alone; the judge's
accuracy is reported beside it and never chooses. Writes ``DIR/guidance_choice.json`` (with
the device, the torch version and the date) and ``DIR/guidance_choice.md``.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import cast

import torch

import linearizer.pretrained  # noqa: F401  (registers pretrained:NAME)
from linearizer.flow.conditional import (
    THRESHOLD,
    class_accuracy,
    guidance_rule,
    recommended_guidance,
)
from linearizer.flow.model import OneStepFlow
from linearizer.flow.spec import SamplerSpec
from linearizer.io import write_json, write_text
from linearizer.metrics.classifier import lenet_view, load_classifier, predict_logits
from linearizer.metrics.judge import load_judge
from linearizer.report import markdown_table
from linearizer.training.runs import load_run

GRID = (0.5, 0.625, 0.75, 0.875, 1.0)


def cpu_name() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else what ``platform`` says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def class_samples(model: OneStepFlow, spec: SamplerSpec, c: int, n: int) -> torch.Tensor:
    """``n`` samples of class ``c`` from noise of seed ``c`` (the same noise for every w)."""
    shape = model.image_shape
    assert shape is not None  # a built model knows its images' shape
    x0 = spec.noise(n, shape, torch.Generator().manual_seed(c))
    with torch.no_grad():
        return model.sample(x0.to(next(model.parameters()).dtype), spec).float().clamp(0, 1)


def measure(model: OneStepFlow, base: SamplerSpec, w: float, n: int, nets: dict) -> dict:
    """One row: per class, the LeNet's and the judge's accuracy on ``n`` samples at ``w``."""
    start = time.perf_counter()
    images, labels = [], []
    for c in range(model.classes):
        images.append(class_samples(model, base.replace(label=c, guidance=w), c, n))
        labels.append(torch.full((n,), c))
    view, asked = lenet_view(torch.cat(images)), torch.cat(labels)
    row: dict = {"w": w, "spec": base.replace(guidance=w).to_dict()}
    for who, net in nets.items():
        acc = class_accuracy(predict_logits(net, view).argmax(1), asked, model.classes)
        row[f"{who}_accuracy"] = acc
        row[f"{who}_accuracy_mean"] = sum(acc) / len(acc)
        row[f"{who}_accuracy_min"] = min(acc)
    row["seconds"] = time.perf_counter() - start
    return row


def table(rows: list[dict]) -> str:
    return markdown_table(
        ["w", "LeNet min", "LeNet mean", "judge min", "judge mean"],
        [
            [
                f"{r['w']:g}",
                f"{r['lenet_accuracy_min']:.3f}",
                f"{r['lenet_accuracy_mean']:.3f}",
                f"{r['judge_accuracy_min']:.3f}",
                f"{r['judge_accuracy_mean']:.3f}",
            ]
            for r in rows
        ],
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", nargs="?", default="pretrained:mnist-cond")
    p.add_argument("--n", type=int, default=300, help="samples per class and w")
    p.add_argument("--grid", default=",".join(f"{w:g}" for w in GRID), help="the weights w")
    p.add_argument("--threshold", type=float, default=THRESHOLD)
    p.add_argument("--all", action="store_true", help="measure every w, not up to the first pass")
    p.add_argument("--out", default="docs/conditional/guidance_choice")
    args = p.parse_args()
    grid = sorted(float(v) for v in args.grid.split(",") if v.strip())
    run = load_run(args.run)
    if not run.model.classes:
        sys.exit(f"{args.run} is not class-conditional")
    base = run.config.sampler.replace(label=None)
    nets = {"lenet": load_classifier(), "judge": load_judge()}
    start, rows, chosen = time.perf_counter(), [], None
    for w in grid:
        rows.append(measure(cast(OneStepFlow, run.model), base, w, args.n, nets))
        r = rows[-1]
        print(
            f"w={w:g}: LeNet min {r['lenet_accuracy_min']:.3f} mean "
            f"{r['lenet_accuracy_mean']:.3f}, judge min {r['judge_accuracy_min']:.3f} mean "
            f"{r['judge_accuracy_mean']:.3f} ({r['seconds']:.0f} s)",
            flush=True,
        )
        chosen = write(args, run, grid, rows, time.perf_counter() - start)
        # the rule takes the smallest passing w: the larger ones cannot change it
        if chosen is not None and not args.all:
            break
    print(f"chosen w = {chosen} -> {Path(args.out) / 'guidance_choice.json'}")
    return 0


def write(args: argparse.Namespace, run, grid: list[float], rows: list[dict], seconds: float):
    """Write the JSON and the table of the rows so far; the chosen w (None: none passes)."""
    chosen = recommended_guidance(rows, args.threshold)
    at = next((r for r in rows if r["w"] == chosen), None)
    measured = {r["w"] for r in rows}
    results = {
        "run": args.run,
        "step": run.step,
        "weights": run.weights,
        "n_per_class": args.n,
        "classes": run.model.classes,
        "noise": "class c: seed c, the same noise for every w",
        "threshold": args.threshold,
        "rule": guidance_rule(args.threshold),
        "grid": grid,
        "not_measured": [w for w in grid if w not in measured],
        "chosen_w": chosen,
        "judge_accuracy_min_at_chosen": None if at is None else at["judge_accuracy_min"],
        "judge_accuracy_at_chosen": None if at is None else at["judge_accuracy"],
        "rows": rows,
        "device": cpu_name(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "library_version": linearizer.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "seconds": seconds,
        "command": "python benchmarks/guidance_choice.py " + shlex.join(sys.argv[1:]),
    }
    out = Path(args.out)
    write_json(out / "guidance_choice.json", results)
    skipped = ", ".join(f"{w:g}" for w in results["not_measured"])
    write_text(
        out / "guidance_choice.md",
        f"# Recommended guidance of {args.run}\n\n{args.n} samples per class and w, "
        f"{results['device']}, torch {results['torch']}, {results['date']}.\n\n"
        f"Rule: {results['rule']}.\n\n{table(rows)}\n\n"
        + (f"Not measured (a smaller w meets the rule): {skipped}.\n\n" if skipped else "")
        + f"Chosen: w = {'none' if chosen is None else f'{chosen:g}'}.\n",
    )
    return chosen


if __name__ == "__main__":
    raise SystemExit(main())
