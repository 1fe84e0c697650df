"""The authors' released checkpoints, read without executing their pickles.

* :func:`read_torch_checkpoint`: any ``torch.save`` zip as inert data (object tree + state dict);
  only tensor rebuilding and plain containers are allowed, every other global is a stub.
* :func:`load_official` / :func:`convert_official`: the official one-step model mapped onto our
  paper network and TimeLoRA (their row-vector ``A1 A2^T`` becomes our ``U V^T`` with
  ``U = A2``, ``V = A1``), with numerical parity to their code.
"""

from ..safe_pickle import PickledObject, TorchCheckpoint, read_torch_checkpoint
from .official import KEY_TABLE, OfficialLayout, convert_official, key_map, load_official

__all__ = [
    "KEY_TABLE",
    "OfficialLayout",
    "PickledObject",
    "TorchCheckpoint",
    "convert_official",
    "key_map",
    "load_official",
    "read_torch_checkpoint",
]
