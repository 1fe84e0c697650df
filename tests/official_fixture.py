"""Where the authors' reference fixture lies (../shared/reference/official beside the repo)."""

from pathlib import Path

import pytest

OFFICIAL = Path(__file__).resolve().parents[2] / "shared" / "reference" / "official"
CKPT = OFFICIAL / "checkpoint" / "models" / "model.pth"
GOLDEN = OFFICIAL / "golden.safetensors"
MANIFEST = OFFICIAL / "state_dict_manifest.tsv"

needs_fixture = pytest.mark.skipif(
    not (CKPT.is_file() and GOLDEN.is_file()),
    reason=f"official reference fixture not found under {OFFICIAL}",
)


def load_golden() -> dict:
    from safetensors.torch import load_file

    return load_file(str(GOLDEN))
