"""Exact linear algebra of Linearizers: induced vector spaces and ``f = g_y^-1 A g_x``."""

from .linearizer import InducedEig, InducedSVD, Linearizer
from .space import InducedSpace

__all__ = ["InducedEig", "InducedSVD", "InducedSpace", "Linearizer"]
