"""The sizes of the reproduction's checks (``linearizer repro`` options)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..config import Config, option
from ..errors import LinearizerError


@dataclass(frozen=True)
class ReproOptions(Config):
    """Sizes of the checks (``linearizer repro``'s options, one per field). The exactness
    checks run the networks in float64, ~15x slower than float32."""

    n: int = option(256, "pairs/samples/images of the float64 exactness checks")
    fid_n: int = option(10_000, "samples per FID (LeNet) set")
    invert_n: int = option(0, "test images of the invertibility check (0: all)")
    steps: int = option(100, "T of the main time grid")
    long_steps: int = option(1000, "T of the long time grid")
    svd_k: int = option(16, "singular directions to draw")
    kid_subsets: int = option(50, "random subsets of KID")
    seed: int = option(0, "seed of every noise draw")
    batch: int = option(1000, "images per network pass")
    quick: bool = option(False, "small sizes everywhere (seconds on a smoke run)")

    def validate(self) -> None:
        for name in ("n", "fid_n", "steps", "long_steps", "svd_k", "kid_subsets", "batch"):
            if getattr(self, name) < 1:
                raise LinearizerError(
                    f"repro option {name} must be >= 1, got {getattr(self, name)}"
                )
        if self.steps < 2 or self.long_steps < 2:
            raise LinearizerError("repro needs at least 2 sampler steps")

    def resolved(self) -> ReproOptions:
        """``--quick`` caps every size so a smoke run evaluates in seconds."""
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
