"""What every claim of the reproduction shares: options, the loaded model in two precisions,
seeded noise, the test images, batched network passes and small numeric helpers."""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import LinearizerError
from ..flow import solvers
from ..flow.config import FlowConfig
from ..flow.model import DATA, NOISE, OneStepFlow

F64 = torch.float64


@dataclass(frozen=True)
class ReproOptions:
    """Sizes of the checks. ``n``: pairs / samples / images of the exactness checks (these run
    the networks in float64, ~15x slower than float32); ``fid_n``: samples of each FID set;
    ``invert_n``: test images of the invertibility check (0 = the whole test set)."""

    n: int = 256
    fid_n: int = 10_000
    invert_n: int = 0
    steps: int = 100
    long_steps: int = 1000
    svd_k: int = 16
    kid_subsets: int = 50
    seed: int = 0
    batch: int = 1000
    quick: bool = False

    def resolved(self) -> ReproOptions:
        """``--quick`` caps every size so a smoke run evaluates in seconds."""
        for name in ("n", "fid_n", "steps", "long_steps", "svd_k", "kid_subsets", "batch"):
            if getattr(self, name) < 1:
                raise LinearizerError(
                    f"repro option {name} must be >= 1, got {getattr(self, name)}"
                )
        if self.steps < 2 or self.long_steps < 2:
            raise LinearizerError("repro needs at least 2 sampler steps")
        if not self.quick:
            return self
        return replace(
            self,
            n=min(self.n, 16),
            fid_n=min(self.fid_n, 200),
            invert_n=min(self.invert_n or 256, 256),
            svd_k=min(self.svd_k, 8),
            kid_subsets=min(self.kid_subsets, 5),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Context:
    """The model under test and everything the claims reuse (float64 copy, B matrices, data)."""

    def __init__(
        self,
        model: OneStepFlow,
        cfg: FlowConfig,
        step: int,
        run_dir: Path,
        opts: ReproOptions,
        test: tuple[Tensor, Tensor],
        device: torch.device | str = "cpu",
    ) -> None:
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.cfg, self.step, self.run_dir, self.opts = cfg, step, Path(run_dir), opts
        self.test_images, self.test_labels = test
        self.image_shape = tuple(model.image_shape)
        self._model64: OneStepFlow | None = None
        self._classifier = None
        self.keep: dict[str, Any] = {}  # tensors the figures reuse

    @property
    def model64(self) -> OneStepFlow:
        """A float64 copy of the model ("float64 end to end": networks, A and B)."""
        if self._model64 is None:
            self._model64 = copy.deepcopy(self.model).double().eval()
        return self._model64

    def pick(self, precision: str) -> OneStepFlow:
        return self.model64 if precision == "float64" else self.model

    @property
    def classifier(self):
        if self._classifier is None:
            from ..metrics import load_classifier

            self._classifier = load_classifier(device=self.device)
        return self._classifier

    def B(self, steps: int, method: str = "euler", precision: str = "float64") -> Tensor:
        """The one-step matrix (cached by the model): float64 from the float64 model, or float32
        accumulated in float32 from the float32 model."""
        model = self.pick(precision)
        dtype = F64 if precision == "float64" else torch.float32
        return model.one_step_matrix(steps=steps, method=method, dtype=dtype)

    def noise(self, n: int, stream: int) -> Tensor:
        """``n`` standard normal images, the same for the same (seed, stream) on every machine."""
        gen = torch.Generator().manual_seed(self.opts.seed * 1000 + stream)
        return torch.randn(n, *self.image_shape, generator=gen)

    def test_subset(self, n: int) -> tuple[Tensor, Tensor]:
        n = min(n, len(self.test_images))
        return self.test_images[:n], self.test_labels[:n]

    # --- batched passes ---------------------------------------------------------------------
    def encode(self, model: OneStepFlow, x: Tensor, flag: float) -> Tensor:
        dtype = next(model.parameters()).dtype
        return _batched(lambda b: model.encode(b, flag), x, self.opts.batch, self.device, dtype)

    def decode(self, model: OneStepFlow, z: Tensor, flag: float) -> Tensor:
        dtype = next(model.parameters()).dtype
        return _batched(lambda b: model.decode(b, flag), z, self.opts.batch, self.device, dtype)

    def latents(
        self, model: OneStepFlow, z0: Tensor, steps: int, method: str, dtype: torch.dtype,
        one_step: bool,
    ) -> Tensor:  # fmt: skip
        """Data latents from noise latents: ``B z0`` or the multi-step solver (as in ``sample``)."""
        z0 = z0.to(self.device)
        if one_step:
            b = model.one_step_matrix(steps=steps, method=method, dtype=dtype)
            return (z0.to(dtype) @ b.T).cpu()
        return solvers.integrate(model.op, z0, steps=steps, method=method, dtype=dtype).cpu()

    def for_lenet(self, images: Tensor) -> Tensor:
        """Images as the LeNet reads them: float32, clamped to [0, 1], 32x32 (resized if not)."""
        x = images.detach().to(torch.float32).clamp(0, 1)
        if x.shape[1] != 1:
            raise LinearizerError("FID (LeNet) needs one-channel images")
        if tuple(x.shape[-2:]) not in ((32, 32), (28, 28)):
            x = F.interpolate(x, size=(32, 32), mode="bilinear", align_corners=False)
        return x

    def features(self, images: Tensor) -> Tensor:
        from ..metrics import lenet_features

        return lenet_features(self.for_lenet(images), self.classifier, self.opts.batch)


def _batched(fn, x: Tensor, batch: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    outs = [fn(x[i : i + batch].to(device, dtype)).cpu() for i in range(0, len(x), batch)]
    return torch.cat(outs)


# --- numbers --------------------------------------------------------------------------------------


def max_rel_err(a: Tensor, b: Tensor) -> float:
    """Largest per-sample relative error ``|a_i - b_i| / |b_i|`` (computed in float64)."""
    a, b = a.detach().to(F64).flatten(1), b.detach().to(F64).flatten(1)
    num = (a - b).norm(dim=1)
    den = b.norm(dim=1).clamp_min(1e-300)
    return float((num / den).max())


def max_abs_err(a: Tensor, b: Tensor) -> float:
    return float((a.detach().to(F64) - b.detach().to(F64)).abs().max())


def finite(x: float | None) -> float | None:
    """JSON-safe number: ``inf`` (identical images) and NaN become None."""
    if x is None or not math.isfinite(x):
        return None
    return float(x)


def db(x: float | None) -> str:
    return "identical" if x is None else f"{x:.1f} dB"


def sci(x: float | None, digits: int = 1) -> str:
    return "n/a" if x is None else f"{x:.{digits}e}"


def ssim_window(shape: tuple[int, ...]) -> int:
    """The standard 11x11 SSIM window, shrunk to the largest odd size that fits small images."""
    side = min(shape[-2:])
    return min(11, side if side % 2 else side - 1)


__all__ = ["DATA", "NOISE", "Context", "ReproOptions", "max_abs_err", "max_rel_err"]
