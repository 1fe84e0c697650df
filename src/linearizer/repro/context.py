"""What every claim of the reproduction shares: the loaded model in two precisions, its B
matrices, seeded noise, the test images and batched network passes."""

from __future__ import annotations

import copy
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..flow.config import FlowConfig
from ..flow.model import DATA, NOISE, OneStepFlow
from ..flow.spec import SamplerSpec
from ..metrics import lenet_features, load_classifier
from ..metrics.classifier import lenet_view
from .numbers import F64
from .options import ReproOptions

__all__ = ["DATA", "F64", "NOISE", "Context"]


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
        self.keep: dict[str, Any] = {}  # tensors the figures reuse

    @cached_property
    def model64(self) -> OneStepFlow:
        """A float64 copy of the model ("float64 end to end": networks, A and B)."""
        return copy.deepcopy(self.model).double().eval()

    def pick(self, precision: str) -> OneStepFlow:
        return self.model64 if precision == "float64" else self.model

    @cached_property
    def classifier(self):
        """The MNIST LeNet, loaded on first use."""
        return load_classifier(device=self.device)

    @staticmethod
    def spec(steps: int, method: str = "euler", precision: str = "float64") -> SamplerSpec:
        """The sampler a claim is measured with: the authors' grid, whose last interval is
        skipped (so B inverts), the trained map alone."""
        return SamplerSpec(steps=steps, method=method, final="skip", dtype=precision)

    def B(self, steps: int, method: str = "euler", precision: str = "float64") -> Tensor:
        """The one-step matrix (cached by the model): float64 from the float64 model, or float32
        accumulated in float32 from the float32 model."""
        return self.pick(precision).one_step_matrix(self.spec(steps, method, precision))

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
        # a float32 network's latents may be float64 (its fully connected tail's): keep them
        dtype = torch.promote_types(next(model.parameters()).dtype, z.dtype)
        return _batched(lambda b: model.decode(b, flag), z, self.opts.batch, self.device, dtype)

    def latents(
        self,
        model: OneStepFlow,
        z0: Tensor,
        steps: int,
        method: str,
        dtype: torch.dtype,
        one_step: bool,
    ) -> Tensor:
        """Data latents from noise latents: ``B z0`` or the multi-step solver (as in ``sample``)."""
        z0 = z0.to(self.device)
        spec = self.spec(steps, method, str(dtype).removeprefix("torch."))
        if one_step:
            return (z0.to(dtype) @ model.one_step_matrix(spec).T).cpu()
        return model.integrate(z0, spec).cpu()

    def features(self, images: Tensor) -> Tensor:
        """LeNet features of ``images`` (read through ``lenet_view``, as the LeNet reads them)."""
        return lenet_features(lenet_view(images), self.classifier, self.opts.batch)


def _batched(fn, x: Tensor, batch: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    return torch.cat([fn(b.to(device, dtype)).cpu() for b in x.split(batch)])
