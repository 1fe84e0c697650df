"""The sampler spec: every setting of a one-step flow sampler, and its one default.

A :class:`SamplerSpec` names the time grid (``steps``), the solver (``method``), what happens
on the last interval (``final``), the working precision of the latent algebra (``dtype``), the
noise temperature (``x0 ~ N(0, tau^2 I)``) and which post-hoc latent maps the sampler applies
(``maps``). Every command and API that samples, inverts or measures a flow model takes one, and
every output records the one it used.

**The default is the paper's method**: the trained map alone (``maps="none"``), Euler on the
grid ``t_i = i/T`` with ``T = 1000``, ending with the jump to A's prediction on the last
interval. A sample costs the same for any ``T`` (it is one matrix), so the fine grid costs
nothing at sampling time; docs/flow/sampler.md gives the measured scores of the four grids.
The jump makes B rank-deficient (its rank is A's), so the commands that invert B
(:meth:`SamplerSpec.invertible`) use the same sampler with the last interval skipped.
The post-hoc maps (:mod:`linearizer.flow.calibration`, :mod:`linearizer.flow.transport`) are
fitted after training by other objectives than the paper's; a sampler applies them only when
asked by name (``maps="calibration"`` or ``"transport"``), and only for the settings they were
fitted for: anything else is refused with one line.

A run records its own spec (``sampler`` in its ``config.json``); a run converted from the
authors' release records theirs (:data:`AUTHORS`).

>>> spec = SamplerSpec()
>>> spec.steps, spec.method, spec.final, spec.maps
(1000, 'euler', 'predict', 'none')
>>> spec.replace(maps="transport").describe()
'one-step euler, T = 1000, final predict, float64, maps transport'
>>> spec.invertible().final
'skip'
>>> SamplerSpec(steps=1)
Traceback (most recent call last):
...
linearizer.errors.LinearizerError: sampler steps must be an integer >= 2, got 1
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal, Optional

import torch

from ..config import Config, accepts_renamed, option, renamed_kwargs
from ..errors import LinearizerError
from .solvers import FINALS, METHODS

MAPS = ("none", "calibration", "transport")
DTYPES = {"float32": torch.float32, "float64": torch.float64}


@accepts_renamed
@dataclass(frozen=True)
class SamplerSpec(Config):
    """Every setting of a flow sampler (see the module docstring for the default's reasons)."""

    # ``label`` said "dataset label" while it picks a mixture component (a class, or a component
    # found without labels); runs and specs written before still read.
    RENAMED = {"label": "component"}

    steps: int = option(1000, "T: the solver's time grid t_i = i/T (the authors sample at 100)")
    method: Literal["euler", "rk4", "rk4-authors"] = option(
        "euler", "solver collapsed into B (rk4-authors: the authors' first-order matrix)"
    )
    final: Literal["skip", "predict"] = option(
        "predict",
        "last interval [1 - 1/T, 1]: jump to A's prediction, or skip it (authors; "
        "B stays invertible)",
    )
    dtype: Literal["float32", "float64"] = option(
        "float64", "precision of B and the latent solver (commands run the networks in it too)"
    )
    temperature: float = option(1.0, "std tau of the noise drawn, x0 ~ N(0, tau^2 I)")
    maps: Literal["none", "calibration", "transport"] = option(
        "none",
        "post-hoc latent maps applied after B: none (the trained map alone), the "
        "calibration K, or K and the transport (both fitted after training, by linearizer "
        "calibrate)",
    )
    component: Optional[int] = option(  # noqa: UP045 (the config reader parses Optional)
        None,
        "component k of a mixture: class c of a class-conditional model, or a component "
        "found without labels (default: drawn from the mixture weights; the sampler is then a "
        "mixture of one exact generator per component)",
    )
    guidance: float = option(
        0.0,
        "classifier-free guidance w of a class-conditional model: the velocity "
        "(1 + w) v(z, t, c) - w v(z, t, null), still linear in z (0: plain conditional)",
    )

    def validate(self) -> None:
        steps = self.steps
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 2:
            raise LinearizerError(f"sampler steps must be an integer >= 2, got {steps!r}")
        for name, value, allowed in (
            ("method", self.method, METHODS),
            ("final", self.final, FINALS),
            ("dtype", self.dtype, tuple(DTYPES)),
            ("maps", self.maps, MAPS),
        ):
            if value not in allowed:
                raise LinearizerError(f"sampler {name} must be one of {allowed}, got {value!r}")
        tau = self.temperature
        if not (isinstance(tau, (int, float)) and math.isfinite(tau) and tau > 0):
            raise LinearizerError(f"sampler temperature must be a finite number > 0, got {tau!r}")
        c = self.component
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 0):
            raise LinearizerError(f"sampler class must be an integer >= 0, got {c!r}")
        w = self.guidance
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w):
            raise LinearizerError(f"sampler guidance must be a finite number, got {w!r}")

    def replace(self, **changes: Any) -> SamplerSpec:
        """A copy with ``changes`` (checked like the constructor's arguments)."""
        return dataclasses.replace(self, **renamed_kwargs(type(self), changes))

    @property
    def schedule(self) -> tuple[int, str, str]:
        """``(steps, method, final)``: what decides the matrix B."""
        return self.steps, self.method, self.final

    @property
    def solver_args(self) -> dict[str, Any]:
        """The schedule as the keywords of the solvers and of ``factored.one_step``."""
        return dict(zip(("steps", "method", "final"), self.schedule))

    @property
    def condition(self) -> tuple[int | None, float]:
        """``(component, guidance)``: what picks a mixture's operator ``A(t, k)`` (guidance
        only for a class-conditional model)."""
        return self.component, float(self.guidance)

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def invertible(self) -> SamplerSpec:
        """This sampler with the last interval skipped: its B is invertible (the identity part
        of B is ``1/T``), where the jump to the prediction leaves B at A's rank."""
        return self if self.final == "skip" else self.replace(final="skip")

    def noise(self, n: int, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
        """``n`` noise images ``x0 ~ N(0, tau^2 I)`` of ``shape`` at this temperature (float32,
        so one seed gives the same draw for every spec)."""
        return self.temperature * torch.randn(n, *shape, generator=generator)

    def describe(self) -> str:
        """One line naming every setting but the temperature (which scales the noise drawn)."""
        line = (
            f"one-step {self.method}, T = {self.steps}, final {self.final}, {self.dtype}, "
            f"maps {self.maps}"
        )
        if self.component is not None:
            line += f", class {self.component}"
        if self.guidance:
            line += f", guidance {self.guidance:g}"
        return line


# The sampler of the authors' test script: one step through their Simpson-averaged "rk" matrix
# at T = 100, skipping the last interval, at unit temperature.
AUTHORS = SamplerSpec(steps=100, method="rk4-authors", final="skip", temperature=1.0)


def sample_spec(spec: SamplerSpec | None = None, **changes: Any) -> SamplerSpec:
    """``spec`` (default :class:`SamplerSpec()`) with ``changes`` applied: the one way an API
    call turns its arguments into a spec."""
    spec = SamplerSpec() if spec is None else spec
    if not isinstance(spec, SamplerSpec):
        raise LinearizerError(f"expected a SamplerSpec, got {type(spec).__name__}")
    if "dtype" in changes:  # torch dtypes are accepted for the string names
        dtype = changes.pop("dtype")
        names = {v: k for k, v in DTYPES.items()}
        if dtype is not None:
            changes["dtype"] = names.get(dtype, dtype)
    return spec.replace(**changes) if changes else spec
