"""The sizes of the reproduction's checks (``linearizer repro`` options)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from ..errors import LinearizerError


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
