"""The restricted unpickler never imports or calls what a pickle names: proven by side effects.

Each hostile stream would, under ``pickle.loads``, create a flag file; after the restricted
reader has refused it, the flag must not exist (an error message alone proves nothing: the
call could have run before the error).
"""

from __future__ import annotations

import pickle
import struct
import sys
from pathlib import Path

import pytest

from linearizer.errors import LinearizerError
from linearizer.safe_pickle import unpickle_restricted


def s(text: str) -> bytes:
    data = text.encode()
    return b"X" + struct.pack("<I", len(data)) + data


def glob(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def call(fn: bytes, *args: bytes) -> bytes:
    tuples = {0: b")", 1: b"\x85", 2: b"\x86", 3: b"\x87"}
    return fn + b"".join(args) + tuples[len(args)] + b"R"


GETATTR = glob("builtins", "getattr")


def getattr_chain(flag: Path) -> bytes:
    """``getattr`` on an allow-listed function reaches its module globals, then ``Path`` and
    ``Path(flag).touch()``: harmless pieces that create a file if ``getattr`` is ever callable."""
    fn = glob("collections", "OrderedDict")  # allowed: resolves to the reader's own function
    globals_ = call(GETATTR, fn, s("__globals__"))
    getter = call(GETATTR, globals_, s("get"))
    path_cls = call(getter, s("Path"))
    touch = call(GETATTR, call(path_cls, s(str(flag))), s("touch"))
    return b"\x80\x02" + call(touch) + b"."


def streams(flag: Path) -> dict[str, bytes]:
    return {
        "getattr-chain": getattr_chain(flag),
        "open": b"\x80\x02" + call(glob("builtins", "open"), s(str(flag)), s("w")) + b".",
        "os.system": b"\x80\x02" + call(glob("os", "system"), s(f"touch {flag}")) + b".",
        "sentinel": b"\x80\x02" + call(glob("pickle_sentinel", "touch"), s(str(flag))) + b".",
    }


@pytest.mark.parametrize("name", ["getattr-chain", "open", "os.system", "sentinel"])
def test_refused_global_is_never_called(tmp_path, name):
    flag = tmp_path / "flag"
    stream = streams(flag)[name]
    with pytest.raises(LinearizerError, match="refusing to call"):
        unpickle_restricted(stream)
    assert not flag.exists(), "the refused call ran"
    if name in ("open", "sentinel"):  # under plain pickle the same stream leaves the flag
        pickle.loads(stream)
        assert flag.exists()
        sys.modules.pop("pickle_sentinel", None)


def test_getattr_on_the_allow_list_would_run_the_chain(tmp_path, monkeypatch):
    """The getattr chain is a real escape: with ``builtins.getattr`` allowed it writes the flag
    (so ``test_refused_global_is_never_called[getattr-chain]`` guards the allow-list)."""
    import linearizer.safe_pickle as sp

    monkeypatch.setitem(sp._ALLOWED, ("builtins", "getattr"), getattr)
    flag = tmp_path / "flag"
    try:
        unpickle_restricted(getattr_chain(flag))
    except LinearizerError:
        pass
    assert flag.exists()


def test_named_modules_are_never_imported(tmp_path):
    sys.modules.pop("pickle_sentinel", None)
    with pytest.raises(LinearizerError):
        unpickle_restricted(streams(tmp_path / "flag")["sentinel"])
    assert "pickle_sentinel" not in sys.modules
