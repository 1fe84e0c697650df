"""What every claim of the reproduction shares: the loaded model in two precisions, its B
matrices, seeded noise, the test images and batched network passes.

A mixture (:class:`~linearizer.flow.mixture.MixtureFlow`) is measured per component: the rows of
every exactness check are dealt over the components in turn (row ``i`` to component ``i mod K``),
each row through its own component's exact generator, so one check covers every component at
the cost of a one-generator check."""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..flow.config import FlowConfig
from ..flow.mixture import MixtureFlow
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
    def spec(
        steps: int, method: str = "euler", precision: str = "float64", component: int | None = None
    ) -> SamplerSpec:
        """The sampler a claim is measured with: the authors' grid, whose last interval is
        skipped (so B inverts), the trained map alone (of component ``component`` in a mixture)."""
        return SamplerSpec(
            steps=steps, method=method, final="skip", dtype=precision, component=component
        )

    def B(
        self,
        steps: int,
        method: str = "euler",
        precision: str = "float64",
        component: int | None = None,
    ) -> Tensor:
        """The one-step matrix (cached by the model): float64 from the float64 model, or float32
        accumulated in float32 from the float32 model."""
        return self.pick(precision).one_step_matrix(self.spec(steps, method, precision, component))

    @cached_property
    def components(self) -> list[int | None]:
        """The generators a check covers: each component of a mixture, or the one generator."""
        if isinstance(self.model, MixtureFlow):
            return list(range(self.model.components))
        return [None]

    @property
    def first(self) -> int | None:
        """The generator the figures show (a mixture's component 0)."""
        return self.components[0]

    def parts(self, n: int) -> list[tuple[int | None, Tensor]]:
        """``n`` rows dealt over :attr:`components` in turn: ``(component, row indices)`` each."""
        rows, k = torch.arange(n), len(self.components)
        return [(c, rows[rows % k == i]) for i, c in enumerate(self.components) if i < n]

    def by_parts(self, n: int, fn: Callable[[int | None, Tensor], Tensor]) -> Tensor:
        """``fn(component, rows)`` for each of :meth:`parts`, put back in row order."""
        parts = self.parts(n)
        if len(parts) == 1:
            return fn(*parts[0])
        outs = [fn(k, rows) for k, rows in parts]
        out = outs[0].new_empty(n, *outs[0].shape[1:])
        for (_, rows), part in zip(parts, outs, strict=True):
            out[rows] = part
        return out

    def dealt(self, n: int) -> Tensor | None:
        """Each of ``n`` rows' component as :meth:`parts` deals them (None: one generator)."""
        return None if self.components == [None] else torch.arange(n) % len(self.components)

    def drawn(self, n: int, stream: int) -> Tensor | None:
        """``n`` components drawn from a mixture's weights, seeded (None: one generator)."""
        if self.components == [None]:
            return None
        gen = torch.Generator().manual_seed(self.opts.seed * 1000 + stream)
        return self.model.draw_components(n, generator=gen)

    def per_component(self, values: dict[int | None, float]) -> dict:
        """``{"components": K, "per_component": {k: value}}`` for a mixture, nothing otherwise
        (a one-generator report keeps its keys)."""
        if self.components == [None]:
            return {}
        return {"components": len(self.components), "per_component": values}

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
        labels: Tensor | None = None,
    ) -> Tensor:
        """Data latents from noise latents: ``B z0`` or the multi-step solver (as in
        ``sample``); in a mixture, row ``i`` through component ``labels[i]``."""
        if labels is None:
            return self._latents(model, z0, steps, method, dtype, one_step, None)
        out = torch.empty(z0.shape, dtype=dtype)
        for k in labels.unique().tolist():
            rows = labels == k
            out[rows] = self._latents(model, z0[rows], steps, method, dtype, one_step, int(k))
        return out

    def _latents(self, model, z0, steps, method, dtype, one_step, component) -> Tensor:
        z0 = z0.to(self.device)
        spec = self.spec(steps, method, str(dtype).removeprefix("torch."), component)
        if one_step:
            return (z0.to(dtype) @ model.one_step_matrix(spec).T).cpu()
        return model.integrate(z0, spec).cpu()

    def features(self, images: Tensor) -> Tensor:
        """LeNet features of ``images`` (read through ``lenet_view``, as the LeNet reads them)."""
        return lenet_features(lenet_view(images), self.classifier, self.opts.batch)


def _batched(fn, x: Tensor, batch: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    return torch.cat([fn(b.to(device, dtype)).cpu() for b in x.split(batch)])
