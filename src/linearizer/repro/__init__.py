"""The paper's claims measured on a trained one-step flow model (``linearizer repro``), and the
induced SVD of its one-step generator (``linearizer svd``)."""

from .claims import CLAIMS, THRESHOLDS
from .context import Context
from .options import ReproOptions
from .runner import check_flow_run, run_repro
from .svd import GeneratorSVD, induced_svd, render_svd

__all__ = [
    "CLAIMS",
    "THRESHOLDS",
    "Context",
    "GeneratorSVD",
    "ReproOptions",
    "check_flow_run",
    "induced_svd",
    "render_svd",
    "run_repro",
]
