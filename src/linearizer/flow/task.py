"""``linearizer train flow``: the :class:`~linearizer.training.trainer.Task` of one-step flow
matching, and loading a trained run back for sampling and evaluation."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

from ..data import save_grid
from ..data.config import load_images as data_images
from ..errors import LinearizerError
from ..io import read_json
from ..training.checkpoint import latest_checkpoint, load_weights
from ..training.trainer import StepRandom
from .build import build_flow
from .config import FlowConfig
from .model import OneStepFlow
from .objective import draw_noise, flow_loss, make_distance, resolve_perceptual


def load_images(cfg: FlowConfig, split: str = "train") -> tuple[Tensor, Tensor]:
    """The config's dataset split as float32 images in [0, 1] and labels."""
    return data_images(cfg.data, cfg.network.img_size, split)


class FlowTask:
    """Builds the model, draws data rows and noise per step, evaluates the paper's loss."""

    kind = "flow"

    def __init__(self, images: Tensor | None = None) -> None:
        self.images = images

    def build(self, cfg: FlowConfig) -> OneStepFlow:
        self.cfg = cfg
        if self.images is None:
            self.images, _ = load_images(cfg, "train")
        self.distance = make_distance(cfg.perceptual)
        # The noise for sample grids is fixed per run, so grids over training are comparable.
        gen = torch.Generator().manual_seed(cfg.seed + 12345)
        self.grid_noise = torch.randn(cfg.n_samples, *self.images.shape[1:], generator=gen)
        return build_flow(cfg, channels=self.images.shape[1])

    def batch(self, rng: StepRandom) -> dict[str, Tensor]:
        return {"x1": self.images[rng.indices(len(self.images))]}

    def loss(self, model: nn.Module, batch: dict[str, Tensor], rng: StepRandom):
        x1 = batch["x1"]
        shape = x1.shape[1:]
        draws = {
            "t": rng.rand(like=x1),
            "x0": rng.randn(*shape, like=x1),
            "n0": rng.randn(*shape, like=x1),
            "n1": rng.randn(*shape, like=x1),
        }
        return flow_loss(model, x1, draws, noise_level=self.cfg.noise_level, distance=self.distance)

    def on_eval(self, model: OneStepFlow, step: int, run_dir: Path) -> dict[str, object]:
        cfg = self.cfg
        noise = self.grid_noise.to(next(model.parameters()).device)
        x = model.sample(noise, steps=cfg.sample_steps, method=cfg.sample_method)
        path = Path(run_dir) / "samples" / f"step_{step:08d}.png"
        save_grid(x.clamp(0, 1).cpu(), path, scale=2)
        return {"samples": str(path)}


def run_config(run_dir: str | Path) -> FlowConfig:
    """The resolved config of a flow run folder (one clear error if it is not one)."""
    run = Path(run_dir)
    if not run.is_dir():
        raise LinearizerError(f"no such run folder: {run}")
    status = run / "run.json"
    if status.is_file() and read_json(status).get("kind", "flow") != "flow":
        raise LinearizerError(f"{run} is a {read_json(status).get('kind')} run, not a flow run")
    return FlowConfig.from_dict(read_json(run / "config.json"))


def load_flow_run(
    run_dir: str | Path, *, use_ema: bool = True, channels: int | None = None
) -> tuple[OneStepFlow, FlowConfig, int]:
    """The trained model of a run (EMA weights when present), in eval mode, and its step."""
    cfg = run_config(run_dir)
    path = latest_checkpoint(run_dir)
    if path is None:
        raise LinearizerError(f"{run_dir} holds no usable checkpoint")
    model = build_flow(cfg, channels=channels or _channels(cfg))
    ckpt = load_weights(path, model, use_ema=use_ema, model_kind="flow")
    return model.eval(), cfg, ckpt.step


def _channels(cfg: FlowConfig) -> int:
    return 1


__all__ = ["FlowTask", "load_flow_run", "load_images", "resolve_perceptual", "draw_noise"]
