"""Fashion-MNIST (Zalando), through the same verified IDX loader as MNIST.

Your folder (``root``) is the only source when given. Otherwise, in order: the cache
(``fashion-mnist.npz``), the files of the Debian/Ubuntu package ``dataset-fashion-mnist``
(``apt-get install dataset-fashion-mnist`` puts them in ``/usr/share/datasets/fashion-mnist``),
then the publisher's mirrors.

>>> images, labels = load_fashion_mnist("test")    # doctest: +SKIP
>>> FASHION_CLASSES[int(labels[0])]                  # doctest: +SKIP
'Ankle boot'
"""

from __future__ import annotations

import os

import torch

from .mnist import DatasetSpec, IdxFile, load_split

FASHION_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)

# The .gz MD5s are the ones the publisher lists in github.com/zalandoresearch/fashion-mnist
# (README, "Get the Data"; the same table ships in Debian's /usr/share/doc/dataset-fashion-mnist).
# The SHA-256s of the uncompressed files are published in public loaders (found by exact-string
# search of public GitHub code, e.g. a loader whose comment says they were derived from archives
# matching the publisher's MD5s, and a Makefile's `SHA256F_train-images-idx3-ubyte = c59f46...`).
# We checked them against the Debian package's files: Debian re-compressed the archives (other
# .gz MD5s) but the uncompressed content matches these SHA-256s and the published raw MD5s
# (f4a8712d..., 9018921c..., 8181f547..., 15d48437...).
FASHION_MNIST = DatasetSpec(
    name="fashion-mnist",
    files={
        "train_images": IdxFile(
            "train-images-idx3-ubyte",
            (60000, 28, 28),
            "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
            "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
        ),
        "train_labels": IdxFile(
            "train-labels-idx1-ubyte",
            (60000,),
            "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
            "25c81989df183df01b3e8a0aad5dffbe",
        ),
        "test_images": IdxFile(
            "t10k-images-idx3-ubyte",
            (10000, 28, 28),
            "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
            "bef4ecab320f06d8554ea6380940ec79",
        ),
        "test_labels": IdxFile(
            "t10k-labels-idx1-ubyte",
            (10000,),
            "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
            "bb300cfdad3c16e7a12a480ee83cd310",
        ),
    },
    mirrors=(
        "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com",
        "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion",
    ),
    system_dirs=("/usr/share/datasets/fashion-mnist",),
)


def load_fashion_mnist(
    split: str = "train",
    root: str | os.PathLike | None = None,
    size: int = 32,
    *,
    cache_dir: str | os.PathLike | None = None,
    download: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fashion-MNIST ``split`` as float32 images ``[N, 1, size, size]`` and int64 labels."""
    return load_split(FASHION_MNIST, split, root, size, cache_dir, download)
