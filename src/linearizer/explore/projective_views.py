"""What the explorer computes for a projective run: project a picture, apply twice, restore.

``f = g^-1 A g`` with an exact projector ``A``, so ``f(f(x)) = f(x)`` up to rounding; the tab
shows the measured idempotence residual ``max|f(f(x)) - f(x)| / max|f(x)|``. An IGN run (a
network trained towards idempotence) goes through the same handler, for comparison.
Restoration methods are offered when :mod:`linearizer.restore` provides them.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from ..errors import LinearizerError
from ..projective.corrupt import CORRUPTIONS, corrupt
from .images import noise_picture, picture, to_model_image

NONE = "none"
RESTORE_METHODS = ("pinv", "project", "ddnm", "alternating")  # those a projective prior runs


def restore_tasks(image_shape: tuple[int, int, int]) -> list[str]:
    """The noiseless degradations of :mod:`linearizer.restore` for images of ``image_shape``
    (noisy ones weigh the data by the prior's error, which needs training digits)."""
    try:
        from ..restore import TASKS, make_degradation
    except ImportError:
        return []
    tasks = []
    for task in TASKS:
        try:
            if make_degradation(task, image_shape).sigma == 0:
                tasks.append(task)
        except LinearizerError:  # not defined for this image shape
            continue
    return tasks


class ProjectiveViews:
    """Handlers of the Project / restore tab over a projective (or IGN) model."""

    def __init__(self, model: nn.Module, image_shape: tuple[int, int, int]) -> None:
        self.model = model
        self.shape = tuple(int(s) for s in image_shape)
        self.param = next(model.parameters())
        self.tasks = restore_tasks(self.shape)

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
            f"corruption: {corruption}. mean |f(x) − x| = {moved:.3g}; "
            f"idempotence residual max|f(f(x)) − f(x)| / max|f(x)| = {residual:.1e}"
            + (" (an exact projector: rounding only)." if hasattr(self.model, "A") else ".")
        )
        return shown, picture(once), picture(twice), text

    @torch.no_grad()
    def restore(self, x: Tensor, task: str, seed: int = 0) -> tuple[np.ndarray, str]:
        """Degrade ``x`` by ``task`` (exact ``H``), then restore it with every method a
        projective prior runs; returns one strip (clean, ``H^+ y``, each method) and the errors."""
        from ..restore import Prior, make_degradation, restore

        if task not in self.tasks:
            raise LinearizerError(f"unknown degradation {task!r}; choose from {self.tasks}")
        deg = make_degradation(task, self.shape, seed)
        deg.fit_shape(x.shape[0])
        y = deg.measure(x, torch.Generator().manual_seed(int(seed)))
        outs, secs, _ = restore(Prior(ours=self.model), deg, y, methods=RESTORE_METHODS)
        names = [m for m in RESTORE_METHODS if m in outs]
        strip = picture(torch.cat([x, *(outs[m] for m in names)]), nrow=len(names) + 1)
        errors = ", ".join(
            f"{m} {float((outs[m] - x).abs().mean()):.3f} ({1e3 * secs[m]:.0f} ms)" for m in names
        )
        text = (
            f"{task}: clean x, then {', '.join(names)} (pinv = H⁺y). "
            f"Mean |restored − x| and time: {errors}."
        )
        return strip, text
