"""The restoration spec: every setting of the iterative restoration solvers, and its one default.

A :class:`RestoreSpec` names the iterations of the alternating projections (``iters``), the
Adam steps of the noise optimisation (``noise_steps``) and of the MAP on the range
(``map_steps``), the training images the induced operator ``A_H`` is fitted on (``fit_n``) and
the weight of ``|z|^2`` in the noise optimisation (``noise_lam``). ``linearizer restore``,
``linearizer restore-report``, :func:`~linearizer.restore.evaluate.restore` and the solvers
take their defaults from here, and the report records the settings it ran with.

>>> spec = RestoreSpec()
>>> spec.iters, spec.noise_steps, spec.map_steps, spec.fit_n
(10, 100, 50, 3000)
>>> spec.replace(iters=3).describe()
'3 alternating iterations, noise optimisation 100 Adam steps, MAP on the range 50 Adam steps'
>>> RestoreSpec(iters=0)
Traceback (most recent call last):
...
linearizer.errors.LinearizerError: iters must be >= 1, got 0
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Optional

from ..config import Config, option
from ..errors import LinearizerError


@dataclass(frozen=True)
class RestoreSpec(Config):
    """Every setting of the restoration solvers (see the module docstring)."""

    iters: int = option(10, "alternating-projection iterations")
    noise_steps: int = option(100, "Adam steps of the noise optimisation")
    map_steps: int = option(50, "Adam steps of the MAP on the range (range-map)")
    fit_n: int = option(3000, "training digits for the induced operator A_H (more than the pixels)")
    noise_lam: Optional[float] = option(  # noqa: UP045 (the config reader parses Optional)
        None, "weight of |z|^2 in the noise optimisation (None: sigma^2 with noise, else 0.003)"
    )

    def validate(self) -> None:
        for name, low in (("iters", 1), ("noise_steps", 0), ("map_steps", 0), ("fit_n", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise LinearizerError(f"{name} must be >= {low}, got {value!r}")
        lam = self.noise_lam
        ok = lam is None or (isinstance(lam, (int, float)) and math.isfinite(lam))
        if isinstance(lam, bool) or not ok:
            raise LinearizerError(f"noise_lam must be a finite number or None, got {lam!r}")

    def replace(self, **changes: Any) -> RestoreSpec:
        """A copy with ``changes`` (checked like the constructor's arguments)."""
        return dataclasses.replace(self, **changes)

    def describe(self) -> str:
        """One line naming the solvers' iteration counts."""
        return (
            f"{self.iters} alternating iterations, noise optimisation {self.noise_steps} Adam "
            f"steps, MAP on the range {self.map_steps} Adam steps"
        )


DEFAULT = RestoreSpec()
