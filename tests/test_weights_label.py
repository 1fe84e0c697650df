"""The weights a run holds have one name each for users ("EMA", "raw"), whatever the section
names inside the checkpoint file, and a report names the weights it measured."""

from __future__ import annotations

from linearizer.io import write_json
from linearizer.pretrained import info
from linearizer.repro.runner import _weights
from linearizer.training.weights import weights_label


def test_sections_have_one_name_each():
    assert (weights_label("ema"), weights_label("model")) == ("EMA", "raw")


def test_a_shipped_model_is_named_by_its_description(tmp_path):
    """A shipped model's folder stores its (EMA) weights under "model": not raw weights."""
    write_json(tmp_path / "run.json", {"status": "finished", "pretrained": "mnist"})
    assert _weights(tmp_path, "model") == info("mnist")["weights"] == "EMA"


def test_a_run_folder_is_named_by_the_section_loaded(tmp_path):
    assert _weights(tmp_path, "model") == "raw" and _weights(tmp_path, "ema") == "EMA"
    write_json(tmp_path / "run.json", {"status": "finished"})
    assert _weights(tmp_path, "ema") == "EMA"
