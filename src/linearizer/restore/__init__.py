"""Inverse problems with a projective model as the prior: degradations with exact ``H``, ``H^T``,
``H^+`` (:mod:`.degradations`), solvers built on exact projections and pseudo-inverses
(:mod:`.algorithms`) with their settings (:mod:`.spec`), scores (:mod:`.evaluate`) and the report
(:mod:`.report`)."""

from .algorithms import alternating, fit_induced_operator, noise_optimisation, range_null_induced
from .degradations import TASKS, Degradation, make_degradation
from .evaluate import METHODS, Prior, restore, score
from .spec import RestoreSpec

__all__ = [
    "METHODS",
    "TASKS",
    "Degradation",
    "Prior",
    "RestoreSpec",
    "alternating",
    "fit_induced_operator",
    "make_degradation",
    "noise_optimisation",
    "range_null_induced",
    "restore",
    "score",
]
