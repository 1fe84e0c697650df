"""Inverse problems with a projective model as the prior: degradations with exact ``H``, ``H^T``,
``H^+`` (:mod:`.degradations`), solvers built on exact projections and pseudo-inverses
(:mod:`.solvers`), scores (:mod:`.evaluate`) and the report (:mod:`.report`)."""

from .degradations import TASKS, Degradation, make_degradation
from .evaluate import METHODS, Prior, restore, score
from .solvers import alternating, fit_induced_operator, noise_optimisation, range_null_induced

__all__ = [
    "METHODS",
    "TASKS",
    "Degradation",
    "Prior",
    "alternating",
    "fit_induced_operator",
    "make_degradation",
    "noise_optimisation",
    "range_null_induced",
    "restore",
    "score",
]
