"""Suite-wide settings: the torch thread count, and the tests folder on ``sys.path``.

``LINEARIZER_TEST_THREADS`` (default 1) sets ``torch.set_num_threads`` for the whole suite, so
the suite can be run under two thread counts to show that no result depends on it (tolerances
scale with the dtype's epsilon, never with one machine's BLAS kernels). One thread is the
default because the tiny ops here are faster on one thread than on contended cores.
"""

import os

import pytest
import torch

from linearizer.errors import LinearizerError


def _threads() -> int:
    raw = os.environ.get("LINEARIZER_TEST_THREADS", "1")
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise LinearizerError(f"LINEARIZER_TEST_THREADS must be a positive integer, got {raw!r}")
    return n


torch.set_num_threads(_threads())


@pytest.fixture(autouse=True)
def _keep_thread_count():
    """CLI commands called in-process set their own thread count; restore the suite's."""
    n = torch.get_num_threads()
    yield
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
