"""The prepared GPU check: train the ``paper`` preset for a fixed number of steps or minutes,
then report steps/s, peak GPU memory (with and without memory-saving backprop), the time to build
B (T = 100 and 1000, float64 and float32), one-step and multi-step sampling throughput and a quick
FID (LeNet). Meant for ``benchmarks/gpu_check.sh`` and ``benchmarks/gpu_paper.sh`` on a machine
with a GPU (<= 10 min).

    python benchmarks/gpu_check.py --steps 600 --minutes 5 --samples 5000 --out "$OUT"

Everything goes to ``--out``: ``gpu_check.json`` (all numbers), ``samples.png`` and
``metrics.jsonl`` of the run; ``--run DIR`` keeps the trained run folder there. ``--device cpu
--steps 2 --samples 64 --tiny`` is a local smoke test of the same code path.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import torch

from linearizer.flow.build import build_flow
from linearizer.flow.config import PAPER
from linearizer.flow.objective import draw_noise, flow_loss
from linearizer.flow.task import FlowTask, load_images
from linearizer.invertible.dropout import set_dropout_seed
from linearizer.io import write_json
from linearizer.training.config import apply_overrides
from linearizer.training.trainer import train

# Flat keys, so the same overrides read before and after a config's sections move.
TINY = ["blocks=1", "hidden=8", "lora_emb=16", "lora_hidden=32", "batch_size=8"]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_reset(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_mib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None


def step_probe(cfg, device: torch.device, memory_saving: bool, steps: int) -> dict:
    """Steps/s and peak memory of plain training steps on a fresh model (random images with the
    data's channel count)."""
    torch.manual_seed(0)
    cfg = apply_overrides(cfg, [f"memory_saving={memory_saving}"])
    model = build_flow(cfg, channels=cfg.data.channels).to(device).train()
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    gen = torch.Generator(device=device).manual_seed(0)
    x1 = torch.rand(cfg.batch_size, *model.image_shape, device=device, generator=gen)
    with torch.no_grad():
        model.encode(x1, 0.0)  # ActNorm start

    def one(i: int) -> None:
        set_dropout_seed(model, i)
        loss, _ = flow_loss(model, x1, draw_noise(x1, gen), noise_level=cfg.noise_level)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    one(0)
    sync(device)
    peak_reset(device)
    start = time.perf_counter()
    for i in range(steps):
        one(i + 1)
    sync(device)
    seconds = time.perf_counter() - start
    return {
        "memory_saving": memory_saving,
        "batch": cfg.batch_size,
        "steps": steps,
        "steps_per_s": steps / seconds,
        "peak_mib": peak_mib(device),
    }


@torch.no_grad()
def sample_and_fid(model, cfg, device: torch.device, n: int, out: Path) -> dict:
    from linearizer.data import save_grid
    from linearizer.metrics.fid import fid_lenet

    model.eval()
    res = {}
    for steps in (100, 1000):
        for name, dtype in (("f64", torch.float64), ("f32", torch.float32)):
            model._cache.clear()  # time the build, not the cache
            sync(device)
            start = time.perf_counter()
            model.one_step_matrix(steps=steps, final="skip", dtype=dtype)
            sync(device)
            res[f"B_T{steps}_euler_{name}_s"] = time.perf_counter() - start
    gen = torch.Generator(device=device).manual_seed(1)
    noise = torch.randn(n, *model.image_shape, device=device, generator=gen)
    parts = []
    sync(device)
    start = time.perf_counter()
    for chunk in noise.split(1000):
        parts.append(model.sample(chunk, steps=100, final="skip", dtype=chunk.dtype).clamp(0, 1))
    sync(device)
    seconds = time.perf_counter() - start
    images = torch.cat(parts).float().cpu()
    save_grid(images[:64], out / "samples.png", scale=2)
    res.update({"samples": n, "one_step_images_per_s": n / seconds})
    sync(device)
    start = time.perf_counter()
    multi = model.sample(noise[:1000], steps=100, final="skip", dtype=noise.dtype, one_step=False)
    sync(device)
    res["multi_step_T100_images_per_s"] = min(n, 1000) / (time.perf_counter() - start)
    if model.image_shape[:2] == (1, 32):  # FID (LeNet) is defined on 32x32 grey digits only
        test, _ = load_images(cfg, "test")
        res["fid_lenet_one_step_T100"] = fid_lenet(images, test)
        multi = multi.clamp(0, 1).float().cpu()
        res["fid_lenet_multistep_T100_first1000"] = fid_lenet(multi, test)
        res["fid_lenet_one_step_T100_first1000"] = fid_lenet(images[:1000], test)
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=600, help="training steps (fixed)")
    p.add_argument("--minutes", type=float, default=5.0, help="safety cap on training time")
    p.add_argument("--samples", type=int, default=5000, help="images for the quick FID")
    p.add_argument("--probe-steps", type=int, default=20, help="steps of each memory probe")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true", help="a tiny network (local smoke test)")
    p.add_argument("--dataset", default="mnist", help="mnist, or synthetic for a smoke test")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra config override (repeatable)",
    )
    p.add_argument("--out", default="gpu-check-out", help="output folder")
    p.add_argument("--run", default="", help="run folder to train into (default: a scratch one)")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device visible to torch", file=sys.stderr)
        return 2
    settings = [
        f"max_steps={args.steps}",
        f"max_minutes={args.minutes}",
        f"device={args.device}",
        "ckpt_every=0",
        "eval_every=0",
        "progress=false",
        "log_every=25",
        "sampler.steps=100",
        f"dataset={args.dataset}",
    ]
    cfg = apply_overrides(PAPER, settings + (TINY if args.tiny else []) + args.set)
    report: dict = {"torch": torch.__version__, "config": cfg.to_dict()}
    if device.type == "cuda":
        report["gpu"] = torch.cuda.get_device_name(device)
    print(json.dumps({"start": report.get("gpu", "cpu")}), flush=True)

    # 1. memory and speed of single steps, with and without memory-saving backprop
    report["probe"] = [step_probe(cfg, device, ms, args.probe_steps) for ms in (False, True)]
    print(json.dumps(report["probe"]), flush=True)
    if device.type == "cuda":
        torch.cuda.empty_cache()

    # 2. the real training path (trainer, MNIST, the preset's objective), fixed step count
    run = Path(args.run) if args.run else out / "run"
    shutil.rmtree(run, ignore_errors=True)
    peak_reset(device)
    result = train(FlowTask(), cfg, run)
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
    if (run / "metrics.jsonl").is_file():
        shutil.copy(run / "metrics.jsonl", out / "metrics.jsonl")

    # 3. sampling throughput and a quick FID (LeNet) of the trained weights
    report["sampling"] = sample_and_fid(result.model, cfg, device, args.samples, out)
    print(json.dumps(report["sampling"]), flush=True)
    write_json(out / "gpu_check.json", report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
