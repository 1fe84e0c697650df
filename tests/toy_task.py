"""A tiny denoising task for the trainer's tests and ``torchrun`` checks (a test fixture).

It has what real trainers have in small: a fixed dataset sampled by step, noise drawn through
:class:`~linearizer.training.random_streams.StepRandom`, a data-dependent layer initialised on
the first batch (like ActNorm), and a shared sub-network used twice (like g_x and g_y).

Run it as a script (also under ``torchrun``)::

    python tests/toy_task.py runs/toy --set max_steps=50 batch_size=32
    torchrun --standalone --nproc_per_node 2 tests/toy_task.py runs/toy2 --set ...
    python tests/toy_task.py runs/toy --resume --set max_steps=100
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from linearizer.errors import LinearizerError
from linearizer.training.config import TrainConfig, apply_overrides, option
from linearizer.training.random_streams import StepRandom
from linearizer.training.resume import resume_config
from linearizer.training.trainer import train

SCRIPT = __file__  # run as ``python SCRIPT RUN --set ...`` (tests/toy_task.py)


@dataclass
class ToyConfig(TrainConfig):
    """Training settings plus the toy model's size."""

    RESUME_MUTABLE = TrainConfig.RESUME_MUTABLE | {"step_delay_ms", "nan_at_step"}

    dim: int = option(8, "data dimension")
    width: int = option(32, "hidden width of the MLP")
    n_data: int = option(256, "dataset size")
    noise: float = option(0.3, "noise level of the denoising objective")
    dtype: Literal["float32", "float64"] = option("float32", "parameter dtype")
    step_delay_ms: float = option(0.0, "sleep per step (makes kill tests hit random points)")
    nan_at_step: int = option(-1, "return a NaN loss at this step (tests the stop; -1 = never)")


class DataInit(nn.Module):
    """Subtracts a mean learned from the first training batch (an ActNorm stand-in)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(dim))
        self.register_buffer("initialized", torch.zeros((), dtype=torch.uint8))

    def forward(self, x: Tensor) -> Tensor:
        if self.training and not bool(self.initialized):
            with torch.no_grad():
                self.bias.copy_(-x.mean(0))
                self.initialized.fill_(1)
        return x + self.bias


class ToyNet(nn.Module):
    def __init__(self, dim: int, width: int) -> None:
        super().__init__()
        self.norm = DataInit(dim)
        self.body = nn.Sequential(nn.Linear(dim, width), nn.Tanh(), nn.Linear(width, dim))
        self.twice = self.body  # a shared sub-network under a second name

    def forward(self, x: Tensor) -> Tensor:
        h = self.norm(x)
        return h + self.body(h) - 0.5 * self.twice(torch.tanh(h))


class ToyTask:
    """Denoise a fixed Gaussian-mixture dataset: ``min E |f(x + s*n) - x|^2``."""

    kind = "toy"

    def build(self, cfg: ToyConfig) -> nn.Module:
        self.cfg = cfg
        dtype = getattr(torch, cfg.dtype)
        gen = torch.Generator().manual_seed(1234)
        centers = 2.0 * torch.randn(4, cfg.dim, generator=gen, dtype=torch.float64)
        labels = torch.randint(4, (cfg.n_data,), generator=gen)
        data = centers[labels] + 0.3 * torch.randn(
            cfg.n_data, cfg.dim, generator=gen, dtype=torch.float64
        )
        self.data = data.to(dtype)
        return ToyNet(cfg.dim, cfg.width).to(dtype)

    def batch(self, rng: StepRandom) -> dict[str, Any]:
        return {"x": self.data[rng.indices(len(self.data))]}

    def loss(self, model: nn.Module, batch: dict[str, Any], rng: StepRandom):
        if self.cfg.step_delay_ms:
            time.sleep(self.cfg.step_delay_ms / 1000.0)
        x = batch["x"]
        noisy = x + self.cfg.noise * rng.randn(self.cfg.dim, like=x)
        err = (model(noisy) - x).pow(2).mean()
        if rng.step == self.cfg.nan_at_step:
            err = err * float("nan")
        return err, {"mse": err.detach()}

    def on_eval(self, model: nn.Module, step: int, run_dir: Any) -> dict[str, float]:
        x = self.data[:64]
        return {"clean_mse": float((model(x) - x).pow(2).mean())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tests/toy_task.py")
    parser.add_argument("run", help="run folder")
    parser.add_argument("--resume", action="store_true", help="continue the run in RUN")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="overrides")
    args = parser.parse_args(argv)
    try:
        if args.resume:
            cfg = resume_config(args.run, ToyConfig, args.set)
        else:
            cfg = apply_overrides(ToyConfig(), args.set)
        result = train(ToyTask(), cfg, args.run, resume=args.resume)
    except LinearizerError as e:
        print(f"linearizer: error: {e}", file=sys.stderr)
        return 2
    if int(os.environ.get("RANK", "0")) == 0:
        print(
            f"done step={result.step} loss={result.loss:.6g} steps_per_s={result.steps_per_s:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
