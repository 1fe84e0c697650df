"""Class-conditional generation at equal training time: our one-step class mixture against
class-conditional flow matching with classifier-free guidance.

(a) ours: ``linearizer train flow --preset cpu-cond`` (25 minutes; trained separately, passed
    with ``--ours RUN``), sampled with the run's sampler, the trained map alone: one exact
    matrix ``B_{c,w}`` per class and guidance weight, two network passes per image.
(b) flow matching: torchcfm's ``UNetModel`` in the configuration of its MNIST example (32
    channels, one residual block per level) with ``class_cond=True`` and 11 class slots (the
    tenth is the null class), trained with sigma = 0 (``x_t = (1 - t) x0 + t x1``, target
    ``x1 - x0``; torchcfm's ``ConditionalFlowMatcher``), the null class on 10 % of the rows,
    Adam 1e-3, batch 32 (as in ``benchmarks/quality.py``), an EMA of decay 0.999 (warm-up
    ``min(0.999, (1 + s)/(10 + s))``), data in [-1, 1], for the same minutes on the same
    threads. Sampled with the guided velocity ``(1 + w) v(x, t, c) - w v(x, t, null)`` (two
    network evaluations per step when ``w != 0``) by Euler at 1, 2, 4 and 10 steps, and at 100
    steps and by scipy's RK45 on a subset (``--slow-samples``), which a CPU cannot afford on
    every sample.

Every row draws the same noise and the same classes (drawn from the training frequencies),
and gets FID (LeNet) and FID (judge) of the mixture against the 10,000 test images, and the
mean and smallest per-class accuracy of the samples on the LeNet and on the held-out judge.

    python benchmarks/conditional.py train-fm --minutes 25 --threads 2 --out runs/bench-cond
    python benchmarks/conditional.py evaluate --ours runs/cond25 --samples 2000 \\
        --guidance 0,2 --out runs/bench-cond

Needs ``pip install --no-deps torchcfm==1.0.7 POT`` (torchcfm's own dependencies would pull
torchvision).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from linearizer.io import load_tensors, save_tensors, write_json

ROOT = Path(__file__).resolve().parents[1]
CLASSES = 10
NULL = CLASSES
FAST_NFES = (1, 2, 4, 10)


def make_net() -> nn.Module:
    from torchcfm.models.unet import UNetModel

    return UNetModel(
        dim=(1, 32, 32), num_channels=32, num_res_blocks=1, class_cond=True, num_classes=CLASSES + 1
    )


def train_fm(
    out: Path,
    minutes: float,
    threads: int,
    seed: int,
    batch: int = 32,
    lr: float = 1e-3,
    drop: float = 0.1,
    decay: float = 0.999,
) -> dict:
    from torchcfm.conditional_flow_matching import ConditionalFlowMatcher

    from linearizer.flow.config import FlowConfig
    from linearizer.flow.task import load_images

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    images, labels = load_images(FlowConfig(), "train")
    net = make_net()
    ema = {k: v.detach().clone() for k, v in net.state_dict().items()}
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    matcher = ConditionalFlowMatcher(sigma=0.0)
    gen = torch.Generator().manual_seed(seed)
    start, steps, losses = time.perf_counter(), 0, []
    while time.perf_counter() - start < minutes * 60:
        idx = torch.randint(len(images), (batch,), generator=gen)
        x1, y = images[idx] * 2 - 1, labels[idx].clone()
        y[torch.rand(batch, generator=gen) < drop] = NULL
        x0 = torch.randn(x1.shape, generator=gen)
        t, xt, ut = matcher.sample_location_and_conditional_flow(x0, x1)
        loss = F.mse_loss(net(t, xt, y=y), ut)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        steps += 1
        d = min(decay, (1 + steps) / (10 + steps))
        with torch.no_grad():
            for k, v in net.state_dict().items():
                if v.is_floating_point():
                    ema[k].mul_(d).add_(v.detach(), alpha=1 - d)
                else:
                    ema[k].copy_(v)
        losses.append(float(loss.detach()))
        if steps % 100 == 0:
            print(f"fm step {steps} loss {np.mean(losses[-100:]):.4f}", flush=True)
    seconds = time.perf_counter() - start
    out.mkdir(parents=True, exist_ok=True)
    save_tensors(out / f"fm_seed{seed}.safetensors", {k: v.contiguous() for k, v in ema.items()})
    info = {
        "model": "torchcfm 1.0.7 UNetModel(dim=(1,32,32), num_channels=32, "
        "num_res_blocks=1, class_cond=True, num_classes=11)",
        "objective": f"torchcfm.ConditionalFlowMatcher(sigma=0), null class on {drop:.0%} of rows",
        "parameters": sum(p.numel() for p in net.parameters()),
        "steps": steps,
        "batch": batch,
        "lr": lr,
        "ema_decay": decay,
        "seed": seed,
        "seconds": seconds,
        "final_loss": float(np.mean(losses[-100:])),
        "threads": threads,
        "weights": "EMA",
    }
    write_json(out / f"fm_seed{seed}.json", info)
    return info


def guided(net: nn.Module, t: Tensor, x: Tensor, y: Tensor, w: float) -> Tensor:
    if w == 0:
        return net(t, x, y=y)
    both = net(torch.cat([t, t]), torch.cat([x, x]), y=torch.cat([y, torch.full_like(y, NULL)]))
    cond, null = both.chunk(2)
    return (1 + w) * cond - w * null


@torch.no_grad()
def fm_euler(net: nn.Module, x0: Tensor, y: Tensor, steps: int, w: float) -> Tensor:
    x = x0.clone()
    for i in range(steps):
        x = x + guided(net, torch.full((len(x),), i / steps), x, y, w) / steps
    return x


@torch.no_grad()
def fm_adaptive(net: nn.Module, x0: Tensor, y: Tensor, w: float, tol: float) -> tuple[Tensor, int]:
    from scipy.integrate import solve_ivp

    shape, count = x0.shape, [0]

    def rhs(t: float, state: np.ndarray) -> np.ndarray:
        count[0] += 1
        x = torch.from_numpy(state).float().reshape(shape)
        return guided(net, torch.full((shape[0],), float(t)), x, y, w).double().numpy().ravel()

    sol = solve_ivp(rhs, (0.0, 1.0), x0.double().numpy().ravel(), method="RK45", rtol=tol, atol=tol)
    return torch.from_numpy(sol.y[:, -1]).float().reshape(shape), count[0]


def _batched(fn, x0: Tensor, y: Tensor, batch: int) -> tuple[Tensor, float]:
    parts, start = [], time.perf_counter()
    for xs, ys in zip(x0.split(batch), y.split(batch), strict=True):
        parts.append(fn(xs, ys))
    return torch.cat(parts), time.perf_counter() - start


class Scorer:
    """FID (LeNet), FID (judge) and per-class accuracy of labelled samples."""

    def __init__(self) -> None:
        from linearizer.flow.config import FlowConfig
        from linearizer.flow.evaluate import EvalOptions, Reference
        from linearizer.flow.task import load_images
        from linearizer.metrics.classifier import load_classifier

        test, _ = load_images(FlowConfig(), "test")
        self.ref = Reference(test, load_classifier(), EvalOptions(n=len(test)))

    def __call__(self, images: Tensor, labels: Tensor) -> dict:
        from linearizer.flow.conditional import class_accuracy
        from linearizer.metrics.classifier import lenet_view, predict_logits

        m = self.ref.measure(images.clamp(0, 1))
        view = lenet_view(images)
        out = {
            "n": len(images),
            "fid_lenet": m["fid_lenet"],
            "fid_judge": m["fid_judge"],
            "precision": m["precision"],
            "recall": m["recall"],
        }
        for name, net in (("lenet", self.ref.classifier), ("judge", self.ref.judge)):
            acc = class_accuracy(predict_logits(net, view).argmax(1), labels, CLASSES)
            out[f"{name}_accuracy_mean"] = float(np.nanmean(acc))
            out[f"{name}_accuracy_min"] = float(np.nanmin(acc))
        return out


def evaluate(
    out: Path,
    ours: list[str],
    n: int,
    slow_n: int,
    guidances: list[float],
    threads: int,
    tol: float,
) -> dict:
    from linearizer.flow.task import load_flow_run

    torch.set_num_threads(threads)
    score = Scorer()
    gen = torch.Generator().manual_seed(1234)
    noise = torch.randn(n, 1, 32, 32, generator=gen)
    rows: list[dict] = []

    def add(row: dict, images: Tensor, labels: Tensor) -> None:
        row.update(score(images, labels))
        rows.append(row)
        print(json.dumps(row), flush=True)
        write_json(out / "conditional.partial.json", {"rows": rows})

    labels = None
    for run in ours:
        model, cfg, step = load_flow_run(run)
        labels = model.draw_labels(n, torch.Generator().manual_seed(4321))
        for w in guidances:
            spec = cfg.sampler.replace(guidance=w, dtype="float32")
            start = time.perf_counter()
            for c in range(CLASSES):
                model.one_step_matrix(spec.replace(label=c))
            build = time.perf_counter() - start
            x, dt = _batched(
                lambda xs, ys, s=spec, m=model: m.sample(xs, s, labels=ys), noise, labels, 500
            )
            add(
                {
                    "model": f"ours ({run}, step {step})",
                    "sampler": spec.describe(),
                    "guidance": w,
                    "nfe": 2,
                    "seconds": dt,
                    "ms_per_image": 1e3 * dt / n,
                    "B_build_s": build,
                },
                x,
                labels,
            )
    if labels is None:
        labels = torch.multinomial(
            torch.ones(CLASSES), n, replacement=True, generator=torch.Generator().manual_seed(4321)
        )
    for path in sorted(out.glob("fm_seed*.safetensors")):
        net = make_net()
        net.load_state_dict(load_tensors(path))
        net.eval()
        info = json.loads(path.with_suffix(".json").read_text())
        name = f"flow matching (seed {info['seed']}, {info['steps']} steps)"
        for w in guidances:
            evals = 1 if w == 0 else 2
            for k in FAST_NFES:
                x, dt = _batched(
                    lambda xs, ys, k=k, w=w, f=net: fm_euler(f, xs, ys, k, w), noise, labels, 250
                )
                add(
                    {
                        "model": name,
                        "sampler": f"Euler, {k} steps",
                        "guidance": w,
                        "nfe": k * evals,
                        "seconds": dt,
                        "ms_per_image": 1e3 * dt / n,
                    },
                    (x + 1) / 2,
                    labels,
                )
            if slow_n:
                xs, ys = noise[:slow_n], labels[:slow_n]
                x, dt = _batched(lambda a, b, w=w, f=net: fm_euler(f, a, b, 100, w), xs, ys, 250)
                add(
                    {
                        "model": name,
                        "sampler": "Euler, 100 steps",
                        "guidance": w,
                        "nfe": 100 * evals,
                        "seconds": dt,
                        "ms_per_image": 1e3 * dt / slow_n,
                    },
                    (x + 1) / 2,
                    ys,
                )
                start = time.perf_counter()
                x, count = fm_adaptive(net, xs, ys, w, tol)
                dt = time.perf_counter() - start
                add(
                    {
                        "model": name,
                        "sampler": f"RK45 (scipy), rtol=atol={tol:g}",
                        "guidance": w,
                        "nfe": count * evals,
                        "seconds": dt,
                        "ms_per_image": 1e3 * dt / slow_n,
                    },
                    (x + 1) / 2,
                    ys,
                )
    result = {
        "samples": n,
        "slow_samples": slow_n,
        "threads": threads,
        "reference": "MNIST test (10k) at 32x32",
        "torch": torch.__version__,
        "command": "python benchmarks/conditional.py " + " ".join(sys.argv[1:]),
        "fm": [json.loads(p.read_text()) for p in sorted(out.glob("fm_seed*.json"))],
        "rows": rows,
    }
    write_json(out / "conditional.json", result)
    return result


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("phase", choices=["train-fm", "evaluate"])
    p.add_argument("--minutes", type=float, default=25.0, help="flow matching's training budget")
    p.add_argument("--seed", type=int, default=0, help="flow matching's training seed")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ours", action="append", default=[], help="a conditional flow run to rate")
    p.add_argument("--samples", type=int, default=2000, help="samples per row")
    p.add_argument(
        "--slow-samples",
        type=int,
        default=500,
        help="samples of the 100-step and adaptive rows (0: skip them)",
    )
    p.add_argument("--guidance", default="0,2", help="guidance weights w, comma-separated")
    p.add_argument("--tol", type=float, default=1e-3, help="rtol = atol of the adaptive solver")
    p.add_argument("--out", default=str(ROOT / "runs" / "bench-cond"))
    a = p.parse_args(argv)
    out = Path(a.out)
    if a.phase == "train-fm":
        print(json.dumps(train_fm(out, a.minutes, a.threads, a.seed)))
    else:
        weights = [float(v) for v in a.guidance.split(",")]
        evaluate(out, a.ours, a.samples, a.slow_samples, weights, a.threads, a.tol)


if __name__ == "__main__":
    main()
