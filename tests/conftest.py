"""Suite-wide settings: the torch thread count, a private one-step matrix cache, and the tests
folder on ``sys.path``.

``LINEARIZER_TEST_THREADS`` (default 1) sets ``torch.set_num_threads`` for the whole suite, so
the suite can be run under two thread counts to show that no result depends on it (tolerances
scale with the dtype's epsilon, never with one machine's BLAS kernels). One thread is the
default because the tiny ops here are faster on one thread than on contended cores.
"""

import atexit
import os
import shutil
import tempfile

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

# One-step matrices are kept across processes (flow.bcache); the suite keeps its own, so it never
# reads or fills the user's cache, and subprocesses share it.
if "LINEARIZER_CACHE" not in os.environ:
    os.environ["LINEARIZER_CACHE"] = tempfile.mkdtemp(prefix="linearizer-test-cache-")
    atexit.register(shutil.rmtree, os.environ["LINEARIZER_CACHE"], True)


@pytest.fixture(autouse=True)
def _keep_thread_count():
    """CLI commands called in-process set their own thread count; restore the suite's."""
    n = torch.get_num_threads()
    yield
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)


# --------------------------------------------------------------------------- smoke runs
# One smoke run of each kind per test session, trained through the CLI in-process; tests only
# read them (a test that changes a run copies it first).


def _train(kind: str, out, *extra: str) -> None:
    from linearizer.cli.main import main

    argv = ["train", kind, "--preset", "smoke", "--out", str(out), *extra]
    assert main(argv) == 0, f"smoke training failed: {argv}"


@pytest.fixture(scope="session")
def smoke_flow_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("smoke") / "flow"
    _train("flow", run)
    return run


@pytest.fixture(scope="session")
def smoke_projective_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("smoke") / "projective"
    _train("projective", run)
    return run


def write_png(path, seed: int, size: int = 16) -> str:
    from linearizer.style.images import save_image

    img = torch.rand(3, size, size, generator=torch.Generator().manual_seed(seed))
    return str(save_image(img, path))


@pytest.fixture(scope="session")
def smoke_style_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("smoke-style")
    content = write_png(root / "cat.png", 0, size=32)
    for i, name in enumerate(["red", "blue"]):
        write_png(root / "targets" / name / "cat.png", 10 + i, size=32)
    run = root / "run"
    _train("style", run, "--content", content, "--styles", str(root / "targets"))
    return run
