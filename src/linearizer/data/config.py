"""The data section of a training config (:class:`DataConfig`) and the images it names.

>>> images, labels = load_images(DataConfig(dataset="synthetic"), img_size=8, split="test")
>>> tuple(images.shape), float(images.min()) >= 0.0
((512, 1, 8, 8), True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from ..config import Config, option
from ..errors import LinearizerError
from .folder import load_folder, parse_dataset
from .photos import colour_strokes, photo_crops
from .synthetic import strokes

GREY_SETS = ("mnist", "fashion-mnist", "synthetic")
COLOUR_SETS = ("synthetic-rgb", "photo-crops", "celeba")
FOLDER_HELP = "folder:PATH (any tree of PNG/JPEG)"


@dataclass
class DataConfig(Config):
    """Which training images, and where their files are."""

    dataset: str = option(
        "mnist",
        "training images: mnist, fashion-mnist, synthetic (generated strokes, for smoke runs), "
        "synthetic-rgb (coloured strokes), photo-crops (crops of scikit-image's bundled photos), "
        "celeba (CelebA's layout under root, or celeba:PATH) or folder:PATH (any tree of PNG/JPEG)",
    )
    root: str = option(
        "",
        "folder with the dataset's own files, then its only source "
        "('' = the cache, then the package and download sources)",
    )
    colour: Literal["auto", "rgb", "grey"] = option(
        "auto", "channels: auto (grey for the MNIST-like sets, RGB otherwise), rgb or grey"
    )
    mixed_sizes: bool = option(
        False, "folder datasets: accept images of different sizes (each cropped on its own)"
    )

    def validate(self) -> None:
        super().validate()
        kind, path = parse_dataset(self.dataset)
        if kind not in GREY_SETS + COLOUR_SETS + ("folder",) or (kind == "folder" and not path):
            choices = ", ".join(GREY_SETS + COLOUR_SETS)
            raise LinearizerError(
                f"unknown dataset {self.dataset!r}; choose {choices} or {FOLDER_HELP}"
            )

    @property
    def channels(self) -> int:
        """1 or 3: the images' channel count (what the model is built for)."""
        if self.colour != "auto":
            return 3 if self.colour == "rgb" else 1
        return 1 if parse_dataset(self.dataset)[0] in GREY_SETS else 3


def load_images(cfg: DataConfig, img_size: int, split: str = "train") -> tuple[Tensor, Tensor]:
    """The dataset split as float32 images ``[N, C, img_size, img_size]`` in [0, 1] and labels
    (``C`` = ``cfg.channels``)."""
    kind, path = parse_dataset(cfg.dataset)
    seed = int(split == "test")
    if kind in ("folder", "celeba"):
        root = path or cfg.root
        if not root:
            raise LinearizerError("dataset celeba needs its folder: celeba:PATH or data.root=PATH")
        return load_folder(
            root, split, img_size, cfg.channels, layout=kind, mixed_sizes=cfg.mixed_sizes
        )
    if kind in ("synthetic", "synthetic-rgb"):
        draw = strokes if kind == "synthetic" else colour_strokes
        images, labels = draw(2048 if split == "train" else 512, img_size, seed=seed)
    elif kind == "photo-crops":
        images, labels = photo_crops(split, img_size)
    else:
        from . import load_dataset

        images, labels = load_dataset(kind, split, cfg.root or None, img_size)
    return to_channels(images, cfg.channels), labels


def to_channels(images: Tensor, channels: int) -> Tensor:
    """Grey -> RGB by repeating; RGB -> grey by luma (ITU-R 601 weights, as Pillow's "L")."""
    if images.shape[1] == channels:
        return images
    if channels == 3:
        return images.expand(-1, 3, -1, -1).contiguous()
    weights = torch.tensor([0.299, 0.587, 0.114], dtype=images.dtype)
    return (images * weights[None, :, None, None]).sum(1, keepdim=True)
