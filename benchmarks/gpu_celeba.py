"""The GPU check of the ``celeba`` preset (64 x 64 x 3, D = 12,288; the authors' CelebA
configuration): steps/s and peak memory of training, the one-step matrix B at T = 100 dense vs
factored (time, bytes, agreement of their samples), one-step sampling throughput, a sample grid.

    python benchmarks/gpu_celeba.py --steps 300 --minutes 4 --out "$OUT/celeba" [--celeba ROOT]

CelebA is used when ``--celeba ROOT`` (or ``$CELEBA_ROOT``) holds ``img_align_celeba/`` and
``list_eval_partition.txt``; otherwise synthetic colour images (``synthetic-rgb``) of the same
size, which exercise every code path and give the same speed and memory figures. The first CelebA
load decodes 162,770 JPEGs (minutes) into the dataset cache; carry a ``$LINEARIZER_DATA`` that
already holds ``folders/celeba-*.npz`` from an earlier load to stay within the step's time.
``--device cpu --tiny --steps 2`` is a local smoke test of the same path.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import torch
from gpu_check import peak_mib, peak_reset, step_probe, sync

from linearizer.flow.task import FlowTask, load_images
from linearizer.io import write_json
from linearizer.training.config import resolve
from linearizer.training.trainer import train

TINY = ["blocks=1", "hidden=8", "lora_emb=16", "lora_hidden=32", "img_size=8", "batch_size=4"]


def dataset_settings(root: str) -> tuple[list[str], str]:
    """``data.*`` overrides: CelebA when ``root`` holds its layout, else synthetic colour."""
    if root and (Path(root) / "img_align_celeba").is_dir():
        return ["dataset=celeba", f"data_root={root}"], "celeba"
    return ["dataset=synthetic-rgb"], "synthetic-rgb"


@torch.no_grad()
def one_step_figures(model, device: torch.device, n: int, out: Path) -> dict:
    """B at T = 100 (Euler, float64) dense and factored: build time, size, sample agreement."""
    from linearizer.data import save_grid

    model.eval()
    res: dict = {}
    gen = torch.Generator(device=device).manual_seed(1)
    noise = torch.randn(n, *model.image_shape, device=device, generator=gen)
    images = {}
    for form in ("dense", "factored"):
        model._cache.clear()  # time the build, not the cache
        peak_reset(device)
        sync(device)
        start = time.perf_counter()
        b = model.one_step_operator(steps=100, final="skip", dtype=torch.float64, form=form)
        sync(device)
        res[f"B_T100_{form}_s"] = time.perf_counter() - start
        res[f"B_T100_{form}_peak_mib"] = peak_mib(device)
        res[f"B_T100_{form}_mib"] = (b.nbytes if form == "factored" else b.numel() * 8) / 2**20
        parts = []
        sync(device)
        start = time.perf_counter()
        for chunk in noise.split(500):
            parts.append(
                model.sample(chunk, steps=100, final="skip", dtype=torch.float64, form=form)
            )
        sync(device)
        res[f"one_step_{form}_images_per_s"] = n / (time.perf_counter() - start)
        images[form] = torch.cat(parts).float()
        del b
        model._cache.clear()
    diff = (images["dense"] - images["factored"]).abs().max()
    res["dense_vs_factored_max_abs"] = float(diff)
    save_grid(images["factored"][:64].clamp(0, 1).cpu(), out / "samples.png", scale=2)
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=300, help="training steps (fixed)")
    p.add_argument("--minutes", type=float, default=4.0, help="safety cap on training time")
    p.add_argument("--samples", type=int, default=1000, help="one-step samples to time")
    p.add_argument("--probe-steps", type=int, default=10, help="steps of each memory probe")
    p.add_argument("--celeba", default=os.environ.get("CELEBA_ROOT", ""), help="CelebA folder")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true", help="a tiny network (local smoke test)")
    p.add_argument("--out", default="gpu-celeba-out", help="output folder")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_celeba: no CUDA device visible to torch", file=sys.stderr)
        return 2
    data, source = dataset_settings(args.celeba)
    settings = [
        f"max_steps={args.steps}",
        f"max_minutes={args.minutes}",
        f"device={args.device}",
        "ckpt_every=0",
        "eval_every=0",
        "progress=false",
        "log_every=25",
        "sampler.steps=100",
        *data,
    ]
    cfg = resolve("flow", "celeba", settings + (TINY if args.tiny else []))
    report: dict = {"torch": torch.__version__, "data": source, "config": cfg.to_dict()}
    if device.type == "cuda":
        report["gpu"] = torch.cuda.get_device_name(device)
    print(json.dumps({"start": report.get("gpu", "cpu"), "data": source}), flush=True)

    report["probe"] = [step_probe(cfg, device, ms, args.probe_steps) for ms in (False, True)]
    print(json.dumps(report["probe"]), flush=True)
    if device.type == "cuda":
        torch.cuda.empty_cache()

    run = out / "run"
    shutil.rmtree(run, ignore_errors=True)
    peak_reset(device)
    images, _ = load_images(cfg, "train")
    result = train(FlowTask(images), cfg, run)
    report["train"] = {
        "steps": result.step,
        "stopped": result.stopped,
        "loss": result.loss,
        "seconds": result.seconds,
        "steps_per_s": result.steps_per_s,
        "images_per_s": result.steps_per_s * cfg.batch_size,
        "peak_mib": peak_mib(device),
    }
    print(json.dumps(report["train"]), flush=True)
    report["one_step"] = one_step_figures(result.model, device, args.samples, out)
    print(json.dumps(report["one_step"]), flush=True)
    write_json(out / "gpu_celeba.json", report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
