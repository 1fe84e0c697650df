"""The data section of a training config (:class:`DataConfig`) and the images it names.

>>> images, labels = load_images(DataConfig(dataset="synthetic"), img_size=8, split="test")
>>> tuple(images.shape), float(images.min()) >= 0.0
((512, 1, 8, 8), True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from torch import Tensor

from ..config import Config, option
from .synthetic import strokes


@dataclass
class DataConfig(Config):
    """Which training images, and where their files are."""

    dataset: Literal["mnist", "fashion-mnist", "synthetic"] = option(
        "mnist", "training images (synthetic: generated strokes, for smoke runs and tests)"
    )
    root: str = option("", "folder with the dataset's IDX files or cache ('' = default)")


def load_images(cfg: DataConfig, img_size: int, split: str = "train") -> tuple[Tensor, Tensor]:
    """The dataset split as float32 images ``[N, C, img_size, img_size]`` in [0, 1] and labels."""
    if cfg.dataset == "synthetic":
        return strokes(2048 if split == "train" else 512, img_size, seed=int(split == "test"))
    from . import load_dataset

    return load_dataset(cfg.dataset, split, cfg.root or None, img_size)
