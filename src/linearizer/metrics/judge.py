"""The held-out judge: a second MNIST classifier behind "FID (judge)", used only to report.

Settings of this project were chosen by FID (LeNet) (:mod:`linearizer.metrics.classifier`), so
that number may flatter them. The judge was trained with another architecture, another seed
and no augmentation, and nothing is ever tuned against it: a gain that shows under FID (LeNet)
but not under FID (judge) is a gain on the LeNet, not on the digits.

Architecture (all-convolutional: strided 3x3 convolutions instead of pooling, GELU, no fully
connected hidden layer, global average pooling; the LeNet has max-pooling, ReLU and two
fully connected layers)::

    conv 3x3 1->16, GELU                32 -> 32
    conv 3x3 stride 2 16->32, GELU      32 -> 16
    conv 3x3 stride 2 32->64, GELU      16 -> 8
    conv 3x3 stride 2 64->128, GELU     8 -> 4
    conv 3x3 128->128, GELU             4 -> 4 (each position now sees the whole digit)
    mean over the 4x4 positions         <- the 128-d features
    linear 128->10                      <- logits

Reference points with the committed weights (test = the 10,000 MNIST test images at 32x32),
next to FID (LeNet) on the same sets; digit-level differences come out on a similar scale,
while noise lands far further away than under the LeNet::

    sets                                         FID (judge)   FID (LeNet)
    60k train vs test                            0.91          0.59
    10k random train images vs test              1.06          0.81
    5k vs 5k random halves of the test set       1.69          1.89
    first 5k vs last 5k of the test set          20.6          20.4
    10k uniform noise vs test                    19,700        894

Inputs follow the LeNet's convention (``[N, 1, 32, 32]`` in [0, 1]; 28x28 is resized the same
way, by :func:`linearizer.metrics.classifier.lenet_view`).

>>> judge = load_judge()                               # the committed weights
>>> judge_features(torch.zeros(2, 1, 32, 32), judge).shape
torch.Size([2, 128])
>>> from linearizer.metrics import load_info
>>> judge_info()["seed"] != load_info()["seed"]        # not the LeNet's seed
True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import LinearizerError
from ..io import read_json
from .classifier import (
    TrainResult,
    asset_path,
    extract_features,
    fit_classifier,
    lenet_view,
    load_classifier,
    load_state,
    read_weights,
    write_weights,
)
from .fid import classifier_stats, fid_from_features, fid_lenet

ASSET_NAME = "judge_mnist"
FORMAT = "linearizer.judge/1"
SEED = 1  # the LeNet's is 0
EPOCHS = 5


@dataclass(frozen=True)
class JudgeConfig:
    widths: tuple[int, ...] = (16, 32, 64, 128)
    feature_dim: int = 128
    mix_kernel: int = 3
    num_classes: int = 10
    image_size: int = 32


class Judge(nn.Module):
    """All-convolutional GELU classifier; :meth:`features` gives the pooled 128-d activations."""

    def __init__(self, config: JudgeConfig | None = None):
        super().__init__()
        self.config = config = config or JudgeConfig()
        if config.image_size != 32 or not config.widths:
            raise LinearizerError("the judge is built for 32x32 inputs and >= 1 convolution")
        chans = (1, *config.widths)
        self.convs = nn.ModuleList(
            nn.Conv2d(chans[i], chans[i + 1], 3, stride=1 if i == 0 else 2, padding=1)
            for i in range(len(config.widths))
        )
        k = config.mix_kernel
        self.mix = nn.Conv2d(chans[-1], config.feature_dim, k, padding=k // 2)
        self.head = nn.Linear(config.feature_dim, config.num_classes)

    @property
    def feature_dim(self) -> int:
        return self.config.feature_dim

    def features(self, x: Tensor) -> Tensor:
        x = lenet_view(x)
        for conv in self.convs:
            x = F.gelu(conv(x))
        return F.gelu(self.mix(x)).mean((2, 3))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x))


def default_judge_path() -> Path:
    """The committed weights, ``linearizer/assets/judge_mnist.safetensors``."""
    return asset_path(ASSET_NAME)


def save_judge(model: Judge, path: str | Path, info: dict) -> Path:
    """Write ``path`` (safetensors) and its JSON record (format, config, SHA-256, ``info``)."""
    return write_weights(model, path, FORMAT, asdict(model.config), info)


def load_judge(path: str | Path | None = None, device: str | torch.device = "cpu") -> Judge:
    """Load the judge (default: the committed weights) in eval mode, after checking the format
    and the SHA-256 recorded beside the weights."""
    path = Path(path) if path is not None else default_judge_path()
    state, meta = read_weights(path, FORMAT, "judge", need_sha=True)
    try:
        cfg = meta["config"]
        config = JudgeConfig(
            widths=tuple(int(w) for w in cfg["widths"]),
            feature_dim=int(cfg["feature_dim"]),
            mix_kernel=int(cfg["mix_kernel"]),
            num_classes=int(cfg["num_classes"]),
            image_size=int(cfg["image_size"]),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise LinearizerError(f"bad judge config beside {path}: {e}") from None
    return load_state(Judge(config), state, path).to(device).eval()


def judge_info(path: str | Path | None = None) -> dict:
    """The JSON record of a judge (default: the committed one)."""
    path = Path(path) if path is not None else default_judge_path()
    return read_json(path.with_suffix(".json"))


def train_judge(
    train: tuple[Tensor, Tensor],
    test: tuple[Tensor, Tensor],
    seed: int = SEED,
    epochs: int = EPOCHS,
    batch_size: int = 128,
    lr: float = 3e-3,
    config: JudgeConfig | None = None,
    log: Callable[[str], None] | None = print,
) -> TrainResult:
    """Train a :class:`Judge` from scratch without augmentation (the LeNet's loop otherwise).

    ``train`` and ``test`` are ``(images [N, 1, 32, 32], labels [N])``. Deterministic for a
    given seed on one CPU thread.
    """
    return fit_classifier(lambda: Judge(config), train, test, seed, epochs, batch_size, lr, 0, log)


# --- the metric --------------------------------------------------------------------------------


def judge_features(images: Tensor, model: Judge | None = None, batch_size: int = 1000) -> Tensor:
    """128-d judge features of MNIST-like images ``[N, 1, 32, 32]`` in [0, 1]."""
    return extract_features(model or load_judge(), images, batch_size)


def fid_judge(samples: Tensor, reference: Tensor, model: Judge | None = None) -> float:
    """FID (judge): the Fréchet distance on the held-out classifier's features."""
    model = model or load_judge()
    return fid_from_features(judge_features(samples, model), judge_features(reference, model))


def sample_scores(
    samples: Tensor,
    reference: Tensor,
    labels: Tensor | None = None,
    lenet: nn.Module | None = None,
    judge: Judge | None = None,
) -> dict:
    """FID (LeNet) and FID (judge) of ``samples`` against ``reference``, and what the judge
    thinks of the samples: ``judge_accuracy`` (vs ``labels``; None without them),
    ``judge_confidence`` (mean top probability) and ``judge_entropy`` (nats).

    Confidence only means something for digit-like samples: like the LeNet (0.91), the judge
    is sure of uniform noise (mean top probability 1.00); FID (judge) is what catches noise.
    """
    lenet = lenet or load_classifier()
    judge = judge or load_judge()
    stats = classifier_stats(samples, labels, judge)
    return {
        "fid_lenet": fid_lenet(samples, reference, lenet),
        "fid_judge": fid_judge(samples, reference, judge),
        "judge_accuracy": stats["accuracy"],
        "judge_confidence": stats["mean_max_prob"],
        "judge_entropy": stats["mean_entropy"],
    }
