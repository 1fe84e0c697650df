"""``linearizer train flow``: the :class:`~linearizer.training.trainer.Task` of one-step flow
matching, and loading a trained run back for sampling and evaluation."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import torch
from torch import Tensor, nn

from ..data.config import load_images as data_images
from ..errors import LinearizerError
from ..training.image_task import ImageTask
from ..training.random_streams import StepRandom
from ..training.runs import load_run, read_run_config
from .build import build_flow
from .calibration import FitOptions, fit_calibration, load_calibration, save_calibration
from .config import FlowConfig
from .model import OneStepFlow
from .objective import (
    draw_noise,
    draw_times,
    flow_loss,
    group_times,
    make_distance,
    resolve_perceptual,
)


def load_images(cfg: FlowConfig, split: str = "train") -> tuple[Tensor, Tensor]:
    """The config's dataset split as float32 images in [0, 1] and labels."""
    return data_images(cfg.data, cfg.network.img_size, split)


class FlowTask(ImageTask, kind="flow", config=FlowConfig):
    """Builds the model, draws data rows and noise per step, evaluates the paper's loss."""

    def build(self, cfg: FlowConfig) -> OneStepFlow:
        self.distance = make_distance(cfg.perceptual)
        model = super().build(cfg)
        if cfg.conditional:
            model.class_prior.copy_(class_frequencies(self.labels, cfg.classes))
        return model

    def build_model(self, cfg: FlowConfig, channels: int) -> OneStepFlow:
        return build_flow(cfg, channels=channels)

    @staticmethod
    def attach(model: OneStepFlow, run_dir: Path, step: int, section: str) -> None:
        model.calibration = load_calibration(run_dir, step, section)

    def batch(self, rng: StepRandom) -> dict[str, Tensor]:
        rows = rng.indices(len(self.images))
        if not self.cfg.conditional:
            return {"x1": self.images[rows]}
        return {"x1": self.images[rows], "label": self.labels[rows]}

    def loss(self, model: nn.Module, batch: dict[str, Tensor], rng: StepRandom):
        x1 = batch["x1"]
        shape = x1.shape[1:]
        times = draw_times(self.cfg.time_sampling, lambda: rng.rand(like=x1),
                           lambda: rng.randn(like=x1))  # fmt: skip
        draws = {"t": group_times(times, self.cfg.time_groups)}
        draws |= {k: rng.randn(*shape, like=x1) for k in ("x0", "n0", "n1")}
        labels = None
        if self.cfg.conditional:  # drawn last: an unconditional run's stream is unchanged
            drop = rng.rand(like=x1) < self.cfg.class_dropout
            labels = torch.where(drop.to(batch["label"].device), self.cfg.classes,
                                 batch["label"])  # fmt: skip
        return flow_loss(model, x1, draws, noise_level=self.cfg.noise_level,
                         distance=self.distance, labels=labels)  # fmt: skip

    def on_eval(self, model: OneStepFlow, step: int, run_dir: Path) -> dict[str, object]:
        cfg = self.cfg
        noise = self.grid_noise.to(next(model.parameters()).device)
        # the run's schedule, trained map alone: the grids show what training made
        spec = cfg.sampler.replace(maps="none")
        labels = torch.arange(len(noise)) % cfg.classes if cfg.conditional else None
        x = model.sample(cfg.sampler.temperature * noise, spec, labels=labels)
        return {"samples": self.save_samples(x, step, run_dir, scale=2)}

    def on_finish(self, model: OneStepFlow, ema, step: int, run_dir: Path) -> dict | None:
        """Fit the latent calibration (``calibration_samples`` > 0) for the run's sampler and
        the weights it samples with: the EMA ones when the run keeps
        them, else the raw ones (``linearizer calibrate RUN`` fits both)."""
        n = self.cfg.calibration_samples
        if not n:
            return None
        opts = FitOptions(sampler=self.cfg.sampler, n=n, seed=self.cfg.seed,
                          transport_steps=self.cfg.transport_steps)  # fmt: skip
        start = time.perf_counter()
        try:
            if ema is None:
                fits = {"model": fit_calibration(model, self.images, opts)}
            else:
                with ema.applied(model):
                    fits = {"ema": fit_calibration(model, self.images, opts)}
        except LinearizerError as e:  # the trained run stays usable, uncalibrated
            warnings.warn(f"no latent calibration for {run_dir}: {e}", stacklevel=1)
            return {"calibration": f"failed: {e}"}
        save_calibration(run_dir, fits, step, opts)
        return {"calibration_seconds": time.perf_counter() - start}


def class_frequencies(labels: Tensor | None, classes: int) -> Tensor:
    """The share of each class among ``labels`` (one line if a label is out of range)."""
    if labels is None or len(labels) == 0:
        raise LinearizerError("conditional=true needs a labelled dataset")
    labels = labels.reshape(-1).long()
    if int(labels.min()) < 0 or int(labels.max()) >= classes:
        raise LinearizerError(f"the dataset's labels span {int(labels.min())}..{int(labels.max())}"
                              f", outside classes=0..{classes - 1} (--set classes=N)")  # fmt: skip
    return torch.bincount(labels, minlength=classes).double() / len(labels)


def run_config(run_dir: str | Path) -> FlowConfig:
    """The resolved config of a flow run folder (one clear error if it is not one)."""
    return read_run_config(run_dir, expect="flow")


def load_flow_run(
    run_dir: str | Path, *, use_ema: bool = True
) -> tuple[OneStepFlow, FlowConfig, int]:
    """``(model, config, step)`` of a flow run: :func:`~linearizer.training.runs.load_run`."""
    run = load_run(run_dir, use_ema=use_ema, expect="flow")
    return run.model, run.config, run.step


__all__ = ["FlowTask", "load_flow_run", "load_images", "resolve_perceptual", "draw_noise"]
