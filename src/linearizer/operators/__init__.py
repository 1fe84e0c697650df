"""Linear operators behind one interface (column vectors: a batch ``Z [B, D]`` maps to ``Z @ A.T``).

Every operator applies to a batch (``op(z, t=None)``), applies its transpose
(``op.transpose_apply(y, t=None)``), materialises ``op.matrix(t)`` on request, and exposes
``op.factors(t)`` (``(U, V)`` with ``A = U V^T``) where it is low rank.
"""

from .base import LinearOperator
from .conv import ChannelMix, DepthwiseConv, apply_depthwise
from .dense import Dense, Identity, Product
from .lora import AtTime, SinusoidalEmbedding, TimeLoRA
from .lowrank import LowRank
from .projector import ObliqueProjector, OrthogonalProjector

__all__ = [
    "AtTime",
    "ChannelMix",
    "Dense",
    "DepthwiseConv",
    "Identity",
    "LinearOperator",
    "LowRank",
    "ObliqueProjector",
    "OrthogonalProjector",
    "Product",
    "SinusoidalEmbedding",
    "TimeLoRA",
    "apply_depthwise",
]
