"""Linearizer networks: f(x) = g_y^-1(A g_x(x)), exactly linear under the induced vector spaces."""

__version__ = "0.1.0"

from .algebra import InducedEig, InducedSpace, InducedSVD, Linearizer  # noqa: E402
from .errors import LinearizerError  # noqa: E402
from .operators import (  # noqa: E402
    Dense,
    DepthwiseConv,
    LinearOperator,
    LowRank,
    ObliqueProjector,
    OrthogonalProjector,
    TimeLoRA,
)

__all__ = [
    "Dense",
    "DepthwiseConv",
    "InducedEig",
    "InducedSVD",
    "InducedSpace",
    "LinearOperator",
    "Linearizer",
    "LinearizerError",
    "LowRank",
    "ObliqueProjector",
    "OrthogonalProjector",
    "TimeLoRA",
    "__version__",
]
