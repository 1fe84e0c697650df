"""What the image tasks share: the training images, batches of random rows, the fixed noise of
the sample grids, the grids' files, and registering the run kind so :func:`load_run` can load
the task's runs back.

A task subclasses :class:`ImageTask` with its kind and config class, and writes what differs:

>>> from torch import nn
>>> from linearizer.training.config import TrainConfig
>>> class Echo(ImageTask, kind="echo-doctest", config=TrainConfig):
...     def build_model(self, cfg, channels):
...         return nn.Identity()
...
...     def loss(self, model, batch, rng):
...         return batch["x"].square().mean(), {}
>>> from linearizer.training.runs import run_kind
>>> run_kind("echo-doctest").config is TrainConfig
True
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ..data import save_grid
from ..data.config import load_images
from .config import Config
from .random_streams import StepRandom
from .runs import register_run_kind

# The grids' noise comes from its own generator, seeded apart from the run's step streams, so
# every grid of a run shows the same noise and the training draws stay untouched.
GRID_SEED_OFFSET = 12345


class ImageTask:
    """A :class:`~linearizer.training.trainer.Task` over a set of training images.

    ``images``/``labels`` default to the config's dataset (``cfg.data`` at
    ``cfg.network.img_size``, the train split). :meth:`build` keeps the config, the images and
    ``grid_noise`` (``cfg.n_samples`` standard normal images), then calls :meth:`build_model`.
    Defining a subclass with ``kind=`` and ``config=`` registers its runs: they are rebuilt by
    :meth:`model_for_run`, named by :meth:`run_label` and completed by :meth:`attach`.
    """

    kind: ClassVar[str] = ""

    def __init_subclass__(
        cls, kind: str = "", config: type[Config] | None = None, **rest: Any
    ) -> None:
        super().__init_subclass__(**rest)
        if not kind:
            return
        if config is None:
            raise TypeError(f"{cls.__name__}: a task kind needs its config class")
        cls.kind = kind
        # only what the task writes itself: the base's run_label and attach are placeholders
        label = cls.run_label if "run_label" in cls.__dict__ else None
        attach = cls.attach if "attach" in cls.__dict__ else None
        register_run_kind(kind, config, cls.model_for_run, label=label, attach=attach)

    def __init__(self, images: Tensor | None = None, labels: Tensor | None = None) -> None:
        self.images, self.labels = images, labels

    # -- what a task writes ------------------------------------------------------------------
    def build_model(self, cfg: Any, channels: int) -> nn.Module:
        """The freshly initialised model of ``cfg`` for images with ``channels`` channels."""
        raise NotImplementedError

    def loss(self, model: nn.Module, batch: dict[str, Tensor], rng: StepRandom):
        raise NotImplementedError

    @classmethod
    def model_for_run(cls, cfg: Any, run_dir: Path) -> nn.Module:
        """The model a saved run of this kind loads its weights into (default:
        :meth:`build_model` for the config's data channels)."""
        return cls().build_model(cfg, cfg.data.channels)

    @staticmethod
    def run_label(cfg: Any) -> str:
        """The finer kind a config names (the projective task's IGN baseline is ``ign``)."""
        raise NotImplementedError

    @staticmethod
    def attach(model: nn.Module, run_dir: Path, step: int, section: str) -> None:
        """What the run folder adds to its loaded model, after the weights."""

    # -- what tasks share --------------------------------------------------------------------
    def build(self, cfg: Any) -> nn.Module:
        self.cfg = cfg
        if self.images is None:
            self.images, self.labels = load_images(cfg.data, cfg.network.img_size, "train")
        gen = torch.Generator().manual_seed(cfg.seed + GRID_SEED_OFFSET)
        self.grid_noise = torch.randn(cfg.n_samples, *self.images.shape[1:], generator=gen)
        return self.build_model(cfg, self.images.shape[1])

    def batch(self, rng: StepRandom) -> dict[str, Tensor]:
        return {"x": self.images[rng.indices(len(self.images))]}

    @staticmethod
    def save_samples(images: Tensor, step: int, run_dir: Path, **grid: Any) -> str:
        """Save ``images`` (clamped to [0, 1]) as the grid of ``step`` in the run's samples
        folder (``grid``: :func:`~linearizer.data.save_grid`'s options); returns its path."""
        path = Path(run_dir) / "samples" / f"step_{step:08d}.png"
        save_grid(images.clamp(0, 1).cpu(), path, **grid)
        return str(path)
