"""Typed config and presets of style banks (``linearizer train style``).

Presets:

* ``smoke`` — seconds, for tests and CI: 32x32 images, one tiny block.
* ``cpu`` — a 4-style bank at 128x128 on 2 CPU cores in a few minutes: small-CNN couplings,
  channel-mix operators on the image-shaped latent.
* ``paper`` — the authors' style-transfer setup (256x256, 6 blocks of the invertible U-Net with
  16 channels, depthwise 4x4 kernels, Adam 1e-4 with weight decay 1e-5, 2000 epochs of the four
  styles as one batch), for GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..errors import LinearizerError
from ..invertible.factory import NetworkConfig
from ..training.config import TrainConfig, option, register_preset


@dataclass
class StyleConfig(TrainConfig):
    """A style bank: content images, stylised targets, the shared network and the operators."""

    RESUME_MUTABLE = TrainConfig.RESUME_MUTABLE | {"strip_frames"}

    content: list[str] = option(
        [], "content images: files or skimage:NAME (set by --content; absolute paths)"
    )
    styles: str = option(
        "", "folder of targets: one sub-folder per style holding <content name>.png (--styles)"
    )
    style_names: list[str] = option(
        [], "style order (filled from the styles folder when empty; fixes operator indices)"
    )
    bank: Literal["operators", "index"] = option(
        "operators",
        "operators: one linear operator per style (exact mixing); "
        "index: the authors' hypernetwork from a style index (for comparison)",
    )
    operator: Literal["depthwise", "channelmix"] = option(
        "channelmix",
        "per-style operator: depthwise kxk kernels (authors) or a per-pixel CxC "
        "channel mix followed by depthwise kernels",
    )
    kernel_size: int = option(4, "depthwise kernel size (authors: 4)")
    latent_squeeze: bool = option(
        False, "apply the operator to the 2x2-squeezed latent (4x channels, half resolution)"
    )
    flags: Literal["shared", "authors"] = option(
        "shared",
        "shared: g_x = g_y (one flag; strength 0 gives the content back); "
        "authors: one network at flags 1 (x) and 0 (y)",
    )
    network: NetworkConfig = option(
        NetworkConfig(img_size=128, blocks=4),
        "the shared network g (images are centre-cropped and resized to network.img_size)",
    )
    index_emb: int = option(64, "index hypernetwork: sinusoidal embedding width (authors: 256)")
    index_hidden: int = option(256, "index hypernetwork: hidden width (authors: 1024)")
    index_depth: int = option(2, "index hypernetwork: hidden layers (authors: 3)")
    loss: Literal["mse", "l1"] = option("mse", "pixel loss between f_s(content) and its target")
    crop: int = option(0, "train on random crops of this size (0 = whole images)")
    flip: bool = option(False, "random horizontal flips of (content, target) pairs")
    strip_frames: int = option(9, "frames of the interpolation strips written at evaluation")

    def validate(self) -> None:
        super().validate()
        size = self.network.img_size
        if size < 8 or size % 4:
            raise LinearizerError(f"img_size must be a multiple of 4 and >= 8, got {size}")
        if self.network.memory_saving:
            raise LinearizerError("config key 'network.memory_saving' is not supported by styles")
        self._require(
            "kernel_size index_hidden index_depth", ">= 1", lambda v: not v < 1, got=False
        )
        self._require("index_emb", "even and >= 4", lambda v: not (v < 4 or v % 2))
        if self.crop and (self.crop < 8 or self.crop % 4 or self.crop > size):
            raise LinearizerError(
                f"config key 'crop' must be 0 or a multiple of 4 in [8, img_size], got {self.crop}"
            )
        self._require("strip_frames", ">= 2", lambda v: not v < 2)
        if len(set(self.style_names)) != len(self.style_names):
            raise LinearizerError(f"style_names must be distinct, got {self.style_names}")


SMOKE = StyleConfig(
    network=NetworkConfig(img_size=32, blocks=1, hidden=8),
    index_emb=8,
    index_hidden=16,
    index_depth=1,
    batch_size=2,
    max_steps=4,
    lr=1e-3,
    ckpt_every=2,
    log_every=1,
    ema_decay=0.0,
    threads=1,
    progress=False,
)

CPU = StyleConfig(
    batch_size=4,
    max_steps=1500,
    max_minutes=6.0,
    lr=2e-3,
    warmup_steps=50,
    schedule="cosine",
    min_lr_ratio=0.05,
    grad_clip=1.0,
    ema_decay=0.0,
    ckpt_every=250,
    log_every=25,
    threads=2,
)

PAPER = StyleConfig(
    network=NetworkConfig(
        kind="paper", img_size=256, blocks=6, hidden=16, dropout=0.0, clamp=5.0, clamp_mode="hard"
    ),
    operator="depthwise",
    kernel_size=4,
    flags="authors",
    index_emb=256,
    index_hidden=1024,
    index_depth=3,
    batch_size=4,
    lr=1e-4,
    weight_decay=1e-5,
    max_steps=2000,
    ema_decay=0.0,
    ckpt_every=200,
    log_every=20,
)

for _name, _cfg in (("smoke", SMOKE), ("cpu", CPU), ("paper", PAPER)):
    register_preset("style", _name, _cfg)
