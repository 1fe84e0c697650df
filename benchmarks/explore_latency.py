"""Latency of every interaction of ``linearizer explore``, measured two ways.

    python benchmarks/explore_latency.py [--run RUN ...] [--threads 2] [--repeats 7]
                                         [--out FILE.json] [--quick]

For each run (a folder, ``pretrained:NAME``, or ``untrained:KIND``: the ``cpu`` preset of flow,
projective or style freshly initialised, since latency does not depend on the weights' values;
default: all three untrained), this opens the explorer (the one-time cost: load,
collapse B, SVD) and then times each interaction:

* ``handler``: the Python handler the page calls (median of ``--repeats`` calls after one warm-up);
* ``served``: the same interaction through the page served on 127.0.0.1 in this process, driven by
  ``gradio_client`` (request, queue, handler, PNG encoding, download; median likewise).

``--quick`` uses the smoke presets and 2 repeats (a smoke test of this script, not a measurement).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from linearizer.explore import Explorer, build_app, launch, open_run
from linearizer.training.config import resolve
from linearizer.training.runs import Run

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


def untrained(kind: str, preset: str) -> Run:
    """A freshly initialised model of ``kind``'s ``preset`` as a run (step 0)."""
    cfg = resolve(kind, preset)
    torch.manual_seed(0)
    if kind == "flow":
        from linearizer.flow.build import build_flow

        model = build_flow(cfg, channels=1)
    elif kind == "projective":
        from linearizer.projective.task import build_model

        model = build_model(cfg)
    else:
        from linearizer.style.build import build_style_model

        model = build_style_model(cfg, ["a", "b", "c", "d"])
    return Run(kind, model.eval(), cfg, 0, Path(f"({kind} {preset} preset, untrained)"))


def timed(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def digit_png(folder: Path) -> str:
    img = np.zeros((200, 200, 4), np.uint8)
    img[30:170, 90:112] = (0, 0, 0, 255)
    path = folder / "digit.png"
    Image.fromarray(img).save(path)
    return str(path)


def interactions(ex: Explorer, digit: str, handle_file) -> list[tuple[str, object, tuple, str]]:
    """(name, handler call, served args, api name) for each interaction of the run's tabs."""
    drawing = np.array(Image.open(digit))
    sketch = {"background": None, "layers": [], "composite": handle_file(digit)}
    cases = []
    if ex.flow:
        f = ex.flow
        T, m = f.steps, f.method
        zeros = [0.0] * f.k
        cases += [
            (f"generate 8 ({m} T={T})", lambda: f.generate(1, 8, T, m), (1, 8, T, m), "/generate"),
            (
                "generate 8 (rk4 T=100)",
                lambda: f.generate(1, 8, 100, "rk4"),
                (1, 8, 100, "rk4"),
                "/generate",
            ),
            (
                "walk (one slider moved)",
                lambda: f.walk(0, [1.5] + zeros[1:]),
                (0, 1.5, *zeros[1:]),
                "/walk",
            ),
            ("invert a drawing", lambda: f.invert(drawing), (sketch, None, 0), "/invert"),
            (
                "interpolate (8 frames)",
                lambda: f.interpolate(drawing, f.sample_picture(1), 8),
                (None, handle_file(digit), 0, None, 1, 8),
                "/interpolate",
            ),
        ]
    if ex.projective:
        p = ex.projective
        cases += [
            (
                "project a drawing (blur)",
                lambda: p.project(p.model_input(drawing), "blur", 0),
                (sketch, None, "blur", 0),
                "/project",
            )
        ]
        if p.tasks:
            cases.append(
                (
                    f"restore ({p.tasks[0]}, 4 methods)",
                    lambda: p.restore(p.model_input(drawing), p.tasks[0], 0),
                    (sketch, None, 0, p.tasks[0]),
                    "/restore",
                )
            )
    if ex.style:
        s = ex.style
        name = next(iter(s.contents))
        w = [1.0] + [0.0] * (len(s.styles) - 1)
        if s.is_bank:
            x = s.content(name)
            cases += [
                (
                    "style mix + every style",
                    lambda: (s.mix(x, w, 0.8), s.pure_styles(x)),
                    (name, None, 0.8, *w),
                    "/style_mix",
                )
            ]
    return cases


def measure(run: Run, repeats: int, folder: Path) -> dict:
    from gradio_client import Client, handle_file

    t = time.perf_counter()
    ex = Explorer(run)
    opened = time.perf_counter() - t
    demo = build_app(ex)
    launch(demo, host="127.0.0.1", port=None, block=False)
    client = Client(demo.local_url, verbose=False)
    rows = []
    try:
        for name, call, args, api in interactions(ex, digit_png(folder), handle_file):
            handler = timed(call, repeats)
            served = timed(lambda a=args, api=api: client.predict(*a, api_name=api), repeats)
            rows.append({"interaction": name, "handler_s": handler, "served_s": served})
            print(f"| {run.path} | {name} | {1e3 * handler:.0f} | {1e3 * served:.0f} |", flush=True)
    finally:
        demo.close()
    return {"run": str(run.path), "kind": ex.kind, "open_s": opened, "rows": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", action="append", default=[], help="run folder or pretrained:NAME")
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--repeats", type=int, default=7, help="timed calls per case (median)")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--quick", action="store_true", help="smoke presets, 2 repeats")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    preset = "smoke" if args.quick else "cpu"
    specs = args.run or ["untrained:flow", "untrained:projective", "untrained:style"]
    runs = [
        untrained(s.split(":", 1)[1], preset) if s.startswith("untrained:") else open_run(s)
        for s in specs
    ]
    repeats = 2 if args.quick else args.repeats
    print("| run | interaction | handler ms | served ms |\n|---|---|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        results = [measure(run, repeats, Path(tmp)) for run in runs]
    for r in results:
        print(f"opened {r['run']} in {r['open_s']:.2f} s")
    report = {
        "threads": args.threads,
        "repeats": repeats,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "results": results,
    }
    if args.out:
        from linearizer.io import write_json

        write_json(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
