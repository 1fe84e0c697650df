"""A module a hostile pickle names: calling ``touch`` leaves a file behind.

tests/test_safe_pickle.py checks that the restricted unpickler never imports this module (it
never appears in ``sys.modules``) and never calls ``touch`` (no file): the side effects, not an
error message, are the proof.
"""

from pathlib import Path


def touch(path: str) -> None:
    Path(path).touch()
