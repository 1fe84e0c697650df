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
from .components import find_components, shares
from .config import FlowConfig
from .model import OneStepFlow
from .objective import draw_noise, flow_loss, make_distance, resolve_perceptual


def load_images(cfg: FlowConfig, split: str = "train") -> tuple[Tensor, Tensor]:
    """The config's dataset split as float32 images in [0, 1] and labels."""
    return data_images(cfg.data, cfg.network.img_size, split)


class FlowTask(ImageTask, kind="flow", config=FlowConfig):
    """Builds the model, draws data rows and noise per step, evaluates the paper's loss."""

    def build(self, cfg: FlowConfig) -> OneStepFlow:
        self.distance = make_distance(cfg.perceptual)
        model = super().build(cfg)
        self.parts = row_components(cfg, self.images, self.labels)
        self.parts.weigh(model)
        return model

    def build_model(self, cfg: FlowConfig, channels: int) -> OneStepFlow:
        return build_flow(cfg, channels=channels)

    @staticmethod
    def attach(model: OneStepFlow, run_dir: Path, step: int, section: str) -> None:
        model.calibration = load_calibration(run_dir, step, section)

    def batch(self, rng: StepRandom) -> dict[str, Tensor]:
        rows = rng.indices(len(self.images))
        return {"x1": self.images[rows], **self.parts.batch(rows)}

    def loss(self, model: nn.Module, batch: dict[str, Tensor], rng: StepRandom):
        x1 = batch["x1"]
        draws = draw_noise(x1, rng, times=self.cfg.time_sampling, groups=self.cfg.time_groups)
        labels = self.parts.train_labels(batch, rng, like=x1)
        return flow_loss(
            model,
            x1,
            draws,
            noise_level=self.cfg.noise_level,
            distance=self.distance,
            labels=labels,
        )

    def on_eval(self, model: OneStepFlow, step: int, run_dir: Path) -> dict[str, object]:
        cfg = self.cfg
        noise = self.grid_noise.to(next(model.parameters()).device)
        # the run's schedule, trained map alone: the grids show what training made
        spec = cfg.sampler.replace(maps="none")
        labels = self.parts.grid(len(noise))
        # The solver, not B: the same images as one step to rounding (the collapse claims), without
        # building one B per component for weights that change by the next grid.
        x = model.sample(cfg.sampler.temperature * noise, spec, labels=labels, one_step=False)
        return {"samples": self.save_samples(x, step, run_dir, scale=2)}

    def on_finish(self, model: OneStepFlow, ema, step: int, run_dir: Path) -> dict | None:
        """Fit the latent calibration (``calibration_samples`` > 0) for the run's sampler and
        the weights it samples with: the EMA ones when the run keeps
        them, else the raw ones (``linearizer calibrate RUN`` fits both)."""
        n = self.cfg.calibration_samples
        if not n:
            return None
        opts = FitOptions(
            sampler=self.cfg.sampler,
            n=n,
            seed=self.cfg.seed,
            transport_steps=self.cfg.transport_steps,
        )
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
        raise LinearizerError(
            f"the dataset's labels span {int(labels.min())}..{int(labels.max())}"
            f", outside classes=0..{classes - 1} (--set classes=N)"
        )
    return torch.bincount(labels, minlength=classes).double() / len(labels)


class OneGenerator:
    """The rows of a one-generator model: no component per row."""

    def weigh(self, model: OneStepFlow) -> None:
        """Set the model's mixture weights (a one-generator model has none)."""

    def batch(self, rows: Tensor) -> dict[str, Tensor]:
        return {}

    def train_labels(self, batch: dict[str, Tensor], rng: StepRandom, like: Tensor):
        return None

    def grid(self, n: int) -> Tensor | None:
        return None


class Components(OneGenerator):
    """Each training image's component (``parts``, one of ``k``): what a mixture trains on."""

    def __init__(self, parts: Tensor, k: int) -> None:
        self.parts, self.k = parts.reshape(-1).long(), k

    def weigh(self, model: OneStepFlow) -> None:
        model.mixture_weights.copy_(shares(self.parts, self.k))

    def batch(self, rows: Tensor) -> dict[str, Tensor]:
        return {"label": self.parts[rows]}

    def train_labels(self, batch: dict[str, Tensor], rng: StepRandom, like: Tensor):
        return batch["label"]

    def grid(self, n: int) -> Tensor:
        return torch.arange(n) % self.k


class Classes(Components):
    """A class-conditional run: the dataset's labels, and a share of rows trained with the null
    class for classifier-free guidance."""

    def __init__(self, labels: Tensor | None, classes: int, dropout: float) -> None:
        class_frequencies(labels, classes)  # one line for missing or out-of-range labels
        super().__init__(labels, classes)
        self.dropout = dropout

    def train_labels(self, batch: dict[str, Tensor], rng: StepRandom, like: Tensor):
        # drawn last in the step: a one-generator run's random stream is unchanged
        drop = rng.rand(like=like) < self.dropout
        return torch.where(drop.to(batch["label"].device), self.k, batch["label"])


def row_components(cfg: FlowConfig, images: Tensor, labels: Tensor | None) -> OneGenerator:
    """What each training row's component is, by the config: the dataset's classes
    (``conditional``), components found without labels (``components`` > 1), or none."""
    if cfg.conditional:
        return Classes(labels, cfg.classes, cfg.class_dropout)
    if cfg.components > 1:
        parts = find_components(
            images, cfg.components, cfg.component_features, cfg.seed, cfg.init_from
        )
        return Components(parts, cfg.components)
    return OneGenerator()


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
