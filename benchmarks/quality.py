"""Quality at equal training time: the one-step Linearizer against flow matching, each with care.

The protocol (BENCHMARKS.md §3):

* **ours:** the ``cpu`` preset as shipped (4,000 steps, EMA, then the post-hoc fit of K and the
  transport), two seeds. Its rows: the trained map alone (the paper's method), with K, with K
  and the transport, all under the default :class:`~linearizer.flow.spec.SamplerSpec`.
* **flow matching:** independent-coupling conditional flow matching with sigma = 0 (``x_t =
  (1 - t) x0 + t x1``, target ``x1 - x0``): torchcfm's ``ConditionalFlowMatcher`` and the U-Net
  of its MNIST example when torchcfm is importable, otherwise the same objective written here
  and our :class:`~linearizer.invertible.unet.PaperUNet` (``fm.json`` says which ran). It gets
  what our preset gets: Adam with 100 warm-up steps and a linear decay to 0.1x, gradient
  clipping at 1, an EMA of the weights (decay 0.999), the better of two learning rates (chosen
  on FID (LeNet) at 10 Euler steps with seed 0 only), and two seeds.
* **equal time:** flow matching trains for as many steps as it makes, on this machine, in the
  time our preset takes for its 4,000 steps and its fit. Both step rates are measured back to
  back by ``probe`` (each alone); the fit's share comes from our reference run's ``run.json``.
  Training then runs at a fixed step count, so the result does not depend on what else the
  machine did while it trained.
* **where:** with ``--device cuda`` flow matching trains and samples on a GPU at the same fixed
  step count and the same batches (rows and noise come from the CPU generator); our runs sample
  on the CPU, and every rating runs on the CPU. ``benchmarks/gpu_ship.sh`` is the GPU run of
  2026-12-04.
* **rating:** the same noise on both sides per seed (``x0`` for seed ``s`` is drawn from
  ``torch.Generator().manual_seed(s)``), ``--samples`` images per row against the 10,000 MNIST
  test images: FID (LeNet), FID (judge, the held-out classifier, never used to choose anything),
  precision/recall (k = 3) and the classifier's confidence; and sampling time per image.

    python benchmarks/quality.py probe --ours runs/repro-cpu/run --out runs/eqt
    python benchmarks/quality.py train-fm --lr 1e-3 --seed 0 --out runs/eqt
    python benchmarks/quality.py train-fm --lr 2e-3 --seed 0 --out runs/eqt
    python benchmarks/quality.py select --out runs/eqt
    python benchmarks/quality.py train-fm --lr BEST --seed 1 --out runs/eqt
    linearizer train flow --preset cpu --set seed=1 --out runs/eqt/ours-s1
    python benchmarks/quality.py evaluate --ours runs/repro-cpu/run runs/eqt/ours-s1 --out runs/eqt
    python benchmarks/quality.py timing --ours runs/repro-cpu/run --samples 500 --out runs/eqt
    python benchmarks/quality.py report --out runs/eqt --docs docs/benchmarks/equal-time
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from linearizer.io import load_tensors, save_tensors, write_json, write_text

ROOT = Path(__file__).resolve().parents[1]
NFES = (1, 2, 4, 10, 100)
SELECT_NFE = 10
OUR_STEPS = 4000  # the cpu preset's fixed step count
WARMUP, MIN_LR_RATIO, CLIP, EMA = 100, 0.1, 1.0, 0.999  # our preset's schedule, FM's EMA


# --- the flow-matching baseline ------------------------------------------------------------
def make_velocity_net() -> tuple[nn.Module, str]:
    """``(net(t, x), description)``: torchcfm's U-Net when installed, else ours."""
    try:
        from torchcfm.models.unet import UNetModel

        net = UNetModel(dim=(1, 32, 32), num_channels=32, num_res_blocks=1)
        return net, "torchcfm UNetModel(dim=(1,32,32), num_channels=32, num_res_blocks=1)"
    except ImportError:
        from linearizer.invertible.unet import PaperUNet

        class Velocity(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.unet = PaperUNet(1, 1, 32, (1, 2, 2), 1, (16,), 32, dropout=0.0)

            def forward(self, t: Tensor, x: Tensor) -> Tensor:
                return self.unet(x, t.expand(x.shape[0]) * 1000.0)

        return Velocity(), "linearizer PaperUNet(1, 1, 32, mult (1,2,2), 1 block, attn 16)"


def cfm_pair(x0: Tensor, x1: Tensor, gen: torch.Generator) -> tuple[Tensor, Tensor, Tensor, str]:
    """``(t, x_t, target, name)`` of independent-coupling CFM with sigma = 0."""
    try:
        from torchcfm.conditional_flow_matching import ConditionalFlowMatcher

        t, xt, ut = ConditionalFlowMatcher(sigma=0.0).sample_location_and_conditional_flow(x0, x1)
        return t, xt, ut, "torchcfm.ConditionalFlowMatcher(sigma=0)"
    except ImportError:
        t = torch.rand(x0.shape[0], generator=gen)
        t = t.to(x0.device)
        tt = t[:, None, None, None]
        return t, (1 - tt) * x0 + tt * x1, x1 - x0, "own CFM objective (sigma=0)"


def lr_factor(step: int, total: int) -> float:
    """Our preset's schedule: linear warm-up, then linear decay to ``MIN_LR_RATIO``."""
    if step < WARMUP:
        return (step + 1) / WARMUP
    frac = (step - WARMUP) / max(total - WARMUP, 1)
    return 1.0 - (1.0 - MIN_LR_RATIO) * frac


class FMTrainer:
    """One flow-matching step at a time: Adam, the schedule, clipping and the EMA."""

    def __init__(self, lr: float, batch: int, seed: int, total: int, device: str = "cpu") -> None:
        from linearizer.flow.config import FlowConfig
        from linearizer.flow.task import load_images

        torch.manual_seed(seed)  # torchcfm draws t from the global generator
        self.images = load_images(FlowConfig(), "train")[0] * 2 - 1
        self.net, self.description = make_velocity_net()
        # the rows and the noise come from the CPU generator on every device, so a GPU run
        # draws the same batches as a CPU run of the same seed
        self.device = torch.device(device)
        self.net.to(self.device)
        self.ema = copy.deepcopy(self.net).requires_grad_(False)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=lr)
        self.lr, self.batch, self.total = lr, batch, total
        self.gen = torch.Generator().manual_seed(seed)
        self.objective, self.step_count = "", 0

    def step(self) -> float:
        idx = torch.randint(len(self.images), (self.batch,), generator=self.gen)
        x1 = self.images[idx]
        x0 = torch.randn(x1.shape, generator=self.gen).to(self.device)
        x1 = x1.to(self.device)
        t, xt, ut, self.objective = cfm_pair(x0, x1, self.gen)
        loss = F.mse_loss(self.net(t, xt), ut)
        for group in self.opt.param_groups:
            group["lr"] = self.lr * lr_factor(self.step_count, self.total)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.net.parameters(), CLIP)
        self.opt.step()
        self.step_count += 1
        decay = min(EMA, (1 + self.step_count) / (10 + self.step_count))
        with torch.no_grad():
            for e, p in zip(self.ema.parameters(), self.net.parameters(), strict=True):
                e.lerp_(p, 1 - decay)
        return float(loss.detach())


def fm_folder(out: Path, lr: float, seed: int) -> Path:
    return out / f"fm-lr{lr:g}-s{seed}"


def train_fm(
    out: Path, lr: float, seed: int, steps: int, batch: int, threads: int, device: str = "cpu"
) -> dict:
    torch.set_num_threads(threads)
    trainer = FMTrainer(lr, batch, seed, steps, device)
    folder = fm_folder(out, lr, seed)
    folder.mkdir(parents=True, exist_ok=True)
    start, losses = time.perf_counter(), []
    with (folder / "log.txt").open("w") as log:
        while trainer.step_count < steps:
            losses.append(trainer.step())
            if trainer.step_count % 100 == 0:
                print(
                    f"step {trainer.step_count} loss {np.mean(losses[-100:]):.4f}",
                    file=log,
                    flush=True,
                )
    save_tensors(
        folder / "fm.safetensors",
        {k: v.detach().cpu().contiguous() for k, v in trainer.ema.state_dict().items()},
    )
    info = {
        "model": trainer.description,
        "objective": trainer.objective,
        "parameters": sum(p.numel() for p in trainer.net.parameters()),
        "lr": lr,
        "seed": seed,
        "steps": steps,
        "batch": batch,
        "threads": threads,
        "device": torch.cuda.get_device_name(trainer.device)
        if trainer.device.type == "cuda"
        else "cpu",
        "schedule": f"warm-up {WARMUP}, linear decay to {MIN_LR_RATIO}x, clip {CLIP}",
        "ema_decay": EMA,
        "seconds": time.perf_counter() - start,
        "final_loss": float(np.mean(losses[-100:])),
    }
    write_json(folder / "fm.json", info)
    return info


def load_fm(folder: Path, device: str = "cpu") -> nn.Module:
    net, _ = make_velocity_net()
    net.load_state_dict(load_tensors(folder / "fm.safetensors"))
    return net.to(device).eval()


# --- equal time --------------------------------------------------------------------------------
def probe(out: Path, ours_run: Path, threads: int, batch: int) -> dict:
    """Both step rates, back to back, and the flow-matching step count of equal time."""
    from linearizer.config import apply_overrides
    from linearizer.flow.task import FlowTask
    from linearizer.training.config import get_preset
    from linearizer.training.steprate import measure_step_rate

    torch.set_num_threads(threads)
    cfg = apply_overrides(
        get_preset("flow", "cpu"),
        [f"threads={threads}", "calibration_samples=0", "transport_steps=0", "finish_minutes=0"],
    )
    ours = measure_step_rate(FlowTask(), cfg, steps=48, skip=8)
    trainer = FMTrainer(1e-3, batch, 0, 10_000)
    for _ in range(8):
        trainer.step()
    start = time.perf_counter()
    for _ in range(40):
        trainer.step()
    fm = 40 / (time.perf_counter() - start)
    run = json.loads((ours_run / "run.json").read_text())
    fit_share = run["finish"]["calibration_seconds"] / run["seconds"]
    ours_seconds = OUR_STEPS / ours * (1 + fit_share)
    info = {
        "threads": threads,
        "ours_steps_per_s": ours,
        "fm_steps_per_s": fm,
        "fm_batch": batch,
        "fit_share": fit_share,
        "reference_run": str(ours_run),
        "equal_seconds": ours_seconds,
        "fm_steps": int(round(ours_seconds * fm)),
    }
    write_json(out / "probe.json", info)
    return info


# --- sampling ----------------------------------------------------------------------------------
@torch.no_grad()
def fm_euler(net: nn.Module, x0: Tensor, nfe: int) -> Tensor:
    x = x0.clone()
    for i in range(nfe):
        t = torch.full((x.shape[0],), i / nfe, device=x.device)
        x = x + net(t, x) / nfe
    return x


@torch.no_grad()
def fm_adaptive(net: nn.Module, x0: Tensor, tol: float) -> tuple[Tensor, int]:
    """scipy's RK45 on the whole batch as one system; ``(x1, evaluations)``."""
    from scipy.integrate import solve_ivp

    shape, count = x0.shape, [0]

    def rhs(t: float, y: np.ndarray) -> np.ndarray:
        count[0] += 1
        x = torch.from_numpy(y).float().reshape(shape).to(x0.device)
        v = net(torch.full((shape[0],), float(t), device=x0.device), x)
        return v.double().cpu().numpy().ravel()

    sol = solve_ivp(
        rhs, (0.0, 1.0), x0.double().cpu().numpy().ravel(), method="RK45", rtol=tol, atol=tol
    )
    return torch.from_numpy(sol.y[:, -1]).float().reshape(shape), count[0]


def batched(
    fn: Callable[..., Tensor], x0: Tensor, labels: Tensor | None = None, batch: int = 500
) -> tuple[Tensor, float]:
    """``fn(chunk)`` over ``x0`` in chunks; with ``labels``, ``fn(chunk, its rows' labels)``."""
    chunks = x0.split(batch)
    parts, start = [], time.perf_counter()
    for i, chunk in enumerate(chunks):
        out = fn(chunk) if labels is None else fn(chunk, labels.split(batch)[i])
        parts.append(out.cpu())
    return torch.cat(parts), time.perf_counter() - start


# --- rating ------------------------------------------------------------------------------------
class Rater:
    """The reference statistics, computed once, and the rows measured so far (resumable)."""

    def __init__(self, out: Path, n: int) -> None:
        from linearizer.flow.config import FlowConfig
        from linearizer.flow.evaluate import EvalOptions, Reference
        from linearizer.flow.task import load_images
        from linearizer.metrics.classifier import load_classifier

        test, _ = load_images(FlowConfig(), "test")
        self.reference = Reference(test, load_classifier(), EvalOptions(n=n))
        self.n, self.path = n, out / "evaluation.json"
        self.rows = json.loads(self.path.read_text())["rows"] if self.path.is_file() else []

    def noise(self, seed: int) -> Tensor:
        return torch.randn(self.n, 1, 32, 32, generator=torch.Generator().manual_seed(seed))

    def done(self, model: str, seed: int, sampler: str) -> bool:
        return any(
            (r["model"], r["seed"], r["sampler"]) == (model, seed, sampler) for r in self.rows
        )

    def add(
        self, model: str, seed: int, sampler: str, nfe: int, images: Tensor, seconds: float, **extra
    ) -> None:
        row = {
            "model": model,
            "seed": seed,
            "sampler": sampler,
            "nfe": nfe,
            "ms_per_image": 1e3 * seconds / len(images),
            **extra,
            **self.reference.measure(images.clamp(0, 1)),
        }
        print(
            json.dumps({k: row[k] for k in ("model", "seed", "sampler", "fid_lenet", "fid_judge")}),
            flush=True,
        )
        self.rows.append(row)
        write_json(
            self.path,
            {
                "samples": self.n,
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "rows": self.rows,
            },
        )


def rate_fm(
    rater: Rater,
    folder: Path,
    seed: int,
    nfes: tuple[int, ...],
    tol: float | None,
    label: str = "flow matching",
    device: str = "cpu",
) -> None:
    net = load_fm(folder, device)
    x0 = rater.noise(seed).to(device)
    for nfe in nfes:
        name = f"Euler, {nfe} step{'s' if nfe > 1 else ''}"
        if not rater.done(label, seed, name):
            x, dt = batched(lambda c, k=nfe: fm_euler(net, c, k), x0)
            rater.add(label, seed, name, nfe, (x + 1) / 2, dt, run=str(folder))
    name = f"RK45 (scipy), rtol = atol = {tol:g}" if tol else ""
    if tol and not rater.done(label, seed, name):
        start = time.perf_counter()
        x, nfe = fm_adaptive(net, x0, tol)
        x = x.cpu()
        rater.add(label, seed, name, nfe, (x + 1) / 2, time.perf_counter() - start, run=str(folder))


def rate_ours(rater: Rater, run: Path, seed: int) -> None:
    """Our run's rows: the trained map alone, then each post-hoc map the run holds. A mixture
    samples the trained map alone (it holds no post-hoc map), each image's component drawn from
    the mixture weights with the seed's generator, and its B build covers every component."""
    from linearizer.flow.mixture import MixtureFlow
    from linearizer.flow.task import load_flow_run

    model, cfg, step = load_flow_run(run)
    mixture = isinstance(model, MixtureFlow)
    for maps in ("none",) if mixture else ("none", "calibration", "transport"):
        spec = cfg.sampler.replace(maps=maps)
        name = spec.describe()
        if rater.done("ours", seed, name):
            continue
        start = time.perf_counter()
        for k in range(model.components) if mixture else (None,):
            model.one_step_matrix(spec.replace(label=k))  # built once per sampler, timed apart
        build = time.perf_counter() - start
        gen = torch.Generator().manual_seed(seed)
        x0 = spec.noise(rater.n, model.image_shape, gen)
        labels = model.draw_components(rater.n, gen) if mixture else None
        with torch.no_grad():
            x, dt = batched(
                lambda c, rows=None, s=spec: model.sample(c, s, labels=rows).float(), x0, labels
            )
        rater.add(
            "ours",
            seed,
            name,
            2,
            x,
            dt,
            B_build_s=build,
            spec=spec.to_dict(),
            run=str(run),
            step=step,
            **({"components": model.components} if mixture else {}),
        )


def select(out: Path, threads: int, n: int, device: str = "cpu") -> dict:
    """The better learning rate of flow matching: FID (LeNet) at 10 Euler steps, seed 0."""
    torch.set_num_threads(threads)
    (out / "select").mkdir(parents=True, exist_ok=True)
    rater = Rater(out / "select", n)
    scores = {}
    for folder in sorted(out.glob("fm-lr*-s0")):
        rate_fm(rater, folder, 0, (SELECT_NFE,), None, label=folder.name, device=device)
        scores[folder.name] = next(r["fid_lenet"] for r in rater.rows if r["model"] == folder.name)
    best = min(scores, key=scores.__getitem__)
    info = {
        "metric": f"FID (LeNet), {n} samples, Euler {SELECT_NFE} steps, seed 0",
        "scores": scores,
        "best": best,
        "best_lr": json.loads((out / best / "fm.json").read_text())["lr"],
    }
    write_json(out / "select.json", info)
    return info


def evaluate(
    out: Path,
    ours: list[Path],
    n: int,
    threads: int,
    tol: float,
    nfes: tuple[int, ...],
    fm_seeds: tuple[int, ...],
    device: str = "cpu",
) -> None:
    """Rate our runs (seed = position in ``ours``) and the chosen flow-matching runs of
    ``fm_seeds``: Euler at ``nfes``, then RK45 when ``tol`` > 0. Rows already in
    ``evaluation.json`` are kept, so the phases may run in parts."""
    torch.set_num_threads(threads)
    rater = Rater(out, n)
    for seed, run in enumerate(ours):
        rate_ours(rater, run, seed)
    if fm_seeds:
        lr = json.loads((out / "select.json").read_text())["best_lr"]
    for seed in fm_seeds:
        rate_fm(rater, fm_folder(out, lr, seed), seed, nfes, tol or None, device=device)


def timing(out: Path, ours: Path, threads: int, n: int) -> dict:
    """Sampling time per image of every sampler, measured alone (the rating may have shared the
    machine): ours on ``n`` images after B is built; flow matching's Euler samplers on ``n``
    images (``n // 10`` at 100 steps); RK45 as its evaluation count times one evaluation's cost.
    """
    from linearizer.flow.task import load_flow_run

    torch.set_num_threads(threads)
    x0 = torch.randn(n, 1, 32, 32, generator=torch.Generator().manual_seed(0))
    times: dict[str, float] = {}
    model, cfg, _ = load_flow_run(ours)
    for maps in ("none", "calibration", "transport"):
        spec = cfg.sampler.replace(maps=maps)
        model.one_step_matrix(spec)
        with torch.no_grad():
            _, dt = batched(
                lambda c, s=spec: model.sample(c, s),
                spec.noise(n, model.image_shape, torch.Generator().manual_seed(0)),
            )
        times[f"ours|{spec.describe()}"] = 1e3 * dt / n
    lr = json.loads((out / "select.json").read_text())["best_lr"]
    net = load_fm(fm_folder(out, lr, 0))
    for nfe in NFES:
        m = n if nfe < 100 else max(n // 10, 1)
        _, dt = batched(lambda c, k=nfe: fm_euler(net, c, k), x0[:m])
        times[f"flow matching|Euler, {nfe} step{'s' if nfe > 1 else ''}"] = 1e3 * dt / m
    times["per evaluation"] = times["flow matching|Euler, 1 step"]
    info = {"threads": threads, "images": n, "ms_per_image": times}
    write_json(out / "timing.json", info)
    return info


# --- the report --------------------------------------------------------------------------------
COLUMNS = (
    ("FID (LeNet)", "fid_lenet", "{:.1f}"),
    ("FID (judge)", "fid_judge", "{:.1f}"),
    ("precision", "precision", "{:.3f}"),
    ("recall", "recall", "{:.3f}"),
    ("confidence", "confidence", "{:.3f}"),
    ("ms per image", "ms_per_image", "{:.2f}"),
)


def grouped(rows: list[dict]) -> dict[tuple[str, str], list[dict]]:
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["model"], row["sampler"]), []).append(row)
    return groups


def with_timing(result: dict, out: Path) -> dict:
    """``result`` with every row's time per image from ``timing.json`` (measured alone)."""
    if not (out / "timing.json").is_file():
        return result
    timing = json.loads((out / "timing.json").read_text())
    times = timing["ms_per_image"]
    rows = []
    for row in result["rows"]:
        key = f"{row['model']}|{row['sampler']}"
        ms = times.get(
            key,
            row["nfe"] * times["per evaluation"]
            if row["model"] == "flow matching"
            else row["ms_per_image"],
        )
        rows.append({**row, "ms_per_image": ms})
    # the times' thread count, not the rating's
    return {
        **result,
        "rows": rows,
        "timing": "alone, from timing.json",
        "threads": timing.get("threads", result["threads"]),
    }


def table(result: dict) -> str:
    head = ["model", "sampler", "evaluations", "seeds"] + [c[0] for c in COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (model, sampler), rows in grouped(result["rows"]).items():
        rows = sorted(rows, key=lambda r: r["seed"])
        cells = [
            model,
            sampler,
            " / ".join(str(r["nfe"]) for r in rows),
            " / ".join(str(r["seed"]) for r in rows),
        ]
        for _, key, fmt in COLUMNS:
            values = [fmt.format(r[key]) for r in rows]
            mean = fmt.format(sum(r[key] for r in rows) / len(rows))
            cells.append(" / ".join(values) + (f" (**{mean}**)" if len(rows) > 1 else ""))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(result: dict, folder: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for (model, sampler), rows in grouped(result["rows"]).items():
        x = sum(r["ms_per_image"] for r in rows) / len(rows)
        ys = [r["fid_lenet"] for r in rows]
        marker = "o" if model == "flow matching" else "s"
        ax.plot(
            [x] * len(ys), ys, marker, color="C0" if model == "flow matching" else "C1", alpha=0.8
        )
        short = sampler.replace("one-step euler, T = 1000, final predict, float64, ", "")
        label = short.replace("Euler, ", "").replace(" (scipy)", "")[:24]
        ax.annotate(label, (x, min(ys)), fontsize=6, xytext=(3, -8), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"sampling time per image (ms, {result['threads']} CPU threads)")
    ax.set_ylabel(f"FID (LeNet), {result['samples']} samples vs MNIST test")
    ax.set_title("equal training time: ours (squares) vs flow matching (circles)", fontsize=9)
    fig.tight_layout()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "fid_vs_time.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def report(out: Path, docs: Path) -> str:
    result = with_timing(json.loads((out / "evaluation.json").read_text()), out)
    docs.mkdir(parents=True, exist_ok=True)
    for name in ("probe.json", "select.json", "timing.json"):
        if (out / name).is_file():
            write_text(docs / name, (out / name).read_text())
    fms = {p.parent.name: json.loads(p.read_text()) for p in sorted(out.glob("fm-*/fm.json"))}
    write_json(docs / "fm_runs.json", fms)
    write_json(docs / "evaluation.json", result)
    plot(result, docs)
    text = table(result)
    write_text(docs / "table.md", text + "\n")
    return text


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("phase", choices=["probe", "train-fm", "select", "evaluate", "timing", "report"])
    p.add_argument("--out", default=str(ROOT / "runs" / "eqt"), help="the benchmark's folder")
    p.add_argument("--ours", nargs="+", default=[], help="our runs, seed 0 first (probe: one)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-3, help="flow matching's learning rate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=32, help="flow matching's batch")
    p.add_argument("--steps", type=int, default=0, help="flow matching's steps (0: probe.json)")
    p.add_argument("--samples", type=int, default=2000, help="generated images per row")
    p.add_argument(
        "--tol",
        type=float,
        default=1e-3,
        help="rtol = atol of the adaptive solver (0: no adaptive row)",
    )
    p.add_argument("--nfe", default="1,2,4,10,100", help="flow matching's Euler step counts")
    p.add_argument("--fm-seeds", default="0,1", help="flow-matching seeds to rate")
    p.add_argument(
        "--device",
        default="cpu",
        help="where flow matching trains and samples (cpu, cuda); ours samples on "
        "the CPU, and every rating runs on the CPU",
    )
    p.add_argument("--docs", default=str(ROOT / "docs" / "benchmarks" / "equal-time"))
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.phase == "probe":
        print(json.dumps(probe(out, Path(args.ours[0]), args.threads, args.batch)))
    elif args.phase == "train-fm":
        steps = args.steps or json.loads((out / "probe.json").read_text())["fm_steps"]
        print(
            json.dumps(
                train_fm(out, args.lr, args.seed, steps, args.batch, args.threads, args.device)
            )
        )
    elif args.phase == "select":
        print(json.dumps(select(out, args.threads, args.samples, args.device)))
    elif args.phase == "evaluate":
        nfes = tuple(int(v) for v in args.nfe.split(",") if v)
        seeds = tuple(int(v) for v in args.fm_seeds.split(",") if v)
        evaluate(
            out,
            [Path(r) for r in args.ours],
            args.samples,
            args.threads,
            args.tol,
            nfes,
            seeds,
            args.device,
        )
    elif args.phase == "timing":
        print(json.dumps(timing(out, Path(args.ours[0]), args.threads, args.samples)))
    else:
        print(report(out, Path(args.docs)))


if __name__ == "__main__":
    main(sys.argv[1:])
