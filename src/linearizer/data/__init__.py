"""Datasets with verified sources and caches, and PNG writers for image batches.

>>> images, labels = load_dataset("mnist", "test")   # doctest: +SKIP
"""

from __future__ import annotations

import os

import torch

from ..errors import LinearizerError
from .fashion import FASHION_CLASSES, FASHION_MNIST, load_fashion_mnist
from .images import grid_array, save_grid, save_strip
from .mnist import (
    MNIST,
    DatasetSpec,
    IdxFile,
    default_cache_dir,
    fetch_arrays,
    load_mnist,
    load_split,
    to_float_images,
)

DATASETS: dict[str, DatasetSpec] = {"mnist": MNIST, "fashion-mnist": FASHION_MNIST}


def get_spec(name: str) -> DatasetSpec:
    """The :class:`DatasetSpec` called ``name`` ("mnist" or "fashion-mnist")."""
    try:
        return DATASETS[name]
    except KeyError:
        raise LinearizerError(f"unknown dataset {name!r}; choose from {sorted(DATASETS)}") from None


def load_dataset(
    name: str,
    split: str = "train",
    root: str | os.PathLike | None = None,
    size: int = 32,
    *,
    cache_dir: str | os.PathLike | None = None,
    download: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``load_mnist`` / ``load_fashion_mnist`` by name."""
    return load_split(get_spec(name), split, root, size, cache_dir, download)


__all__ = [
    "DATASETS",
    "FASHION_CLASSES",
    "FASHION_MNIST",
    "MNIST",
    "DatasetSpec",
    "IdxFile",
    "default_cache_dir",
    "fetch_arrays",
    "get_spec",
    "grid_array",
    "load_dataset",
    "load_fashion_mnist",
    "load_mnist",
    "load_split",
    "save_grid",
    "save_strip",
    "to_float_images",
]
