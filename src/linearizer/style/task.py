"""``linearizer train style``: the training task of a style bank, its data, and loading runs.

The styles folder (``--styles DIR``, as written by ``linearizer style targets``) holds one
sub-folder per style with one stylised image per content image, named after it::

    DIR/stain/chelsea.png   DIR/logo/chelsea.png     ...

Your own stylised images work the same way. With a single content image, a flat folder of
``<style>.png`` files is accepted too. The loss is the authors': the pixel distance between
``f_s(content)`` and the target, over all (style, content) pairs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from ..errors import LinearizerError
from ..io import read_json, write_json
from ..metrics import psnr
from ..training.image_task import ImageTask
from ..training.random_streams import StepRandom
from .build import build_style_model
from .config import StyleConfig
from .images import SKIMAGE_PREFIX, image_name, list_images, load_image
from .model import StyleModel


@dataclass
class StyleData:
    """Content images ``[N, 3, H, W]`` and targets ``[S, N, 3, H, W]`` with their names."""

    contents: Tensor
    targets: Tensor
    content_names: list[str]
    style_names: list[str]


def discover_styles(styles_dir: str | Path, content_names: list[str]) -> dict[str, dict[str, Path]]:
    """``{style: {content name: target file}}`` from a styles folder (see the module docs)."""
    root = Path(styles_dir)
    if not root.is_dir():
        raise LinearizerError(f"no such styles folder: {root}")
    found: dict[str, dict[str, Path]] = {}
    for sub in sorted(p for p in root.iterdir() if p.is_dir()):
        if sub.name in {"content", "style_images"} or sub.name.startswith("."):
            continue
        files = {p.stem: p for p in list_images(sub)}
        if files:
            found[sub.name] = files
    # the style order of a targets.json written by `linearizer style targets`, if any
    manifest = root / "targets.json"
    order = read_json(manifest).get("styles") if manifest.is_file() else None
    if isinstance(order, dict) and order and found:
        found = {s: found[s] for s in [*map(str, order), *sorted(found)] if s in found}
    if not found:
        flat = list_images(root)
        if flat and len(content_names) == 1:
            return {p.stem: {content_names[0]: p} for p in flat}
        raise LinearizerError(
            f"{root} holds no style sub-folders with images (expected {root}/<style>/"
            f"<content name>.png; make them with `linearizer style targets`)"
        )
    for style, files in found.items():
        missing = [c for c in content_names if c not in files]
        if missing and len(content_names) == 1 and len(files) == 1:
            found[style] = {content_names[0]: next(iter(files.values()))}
        elif missing:
            raise LinearizerError(
                f"style {style!r} has no target for content image(s) {missing} "
                f"(expected {root / style}/<content name>.png)"
            )
    return found


def resolve_content(specs: list[str]) -> list[str]:
    """Content specs with files made absolute (a run can be resumed from anywhere)."""
    out = []
    for spec in specs:
        spec = str(spec)
        if spec.startswith(SKIMAGE_PREFIX):
            out.append(spec)
            continue
        path = Path(spec).expanduser()
        if not path.is_file():
            raise LinearizerError(f"no such content image: {spec}")
        out.append(str(path.resolve()))
    return out


def prepare_config(cfg: StyleConfig) -> StyleConfig:
    """Check the data and record the style order in the config (so the run knows its styles)."""
    if not cfg.content:
        raise LinearizerError("no content image: pass --content IMG (a file or skimage:NAME)")
    if not cfg.styles:
        raise LinearizerError(
            "no styles folder: pass --styles DIR (see `linearizer style targets`)"
        )
    names = [image_name(c) for c in cfg.content]
    if len(set(names)) != len(names):
        raise LinearizerError(f"content images need distinct names, got {names}")
    found = discover_styles(cfg.styles, names)
    if cfg.style_names:
        unknown = [s for s in cfg.style_names if s not in found]
        if unknown:
            raise LinearizerError(f"styles {unknown} are not in {cfg.styles} (found {list(found)})")
    else:
        cfg.style_names = list(found)
    return cfg


def load_style_data(cfg: StyleConfig) -> StyleData:
    """Content images and targets of ``cfg`` at ``cfg.network.img_size``."""
    cfg = prepare_config(cfg)
    content_names = [image_name(c) for c in cfg.content]
    found = discover_styles(cfg.styles, content_names)
    size = cfg.network.img_size
    contents = torch.stack([load_image(c, size) for c in cfg.content])
    targets = torch.stack(
        [
            torch.stack([load_image(found[s][c], size) for c in content_names])
            for s in cfg.style_names
        ]
    )
    return StyleData(contents, targets, content_names, list(cfg.style_names))


class StyleTask(ImageTask, kind="style", config=StyleConfig):
    """Draws (style, content) pairs and fits ``f_s(content)`` to the target: its data are
    pairs of images, not one set, so it writes its own build, batch and grid."""

    def __init__(self, data: StyleData | None = None) -> None:
        self.data = data

    @classmethod
    def model_for_run(cls, cfg: StyleConfig, run_dir: Path) -> StyleModel:
        """The bank's styles: from the config, else the run's bank.json, else its styles
        folder."""
        styles = list(cfg.style_names)
        if not styles and (run_dir / "bank.json").is_file():
            styles = list(read_json(run_dir / "bank.json").get("styles", []))
        if not styles:
            styles = list(prepare_config(cfg).style_names)
        return build_style_model(cfg, styles)

    def build(self, cfg: StyleConfig) -> StyleModel:
        self.cfg = cfg
        if self.data is None:
            self.data = load_style_data(cfg)
        elif not cfg.style_names:
            cfg.style_names = list(self.data.style_names)
        return build_style_model(cfg, self.data.style_names, channels=self.data.contents.shape[1])

    def batch(self, rng: StepRandom) -> dict[str, Tensor]:
        data, cfg = self.data, self.cfg
        n = data.contents.shape[0]
        pair = rng.indices(len(data.style_names) * n)
        style, content = pair // n, pair % n
        x, y = data.contents[content], data.targets[style, content]
        if cfg.crop:
            room = cfg.network.img_size - cfg.crop + 1
            top, left = rng.randint(room), rng.randint(room)
            idx = torch.arange(cfg.crop)
            rows = (top[:, None] + idx)[:, None, :, None]
            cols = (left[:, None] + idx)[:, None, None, :]
            b = torch.arange(x.shape[0])[:, None, None, None]
            c = torch.arange(x.shape[1])[None, :, None, None]
            x, y = x[b, c, rows, cols], y[b, c, rows, cols]
        if cfg.flip:
            flip = rng.randint(2).bool()
            x = torch.where(flip[:, None, None, None], x.flip(-1), x)
            y = torch.where(flip[:, None, None, None], y.flip(-1), y)
        return {"x": x, "y": y, "style": style}

    def loss(self, model: nn.Module, batch: dict[str, Tensor], rng: StepRandom):
        out = model.stylise(batch["x"], batch["style"])
        err = out - batch["y"]
        loss = err.abs().mean() if self.cfg.loss == "l1" else err.pow(2).mean()
        return loss, {"mse": err.detach().pow(2).mean().item()}

    def on_eval(self, model: StyleModel, step: int, run_dir: Path) -> dict[str, object]:
        data = self.data
        device = next(model.parameters()).device
        x = data.contents.to(device)
        rows, scores = [], {}
        for s, name in enumerate(data.style_names):
            out = model.stylise(x, s).cpu()
            rows.append(out)
            scores[f"psnr_{name}"] = float(psnr(out.clamp(0, 1), data.targets[s]))
        # grid: a row per content image: content, then (output, target) per style
        pictures = []
        for i in range(x.shape[0]):
            pictures.append(data.contents[i])
            for s in range(len(data.style_names)):
                pictures += [rows[s][i], data.targets[s, i]]
        path = self.save_samples(
            torch.stack(pictures), step, run_dir, nrow=1 + 2 * len(data.style_names)
        )
        write_json(
            Path(run_dir) / "bank.json",
            {"styles": data.style_names, "contents": data.content_names},
        )
        return {"samples": path, **scores}
