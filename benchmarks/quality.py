"""Quality for the same training time: the one-step Linearizer against standard flow matching.

Two models are trained for the same wall-clock budget on the same CPU threads:

(a) ours: ``linearizer train flow --preset cpu`` with ``max_minutes`` set to the budget;
(b) standard conditional flow matching (CFM, sigma = 0: ``x_t = (1 - t) x0 + t x1``, target
    ``x1 - x0``) with a velocity U-Net: torchcfm's ``ConditionalFlowMatcher`` and its
    ``UNetModel`` (the configuration of torchcfm's MNIST example: 32 channels, one residual
    block per level) when torchcfm is importable; otherwise the same objective written here and
    our :class:`~linearizer.invertible.unet.PaperUNet` as the velocity network (the report says
    which ran). Adam 1e-3 (torchcfm's example), data scaled to [-1, 1]; batch 32, not the
    example's 128, because a CPU budget of minutes allows only a few hundred steps of 128.

Then FID (LeNet) against the 10k MNIST test images and the wall-clock sampling time per image:
FM with Euler at NFE 1, 2, 4, 10, 100 and an adaptive solver (scipy's RK45 on the whole batch);
ours one-step (B for T = 100 and 1000, built once and timed separately) and multi-step (T = 100).

    python benchmarks/quality.py all --minutes 10 --threads 2 --samples 500 --out runs/bench-quality

Sub-commands ``train-ours``, ``train-fm``, ``evaluate`` run the phases separately; ``evaluate
--extra-run RUN`` adds another trained flow run (e.g. a longer one) as a row.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from linearizer.io import load_tensors, save_tensors, write_json

ROOT = Path(__file__).resolve().parents[1]
NFES = (1, 2, 4, 10, 100)


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
    """``(t, x_t, target)`` of independent-coupling CFM with sigma = 0."""
    try:
        from torchcfm.conditional_flow_matching import ConditionalFlowMatcher

        t, xt, ut = ConditionalFlowMatcher(sigma=0.0).sample_location_and_conditional_flow(x0, x1)
        return t, xt, ut, "torchcfm.ConditionalFlowMatcher(sigma=0)"
    except ImportError:
        t = torch.rand(x0.shape[0], generator=gen)
        tt = t[:, None, None, None]
        return t, (1 - tt) * x0 + tt * x1, x1 - x0, "own CFM objective (sigma=0)"


def train_fm(out: Path, minutes: float, threads: int, batch: int = 32, seed: int = 0) -> dict:
    from linearizer.flow.config import FlowConfig
    from linearizer.flow.task import load_images

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    images, _ = load_images(FlowConfig(), "train")
    net, desc = make_velocity_net()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(seed)
    start, steps, losses, matcher = time.perf_counter(), 0, [], ""
    while time.perf_counter() - start < minutes * 60:
        idx = torch.randint(len(images), (batch,), generator=gen)
        x1 = images[idx] * 2 - 1
        x0 = torch.randn(x1.shape, generator=gen)
        t, xt, ut, matcher = cfm_pair(x0, x1, gen)
        loss = F.mse_loss(net(t, xt), ut)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        steps += 1
        losses.append(float(loss.detach()))
        if steps % 25 == 0:
            print(f"fm step {steps} loss {np.mean(losses[-25:]):.4f}", flush=True)
    seconds = time.perf_counter() - start
    out.mkdir(parents=True, exist_ok=True)
    save_tensors(out / "fm.safetensors", {k: v.contiguous() for k, v in net.state_dict().items()})
    info = {
        "model": desc,
        "objective": matcher,
        "parameters": sum(p.numel() for p in net.parameters()),
        "steps": steps,
        "batch": batch,
        "seconds": seconds,
        "final_loss": float(np.mean(losses[-50:])),
        "threads": threads,
    }
    write_json(out / "fm.json", info)
    return info


def train_ours(out: Path, minutes: float, threads: int) -> dict:
    run = out / "linearizer-cpu"
    cmd = [
        str(ROOT / ".venv" / "bin" / "linearizer"), "train", "flow", "--preset", "cpu",
        "--out", str(run), "--set", f"max_minutes={minutes}", "--set", f"threads={threads}",
        "--set", "progress=false", "--set", "eval_every=0",
    ]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(cmd, check=True)
    info = {"command": " ".join(cmd[1:]), "seconds": time.perf_counter() - start, "run": str(run)}
    write_json(out / "ours.json", info)
    return info


# --- sampling --------------------------------------------------------------------------------
@torch.no_grad()
def fm_euler(net: nn.Module, x0: Tensor, nfe: int) -> Tensor:
    x = x0.clone()
    for i in range(nfe):
        t = torch.full((1,), i / nfe)
        x = x + net(t.expand(x.shape[0]), x) / nfe
    return x


@torch.no_grad()
def fm_adaptive(net: nn.Module, x0: Tensor, tol: float) -> tuple[Tensor, int]:
    from scipy.integrate import solve_ivp

    shape, count = x0.shape, [0]

    def rhs(t: float, y: np.ndarray) -> np.ndarray:
        count[0] += 1
        x = torch.from_numpy(y).float().reshape(shape)
        return net(torch.full((shape[0],), float(t)), x).double().numpy().ravel()

    sol = solve_ivp(rhs, (0.0, 1.0), x0.double().numpy().ravel(), method="RK45",
                    rtol=tol, atol=tol)  # fmt: skip
    return torch.from_numpy(sol.y[:, -1]).float().reshape(shape), count[0]


def _timed(fn) -> tuple[object, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _batched(fn, x0: Tensor, batch: int) -> tuple[Tensor, float]:
    parts, seconds = [], 0.0
    for chunk in x0.split(batch):
        out, dt = _timed(lambda c=chunk: fn(c))
        parts.append(out)
        seconds += dt
    return torch.cat(parts), seconds


def evaluate(
    out: Path, n: int, threads: int, extra_runs: list[str], tol: float, tau: float | None = None
) -> dict:
    from linearizer.flow.config import FlowConfig
    from linearizer.flow.task import load_images
    from linearizer.metrics.classifier import load_classifier
    from linearizer.metrics.fid import fid_lenet

    torch.set_num_threads(threads)
    test, _ = load_images(FlowConfig(), "test")
    train, _ = load_images(FlowConfig(), "train")
    lenet = load_classifier()
    gen = torch.Generator().manual_seed(1234)
    noise = torch.randn(n, 1, 32, 32, generator=gen)
    real = train[torch.randperm(len(train), generator=gen)[:n]]
    rows: list[dict] = [{
        "model": "real", "method": f"{n} MNIST train images", "nfe": None, "seconds": 0.0,
        "fid": fid_lenet(real, test, lenet),
    }]  # fmt: skip

    def add(model: str, method: str, nfe, images: Tensor, seconds: float, **extra) -> None:
        fid = fid_lenet(images.clamp(0, 1), test, lenet)
        row = {"model": model, "method": method, "nfe": nfe, "seconds": seconds,
               "ms_per_image": 1e3 * seconds / n, "fid": fid, **extra}  # fmt: skip
        print(json.dumps(row), flush=True)
        rows.append(row)
        write_json(out / "quality.partial.json", {"samples": n, "rows": rows})

    runs = [("ours (cpu preset)", out / "linearizer-cpu")]
    runs += [(f"ours ({r})", Path(r)) for r in extra_runs]
    for label, run in runs:
        if (run / "config.json").is_file():
            _rate_flow_run(label, run, noise, add, tau)

    fm_info = out / "fm.json"
    if fm_info.is_file():
        net, _ = make_velocity_net()
        net.load_state_dict(load_tensors(out / "fm.safetensors"))
        net.eval()
        x0 = noise  # the same noise; FM works in [-1, 1]
        for nfe in NFES:
            x, dt = _batched(lambda c, k=nfe: fm_euler(net, c, k), x0, 250)
            add("flow matching", f"Euler, {nfe} steps", nfe, (x + 1) / 2, dt)
        (x, nfe), dt = _timed(lambda: fm_adaptive(net, x0, tol))
        add("flow matching", f"RK45 (scipy), rtol=atol={tol:g}", nfe, (x + 1) / 2, dt)
    result = {
        "samples": n,
        "threads": threads,
        "reference": "MNIST test (10k) at 32x32",
        "torch": torch.__version__,
        "rows": rows,
    }
    for name in ("fm.json", "ours.json"):
        if (out / name).is_file():
            result[name[:-5]] = json.loads((out / name).read_text())
    write_json(out / "quality.json", result)
    return result


def _rate_flow_run(label: str, run: Path, noise: Tensor, add, tau: float | None) -> None:
    """Our samplers at ``tau`` (default: the run's sampler's temperature): ``x0 = tau * noise``;
    the sampler the run's latent maps were fitted for applies them (``maps``)."""
    from linearizer.flow.spec import SamplerSpec
    from linearizer.flow.task import load_flow_run

    model, cfg, step = load_flow_run(run)
    tau = cfg.sampler.temperature if tau is None else tau
    noise = tau * noise
    cal = model.calibration
    for steps in (100, 1000):
        for final in ("skip", "predict"):
            spec = SamplerSpec(steps=steps, final=final, dtype="float32", temperature=tau)
            if cal is not None and cal.applies_to(spec):
                spec = spec.replace(maps="calibration" if cal.transport is None else "transport")
            _, build = _timed(lambda spec=spec: model.one_step_matrix(spec))
            with torch.no_grad():
                x, dt = _batched(lambda c, spec=spec: model.sample(c, spec), noise, 250)
            add(label, f"one-step, B from T={steps} Euler, final {final}", 2, x, dt,
                B_build_s=build, step=step, temperature=tau, maps=spec.maps)  # fmt: skip
    with torch.no_grad():
        x, dt = _batched(lambda c: model.sample(c, steps=100, final="skip", dtype="float32",
                                                one_step=False), noise, 250)  # fmt: skip
    add(label, "multi-step Euler T=100 (latent)", 2, x, dt, step=step, temperature=tau)


# --- plots -----------------------------------------------------------------------------------
def plot(result: dict, folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    rows = [r for r in result["rows"] if r["model"] != "real"]
    real = next(r["fid"] for r in result["rows"] if r["model"] == "real")
    paths = []
    for key, label, name in (
        ("nfe", "network evaluations (ours: g passes)", "fid_vs_nfe.png"),
        (
            "ms_per_image",
            f"sampling time per image (ms, {result['threads']} CPU thread(s))",
            "fid_vs_time.png",
        ),
    ):
        fig, ax = plt.subplots(figsize=(6, 4))
        for model in dict.fromkeys(r["model"] for r in rows):
            pts = sorted((r[key], r["fid"], r["method"]) for r in rows if r["model"] == model)
            if not pts:
                continue
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            style = "o-" if model == "flow matching" else "s"
            ax.plot(xs, ys, style, label=model)
            for x, y, m in pts:
                ax.annotate(_short(m), (x, y), fontsize=6, xytext=(3, 3),
                            textcoords="offset points")  # fmt: skip
        ax.axhline(real, color="gray", ls="--", lw=0.8, label=f"{result['samples']} real images")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel(f"FID (LeNet), {result['samples']} samples vs MNIST test")
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = folder / name
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths


def _short(method: str) -> str:
    """A short point label: 'NFE 4', 'RK45', '1-step T=100', '1-step T=100 pred', 'multi T=100'."""
    if method.startswith("Euler,"):
        return "NFE " + method.split()[1]
    if method.startswith("RK45"):
        return "RK45"
    if method.startswith("one-step"):
        label = "1-step T=" + method.split("T=")[1].split()[0]
        return label + (" pred" if method.endswith("predict") else "")
    return "multi T=100"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("phase", choices=["all", "train-ours", "train-fm", "evaluate", "plot"])
    p.add_argument("--minutes", type=float, default=10.0, help="training budget per model")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--samples", type=int, default=500, help="generated images per FID")
    p.add_argument("--tol", type=float, default=1e-3, help="rtol = atol of the adaptive solver")
    p.add_argument("--out", default=str(ROOT / "runs" / "bench-quality"))
    p.add_argument("--extra-run", action="append", default=[], help="another flow run to rate")
    p.add_argument("--ours-temperature", type=float, default=None,
                   help="noise temperature of our samplers (default: each run's)")  # fmt: skip
    p.add_argument("--plots", default=str(ROOT / "docs" / "benchmarks"))
    args = p.parse_args(argv)
    out = Path(args.out)
    if args.phase in ("all", "train-ours"):
        print(json.dumps(train_ours(out, args.minutes, args.threads)), flush=True)
    if args.phase in ("all", "train-fm"):
        print(json.dumps(train_fm(out, args.minutes, args.threads)), flush=True)
    if args.phase in ("all", "evaluate"):
        result = evaluate(out, args.samples, args.threads, args.extra_run, args.tol,
                          args.ours_temperature)  # fmt: skip
    elif args.phase == "plot":
        result = json.loads((out / "quality.json").read_text())
    if args.phase in ("all", "evaluate", "plot"):
        print([str(p) for p in plot(result, Path(args.plots))])


if __name__ == "__main__":
    main(sys.argv[1:])
