"""The globally projective generative model ``f = g^-1 A g`` (``A^2 = A`` exactly) and its IGN
baseline (registers the ``projective`` presets on import)."""

from . import config as config
from .config import ProjectiveConfig
from .corrupt import CORRUPTIONS, corrupt
from .ign import IGN, ign_loss, ign_terms
from .model import ProjectiveModel, projective_loss, sliced_w2

__all__ = [
    "CORRUPTIONS",
    "IGN",
    "ProjectiveConfig",
    "ProjectiveModel",
    "corrupt",
    "ign_loss",
    "ign_terms",
    "projective_loss",
    "sliced_w2",
]
