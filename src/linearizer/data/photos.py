"""Small colour datasets that need no download: crops of scikit-image's bundled photographs, and
coloured synthetic strokes.

``photo_crops``: the public-domain colour photographs that ship inside scikit-image (the optional
``style`` extra), each resized so its shorter side is ``shorter`` pixels, cut into every
``img_size x img_size`` crop on a ``stride`` grid, plus mirror images. Enough varied colour
texture (skin, fur, coffee, galaxies, stained tissue, a rocket) to show a colour model learning
on two CPU cores in minutes. Labels are the photo's index; every tenth crop is ``test``.

``colour_strokes``: :func:`linearizer.data.synthetic.strokes` painted in a random colour on a
random dark background; for tests and smoke runs only.

>>> images, labels = colour_strokes(4, size=8)
>>> tuple(images.shape)
(4, 3, 8, 8)
"""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image
from torch import Tensor

from ..errors import LinearizerError
from .folder import resize_crop_shorter
from .synthetic import strokes

PHOTOS = (
    "astronaut",
    "chelsea",
    "coffee",
    "hubble_deep_field",
    "immunohistochemistry",
    "retina",
    "rocket",
)


def _photo(name: str) -> np.ndarray:
    try:
        import skimage.data as data
    except ImportError:
        raise LinearizerError(
            "dataset photo-crops needs scikit-image (pip install 'linearizer[style]'); "
            "or train on your own images with --set data.dataset=folder:PATH"
        ) from None
    try:
        array = np.asarray(getattr(data, name)())
    except Exception as e:  # a fetcher that would need the network, or a changed API
        why = f"scikit-image photo {name!r} cannot be loaded offline: {e}"
        raise LinearizerError(why) from None
    if array.ndim != 3 or array.shape[2] < 3:
        raise LinearizerError(f"scikit-image photo {name!r} is not an RGB image")
    return array[..., :3].astype(np.uint8)


def photo_crops(
    split: str = "train", img_size: int = 32, shorter: int = 128, stride: int = 8
) -> tuple[Tensor, Tensor]:
    """Crops ``[N, 3, img_size, img_size]`` in [0, 1] and their photo index."""
    if split not in ("train", "test", "all"):
        raise LinearizerError(f"split must be train, test or all, got {split!r}")
    if not 1 <= img_size <= shorter:
        raise LinearizerError(f"img_size must be between 1 and {shorter}, got {img_size}")
    crops, labels = [], []
    for label, name in enumerate(PHOTOS):
        photo = np.asarray(resize_crop_shorter(Image.fromarray(_photo(name)), shorter))
        h, w = photo.shape[:2]
        for y in range(0, h - img_size + 1, stride):
            for x in range(0, w - img_size + 1, stride):
                crop = photo[y : y + img_size, x : x + img_size]
                crops += [crop, crop[:, ::-1]]
                labels += [label, label]
    keep = np.arange(len(crops)) // 2 % 10 == 0  # a crop and its mirror share the split
    if split == "train":
        keep = ~keep
    elif split == "all":
        keep[:] = True
    array = np.stack([c for c, k in zip(crops, keep) if k]).transpose(0, 3, 1, 2)
    images = torch.from_numpy(np.ascontiguousarray(array)).to(torch.float32).div_(255.0)
    return images, torch.tensor([lb for lb, k in zip(labels, keep) if k], dtype=torch.int64)


def colour_strokes(n: int, size: int = 32, seed: int = 0) -> tuple[Tensor, Tensor]:
    """``n`` coloured stroke images ``[n, 3, size, size]`` and labels (strokes - 1)."""
    shape, labels = strokes(n, size, seed)
    gen = torch.Generator().manual_seed(seed + 7919)
    ink = 0.3 + 0.7 * torch.rand(n, 3, 1, 1, generator=gen)
    paper = 0.3 * torch.rand(n, 3, 1, 1, generator=gen)
    return paper + (ink - paper) * shape, labels
