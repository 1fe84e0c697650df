"""What the explorer computes for a projective run: project a picture, apply twice, restore.

``f = g^-1 A g`` with an exact projector ``A``, so ``f(f(x)) = f(x)`` up to rounding; the tab
shows the measured idempotence residual ``max|f(f(x)) - f(x)| / max|f(x)|``. An IGN run (a
network trained towards idempotence) goes through the same handler, for comparison.
Restoration methods are offered when :mod:`linearizer.restore` provides them.
"""

from __future__ import annotations

import importlib

import numpy as np
import torch
from torch import Tensor, nn

from ..errors import LinearizerError
from ..projective.corrupt import CORRUPTIONS, corrupt
from .images import noise_picture, picture, to_model_image

NONE = "none"


def restore_methods() -> list[str]:
    """Names of the restoration methods :mod:`linearizer.restore` offers (none without it)."""
    try:
        restore = importlib.import_module("linearizer.restore")
    except ImportError:
        return []
    names = getattr(restore, "METHODS", None) or getattr(restore, "RESTORERS", None) or {}
    return sorted(str(n) for n in names)


class ProjectiveViews:
    """Handlers of the Project / restore tab over a projective (or IGN) model."""

    def __init__(self, model: nn.Module, image_shape: tuple[int, int, int]) -> None:
        self.model = model
        self.shape = tuple(int(s) for s in image_shape)
        self.param = next(model.parameters())
        self.methods = restore_methods()

    @property
    def corruptions(self) -> list[str]:
        return [NONE, *sorted(CORRUPTIONS)]

    def noise_input(self, seed: int) -> Tensor:
        gen = torch.Generator().manual_seed(int(seed))
        return torch.randn(1, *self.shape, generator=gen).to(self.param)

    def model_input(self, array: np.ndarray) -> Tensor:
        return to_model_image(array, self.shape).to(self.param)

    @torch.no_grad()
    def project(
        self, x: Tensor, corruption: str = NONE, seed: int = 0
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
        """Corrupt ``x`` (``[1, C, H, W]``), then ``f`` once and twice; the idempotence residual."""
        if corruption != NONE:
            x = corrupt(x, corruption, seed)
        once = self.model(x)
        twice = self.model(once)
        scale = float(once.abs().max()) or 1.0
        residual = float((twice - once).abs().max()) / scale
        moved = float((once - x).abs().mean())
        shown = noise_picture(x) if bool((x.abs() > 1.5).any()) else picture(x)
        text = (
            f"input: {corruption}. mean |f(x) − x| = {moved:.3g}; "
            f"idempotence residual max|f(f(x)) − f(x)| / max|f(x)| = {residual:.1e}"
            + (" (an exact projector: rounding only)." if hasattr(self.model, "A") else ".")
        )
        return shown, picture(once), picture(twice), text

    @torch.no_grad()
    def restore(self, x: Tensor, corruption: str, method: str, seed: int = 0) -> tuple:
        """The corrupted picture and its restoration by ``method`` of :mod:`linearizer.restore`."""
        if method not in self.methods:
            raise LinearizerError(f"unknown restoration method {method!r}; have {self.methods}")
        restore = importlib.import_module("linearizer.restore")
        bad = corrupt(x, corruption, seed) if corruption != NONE else x
        fixed = restore.restore(self.model, bad, method=method)
        err = float((fixed - x).abs().mean())
        return picture(bad), picture(fixed), f"{method}: mean |restored − clean| = {err:.3g}"
