"""Stylised training targets made offline: optimisation-based style transfer (Gatys et al.).

The authors distilled four pretrained fast-neural-style networks, which cannot be downloaded
here. This module makes comparable targets from scratch: starting at the content image, it
optimises the pixels so that Gram matrices of CNN features match the style image's (style loss)
while the features themselves stay close to the content image's (content loss).

Features come from

* ``random`` (default): a fixed, seeded, untrained two-layer CNN applied at several scales of a
  Gaussian pyramid. Random multi-scale filters capture colour and texture statistics well enough
  for texture-like styles (Ustyuzhaninov et al., 2017, "What does it take to generate natural
  textures?") and need nothing but this file.
* ``vgg19:PATH``: VGG-19's convolutions (relu1_1 ... relu4_1 for style, relu4_2 for content) from
  a weights file the user already has: safetensors, or torchvision's ``vgg19-*.pth`` read with the
  pickle-free reader. Nothing is ever downloaded.

Two details keep random features from producing checkerboard noise: the image is parametrised as
a sum of bilinearly upsampled offsets at several resolutions (coarse offsets move whole regions,
so low frequencies are cheap to change), and a small squared total-variation penalty.

>>> import torch
>>> content = torch.rand(3, 16, 16)
>>> styles = torch.rand(2, 3, 16, 16)
>>> out = stylise(content, styles, RandomFeatures(channels=4, levels=2),
...               GatysSettings(steps=2, pyramid=2))
>>> out.shape
torch.Size([2, 3, 16, 16])
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import LinearizerError
from ..io import write_json
from .images import image_name, load_image, save_image

# Four bundled public-domain pictures with distinct colour and texture (scikit-image's data).
# (skimage:hubble_deep_field makes a striking near-black style, but such low-contrast targets
# force g to be strongly expansive and amplify float32 rounding ~25x; see docs/style.)
DEFAULT_STYLES: dict[str, str] = {
    "stain": "skimage:immunohistochemistry",
    "logo": "skimage:logo",
    "retina": "skimage:retina",
    "gravel": "skimage:gravel",
}
DEFAULT_CONTENT = "skimage:chelsea"


def _binomial_blur(channels: int) -> Tensor:
    taps = torch.tensor([1.0, 4.0, 6.0, 4.0, 1.0])
    kernel = taps[:, None] * taps[None, :]
    return (kernel / kernel.sum()).expand(channels, 1, 5, 5).contiguous()


class RandomFeatures(nn.Module):
    """Fixed random CNN features at ``levels`` scales of a Gaussian pyramid (1, 1/2, 1/4 ...).

    Per scale: 5x5 conv (3 -> ``channels``), ReLU, 3x3 conv (``channels`` -> ``channels``),
    ReLU; both activations are returned. Weights are buffers drawn from ``seed``: the same
    features on every machine, and nothing to train or download.
    """

    def __init__(self, channels: int = 32, levels: int = 4, seed: int = 0) -> None:
        super().__init__()
        if channels < 1 or levels < 1:
            raise LinearizerError(f"need channels >= 1 and levels >= 1, got {channels}, {levels}")
        gen = torch.Generator().manual_seed(seed)
        self.levels = levels
        for i in range(levels):
            w1 = torch.randn(channels, 3, 5, 5, generator=gen) / (3 * 25) ** 0.5
            w2 = torch.randn(channels, channels, 3, 3, generator=gen) / (channels * 9) ** 0.5
            self.register_buffer(f"w1_{i}", w1)
            self.register_buffer(f"w2_{i}", w2)
        self.register_buffer("blur", _binomial_blur(3))
        # content is compared at the second scale's deeper layer: structure, not pixel detail
        self.content_layers = (min(3, 2 * levels - 1),)

    def forward(self, x: Tensor) -> list[Tensor]:
        x = x - 0.5
        out = []
        for i in range(self.levels):
            if i > 0:
                x = F.conv2d(
                    F.pad(x, (2, 2, 2, 2), mode="reflect"), self.blur.to(x), stride=2, groups=3
                )
            h1 = F.relu(F.conv2d(x, getattr(self, f"w1_{i}").to(x), padding=2))
            h2 = F.relu(F.conv2d(h1, getattr(self, f"w2_{i}").to(x), padding=1))
            out += [h1, h2]
        return out


# VGG-19 "features" up to relu4_2: conv widths, "M" = 2x2 max-pool (torchvision's layout).
_VGG19 = [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512]


class VGGFeatures(nn.Module):
    """VGG-19 relu1_1, relu2_1, relu3_1, relu4_1 (style) and relu4_2 (content), from user weights.

    ``weights``: a mapping with torchvision's keys (``features.0.weight`` ...), with or without
    the ``features.`` prefix. Use :meth:`from_file` to read one.
    """

    _STYLE = (0, 2, 4, 8)  # conv indices (0-based among convs) whose ReLUs give style features
    _CONTENT = 9

    def __init__(self, weights: dict[str, Tensor]) -> None:
        super().__init__()
        convs, c_in, module_index = [], 3, 0
        for item in _VGG19:
            if item == "M":
                module_index += 1
                continue
            key = f"{module_index}.weight"
            w = weights.get(f"features.{key}", weights.get(key))
            b = weights.get(f"features.{module_index}.bias", weights.get(f"{module_index}.bias"))
            if w is None or b is None or tuple(w.shape) != (item, c_in, 3, 3):
                raise LinearizerError(
                    f"VGG-19 weights lack a [{item}, {c_in}, 3, 3] tensor 'features.{key}' "
                    "(expected torchvision's vgg19 state dict)"
                )
            conv = nn.Conv2d(c_in, item, 3, padding=1)
            conv.weight.data.copy_(w.float())
            conv.bias.data.copy_(b.float())
            conv.requires_grad_(False)
            convs.append(conv)
            c_in, module_index = item, module_index + 2
        self.convs = nn.ModuleList(convs)
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))
        self.content_layers = (len(self._STYLE),)

    @classmethod
    def from_file(cls, path: str | Path) -> VGGFeatures:
        """Read ``.safetensors`` or a torch ``.pth`` zip (without unpickling anything)."""
        path = Path(path)
        if not path.is_file():
            raise LinearizerError(f"no such VGG-19 weights file: {path}")
        if path.suffix == ".safetensors":
            from ..io import load_tensors

            return cls(load_tensors(path))
        from ..safe_pickle import read_torch_checkpoint

        return cls(read_torch_checkpoint(path).state_dict)

    def forward(self, x: Tensor) -> list[Tensor]:
        h = (x - self.mean.to(x)) / self.std.to(x)
        style, content = [], None
        pools_after = {1, 3, 7}  # max-pool after conv 1, 3 and 7 (0-based)
        for i, conv in enumerate(self.convs):
            h = F.relu(conv(h))
            if i in self._STYLE:
                style.append(h)
            if i == self._CONTENT:
                content = h
            if i in pools_after:
                h = F.max_pool2d(h, 2)
        return [*style, content]


def make_features(spec: str, seed: int = 0) -> nn.Module:
    """``random`` or ``vgg19:PATH`` -> a feature extractor with ``content_layers``."""
    if spec == "random":
        return RandomFeatures(seed=seed)
    if spec.startswith("vgg19:"):
        return VGGFeatures.from_file(spec[len("vgg19:") :])
    raise LinearizerError(f"features must be 'random' or 'vgg19:PATH', got {spec!r}")


@dataclass
class GatysSettings:
    """Optimisation settings of :func:`stylise` (defaults tuned for 128x128 on a CPU)."""

    steps: int = 150
    lr: float = 0.01
    content_weight: float = 0.2
    tv_weight: float = 2.0
    pyramid: int = 5
    style_size: int = 0  # 0: the content's size

    def validate(self) -> None:
        if self.steps < 1 or self.pyramid < 1:
            raise LinearizerError("steps and pyramid must be >= 1")
        if min(self.lr, self.content_weight, self.tv_weight) < 0 or self.style_size < 0:
            raise LinearizerError("lr, weights and style_size must be non-negative")


def gram(f: Tensor) -> Tensor:
    """``[B, C, H, W] -> [B, C, C]`` feature correlations, normalised by the pixel count."""
    b, c, h, w = f.shape
    flat = f.reshape(b, c, h * w)
    return flat @ flat.transpose(1, 2) / (h * w)


def _relative(a: Tensor, b: Tensor, dims: tuple[int, ...]) -> Tensor:
    return (a - b).pow(2).sum(dims) / b.pow(2).sum(dims).clamp_min(1e-12)


def stylise(
    content: Tensor,
    styles: Tensor,
    features: nn.Module,
    settings: GatysSettings | None = None,
    progress: Callable[[int, float], None] | None = None,
) -> Tensor:
    """Stylise one ``[3, H, W]`` content image with each of ``styles [S, 3, h, w]`` at once.

    Returns ``[S, 3, H, W]`` in [0, 1]. Deterministic for fixed inputs (no random draws).
    """
    settings = settings or GatysSettings()
    settings.validate()
    if content.dim() != 3 or content.shape[0] != 3 or styles.dim() != 4 or styles.shape[1] != 3:
        raise LinearizerError(
            f"stylise needs content [3, H, W] and styles [S, 3, h, w], got "
            f"{list(content.shape)} and {list(styles.shape)}"
        )
    n, (h, w) = styles.shape[0], content.shape[1:]
    levels = min(settings.pyramid, max(1, int(math.log2(min(h, w))) - 1))
    base = content.unsqueeze(0).expand(n, 3, h, w)
    with torch.no_grad():
        style_grams = [gram(f) for f in features(styles)]
        content_feats = features(content.unsqueeze(0))
    layers = features.content_layers
    offsets = [
        torch.zeros(n, 3, -(-h // 2**i), -(-w // 2**i), requires_grad=True) for i in range(levels)
    ]
    opt = torch.optim.Adam(offsets, lr=settings.lr)

    def image() -> Tensor:
        total = base + offsets[0]
        for o in offsets[1:]:
            total = total + F.interpolate(o, size=(h, w), mode="bilinear", align_corners=False)
        return total.clamp(0, 1)

    for step in range(settings.steps):
        x = image()
        feats = features(x)
        style = sum(_relative(gram(f), g, (1, 2)).mean() for f, g in zip(feats, style_grams))
        cont = sum(
            _relative(feats[i], content_feats[i].expand_as(feats[i]), (1, 2, 3)).mean()
            for i in layers
        )
        dy, dx = x[..., 1:, :] - x[..., :-1, :], x[..., 1:] - x[..., :-1]
        tv = dy.pow(2).mean() + dx.pow(2).mean()
        loss = style + settings.content_weight * cont + settings.tv_weight * tv
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if progress is not None:
            progress(step, float(loss.detach()))
    with torch.no_grad():
        return image()


def make_targets(
    contents: list[str],
    styles: dict[str, str],
    out_dir: str | Path,
    size: int = 128,
    settings: GatysSettings | None = None,
    features: str = "random",
    seed: int = 0,
    log: Callable[[str], None] | None = None,
) -> dict:
    """Write ``OUT/<style>/<content>.png`` for every content image and style, plus
    ``OUT/content/<content>.png``, ``OUT/style_images/<style>.png`` and ``OUT/targets.json``.

    ``contents``: image specs (files or ``skimage:NAME``); ``styles``: name -> image spec. The
    folder is what ``linearizer train style --styles OUT`` reads.
    """
    settings = settings or GatysSettings()
    settings.validate()
    if not contents or not styles:
        raise LinearizerError("make_targets needs at least one content image and one style")
    names = [image_name(c) for c in contents]
    if len(set(names)) != len(names):
        raise LinearizerError(f"content images need distinct names, got {names}")
    for name in styles:
        if not name or name in {"content", "style_images"} or "/" in name or name.startswith("."):
            raise LinearizerError(f"invalid style name {name!r}")
    out = Path(out_dir)
    extractor = make_features(features, seed=seed)
    style_size = settings.style_size or size
    style_images = torch.stack([load_image(spec, style_size) for spec in styles.values()])
    for name, img in zip(styles, style_images):
        save_image(img, out / "style_images" / f"{name}.png")
    t0 = time.perf_counter()
    for spec, cname in zip(contents, names):
        content = load_image(spec, size)
        save_image(content, out / "content" / f"{cname}.png")
        started = time.perf_counter()
        result = stylise(content, style_images, extractor, settings)
        for sname, img in zip(styles, result):
            save_image(img, out / sname / f"{cname}.png")
        if log is not None:
            seconds = time.perf_counter() - started
            log(f"stylised {cname} with {len(styles)} styles in {seconds:.0f} s")
    manifest = {
        "contents": dict(zip(names, contents)),
        "styles": dict(styles),
        "size": size,
        "features": features,
        "seed": seed,
        "settings": asdict(settings),
        "seconds": round(time.perf_counter() - t0, 2),
        "threads": torch.get_num_threads(),
    }
    write_json(out / "targets.json", manifest)
    return manifest
