"""Our small MNIST classifier: a LeNet-5-style CNN on 32x32 images, with committed weights.

It gives the features behind "FID (LeNet)" / "KID (LeNet)" and the accuracy/confidence of
generated digits. It reads images exactly as :func:`linearizer.data.load_mnist` returns them
(``[N, 1, 32, 32]`` in [0, 1], resized 28 -> 32); 28x28 inputs are resized the same way.

Architecture (LeNet-5 layout, ReLU and max-pooling, wider convolutions)::

    conv 5x5 1->16, ReLU, maxpool 2     32 -> 28 -> 14
    conv 5x5 16->32, ReLU, maxpool 2    14 -> 10 -> 5
    linear 800->120, ReLU
    linear 120->84, ReLU                <- the 84-d features
    linear 84->10                       <- logits

>>> model = load_classifier()                      # the committed weights
>>> model(torch.zeros(2, 1, 32, 32)).shape, model.features(torch.zeros(2, 1, 32, 32)).shape
(torch.Size([2, 10]), torch.Size([2, 84]))
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import LinearizerError
from ..io import load_tensors, read_json, save_tensors, write_json

ASSET_NAME = "lenet_mnist"
FORMAT = "linearizer.lenet/1"


@dataclass(frozen=True)
class LeNetConfig:
    channels: tuple[int, int] = (16, 32)
    hidden: tuple[int, int] = (120, 84)
    num_classes: int = 10
    image_size: int = 32


class LeNet(nn.Module):
    """LeNet-5-style classifier; :meth:`features` gives the penultimate (84-d) activations."""

    def __init__(self, config: LeNetConfig | None = None):
        super().__init__()
        self.config = config = config or LeNetConfig()
        if config.image_size != 32:
            raise LinearizerError("LeNet is built for 32x32 inputs")
        c1, c2 = config.channels
        h1, h2 = config.hidden
        self.conv1 = nn.Conv2d(1, c1, 5)
        self.conv2 = nn.Conv2d(c1, c2, 5)
        self.fc1 = nn.Linear(c2 * 5 * 5, h1)
        self.fc2 = nn.Linear(h1, h2)
        self.head = nn.Linear(h2, config.num_classes)

    @property
    def feature_dim(self) -> int:
        return self.config.hidden[1]

    def features(self, x: Tensor) -> Tensor:
        x = lenet_view(x)
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return F.relu(self.fc2(x))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x))


def lenet_view(images: Tensor) -> Tensor:
    """Images as both classifiers read them, in training and on every FID path: float32,
    clamped to [0, 1], one channel, resized to 32x32 with antialiasing when they are another
    size (28x28 MNIST comes out as the data loader makes it).

    >>> x = lenet_view(torch.full((2, 1, 8, 8), 2.0))   # clamped, then resized
    >>> x.shape, float(x.max())
    (torch.Size([2, 1, 32, 32]), 1.0)
    """
    if not isinstance(images, Tensor):
        raise LinearizerError(f"the MNIST classifiers need a tensor, got {type(images).__name__}")
    x = images.detach().to(torch.float32).clamp(0, 1)
    if x.dim() != 4 or x.shape[1] != 1:
        raise LinearizerError(
            f"the MNIST classifiers need one-channel images [N, 1, H, W], got {tuple(x.shape)}"
        )
    if tuple(x.shape[-2:]) != (32, 32):
        x = F.interpolate(x, size=(32, 32), mode="bilinear", antialias=True, align_corners=False)
    return x


# --- inference ---------------------------------------------------------------------------------


@torch.no_grad()
def batched(model: nn.Module, fn: Callable[[Tensor], Tensor], x: Tensor, batch_size: int = 1000):
    """Apply ``fn`` to ``x`` batch by batch in eval mode, on the model's device; cat on CPU."""
    param = next(model.parameters())
    was_training = model.training
    model.eval()
    try:
        outs = [
            fn(x[i : i + batch_size].to(param.device, param.dtype)).cpu()
            for i in range(0, len(x), batch_size)
        ]
    finally:
        model.train(was_training)
    if not outs:
        raise LinearizerError("no images given")
    return torch.cat(outs)


def predict_logits(model: LeNet, images: Tensor, batch_size: int = 1000) -> Tensor:
    return batched(model, model.forward, images, batch_size)


def extract_features(model: LeNet, images: Tensor, batch_size: int = 1000) -> Tensor:
    """Penultimate features ``[N, 84]`` (no grad, eval mode, batched)."""
    return batched(model, model.features, images, batch_size)


def accuracy(model: LeNet, images: Tensor, labels: Tensor, batch_size: int = 1000) -> float:
    pred = predict_logits(model, images, batch_size).argmax(1)
    return float((pred == labels.cpu()).double().mean())


# --- saving and loading ------------------------------------------------------------------------


def asset_path(name: str) -> Path:
    """A weights file shipped in the package, ``linearizer/assets/<name>.safetensors``."""
    return Path(str(resources.files("linearizer").joinpath("assets", f"{name}.safetensors")))


def default_weights_path() -> Path:
    """The committed weights, ``linearizer/assets/lenet_mnist.safetensors``."""
    return asset_path(ASSET_NAME)


def write_weights(model: nn.Module, path: str | Path, fmt: str, config: dict, info: dict) -> Path:
    """Write ``path`` (safetensors) and ``path.with_suffix('.json')`` (format, config, SHA-256
    of the weights file and ``info``)."""
    path = Path(path)
    save_tensors(path, model.state_dict(), metadata={"format": fmt})
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    write_json(path.with_suffix(".json"), {"format": fmt, "config": config, "sha256": sha, **info})
    return path


def read_weights(path: Path, fmt: str, what: str, need_sha: bool = False) -> tuple[dict, dict]:
    """The tensors and the JSON record of a weights file, checked: the record's format, and the
    file's SHA-256 against the record's (which must be there when ``need_sha``)."""
    state = load_tensors(path)  # the file the user named is checked first
    meta_path = path.with_suffix(".json")
    meta = read_json(meta_path)
    if not isinstance(meta, dict) or meta.get("format") != fmt:
        raise LinearizerError(f"{meta_path} is not a linearizer {what} description")
    sha = meta.get("sha256")
    if sha is None and need_sha:
        raise LinearizerError(f"{meta_path} records no SHA-256 of its weights")
    # the weights (under a megabyte) were just read whole, so hashing them again is cheap
    if sha is not None and hashlib.sha256(path.read_bytes()).hexdigest() != sha:
        raise LinearizerError(
            f"{path} does not match the SHA-256 in {meta_path.name}: damaged or replaced"
        )
    return state, meta


def load_state(model: nn.Module, state: dict, path: Path) -> nn.Module:
    """``model`` with ``state`` loaded; a mismatch names the file in one line."""
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0]
        raise LinearizerError(f"{path} does not match its config: {first}") from None
    return model


def save_classifier(model: LeNet, path: str | Path, info: dict) -> Path:
    """Write ``path`` (safetensors) and ``path.with_suffix('.json')`` (config + ``info``)."""
    return write_weights(model, path, FORMAT, asdict(model.config), info)


def load_classifier(path: str | Path | None = None, device: str | torch.device = "cpu") -> LeNet:
    """Load a classifier (default: the committed weights) in eval mode."""
    path = Path(path) if path is not None else default_weights_path()
    state, meta = read_weights(path, FORMAT, "LeNet")
    try:
        cfg = meta["config"]
        config = LeNetConfig(
            channels=tuple(cfg["channels"]),
            hidden=tuple(cfg["hidden"]),
            num_classes=int(cfg["num_classes"]),
            image_size=int(cfg["image_size"]),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise LinearizerError(f"bad classifier config beside {path}: {e}") from None
    return load_state(LeNet(config), state, path).to(device).eval()


# --- training ----------------------------------------------------------------------------------


def random_shift(x: Tensor, max_shift: int, generator: torch.Generator) -> Tensor:
    """Translate each one-channel image by up to ``max_shift`` pixels (zero fill)."""
    n, _, h, w = x.shape
    padded = F.pad(x, (max_shift,) * 4)
    dy = torch.randint(0, 2 * max_shift + 1, (n,), generator=generator)
    dx = torch.randint(0, 2 * max_shift + 1, (n,), generator=generator)
    rows = (dy[:, None] + torch.arange(h))[:, :, None]
    cols = (dx[:, None] + torch.arange(w))[:, None, :]
    return padded[:, 0][torch.arange(n)[:, None, None], rows, cols].unsqueeze(1)


@dataclass
class TrainResult:
    model: nn.Module
    test_accuracy: float
    train_seconds: float
    history: list[dict]


def train_classifier(
    train: tuple[Tensor, Tensor],
    test: tuple[Tensor, Tensor],
    seed: int = 0,
    epochs: int = 12,
    batch_size: int = 128,
    lr: float = 2e-3,
    max_shift: int = 2,
    log: Callable[[str], None] | None = print,
) -> TrainResult:
    """Train :class:`LeNet` from scratch: Adam, cosine learning rate, random shifts.

    ``train`` and ``test`` are ``(images [N, 1, 32, 32], labels [N])``. Deterministic for a
    given seed on one CPU thread (shuffling and augmentation draw from a seeded generator).
    """
    return fit_classifier(LeNet, train, test, seed, epochs, batch_size, lr, max_shift, log)


def fit_classifier(
    build: Callable[[], nn.Module],
    train: tuple[Tensor, Tensor],
    test: tuple[Tensor, Tensor],
    seed: int,
    epochs: int,
    batch_size: int,
    lr: float,
    max_shift: int = 0,
    log: Callable[[str], None] | None = print,
) -> TrainResult:
    """The training loop shared by our classifiers: the model ``build()`` makes after seeding
    torch with ``seed``, Adam, cosine learning rate to zero over all steps, cross-entropy,
    optional random shifts; the test accuracy after every epoch."""
    if epochs < 1:
        raise LinearizerError(f"epochs must be >= 1, got {epochs}")
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = build()
    images, labels = train
    steps = epochs * math.ceil(len(images) / batch_size)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))
    )
    history, start = [], time.perf_counter()
    for epoch in range(epochs):
        model.train()
        order = torch.randperm(len(images), generator=gen)
        total = 0.0
        for i in range(0, len(images), batch_size):
            idx = order[i : i + batch_size]
            x = random_shift(images[idx], max_shift, gen) if max_shift else images[idx]
            loss = F.cross_entropy(model(x), labels[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item() * len(idx)
        acc = accuracy(model, *test)
        row = {
            "epoch": epoch + 1,
            "loss": total / len(images),
            "test_accuracy": acc,
            "seconds": time.perf_counter() - start,
        }
        history.append(row)
        if log:
            log(
                f"epoch {epoch + 1}/{epochs}  loss {row['loss']:.4f}  test accuracy {acc:.4%}  "
                f"({row['seconds']:.0f} s)"
            )
    return TrainResult(
        model.eval(), history[-1]["test_accuracy"], time.perf_counter() - start, history
    )


def describe(result: TrainResult, seed: int, epochs: int, command: str, data: dict) -> dict:
    """The JSON record written beside the weights."""
    return {
        "test_accuracy": result.test_accuracy,
        "seed": seed,
        "epochs": epochs,
        "train_seconds": round(result.train_seconds, 1),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "data": data,
        "command": command,
        "history": result.history,
    }


def load_info(path: str | Path | None = None) -> dict:
    """The JSON record of a classifier (default: the committed one)."""
    path = Path(path) if path is not None else default_weights_path()
    return read_json(path.with_suffix(".json"))
