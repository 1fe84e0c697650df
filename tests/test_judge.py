"""The held-out judge behind FID (judge): its committed asset, its features, its metric, its
refusal of tampered files and its training entry points.

Tests that need real MNIST read the user's cache only (``download=False``) and skip without it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from linearizer.cli.main import main
from linearizer.data import load_mnist, to_float_images
from linearizer.errors import LinearizerError
from linearizer.metrics import (
    Judge,
    JudgeConfig,
    default_judge_path,
    fid_judge,
    judge_features,
    judge_info,
    load_info,
    load_judge,
    sample_scores,
    save_judge,
    train_judge,
)
from linearizer.metrics.classifier import accuracy

FIXTURE = Path(__file__).parent / "data" / "mnist_test_20.npz"


@pytest.fixture(scope="module")
def judge():
    return load_judge()


@pytest.fixture(scope="module")
def digits():
    with np.load(FIXTURE) as npz:
        return to_float_images(npz["images"], 32), torch.from_numpy(npz["labels"].astype(np.int64))


@pytest.fixture(scope="module")
def mnist_test():
    try:
        images, labels = load_mnist("test", download=False)
    except LinearizerError:
        pytest.skip("MNIST is not cached; `linearizer data fetch --dataset mnist` caches it")
    return images[:2000], labels[:2000]


def copy_asset(tmp_path: Path) -> Path:
    path = tmp_path / "judge.safetensors"
    path.write_bytes(default_judge_path().read_bytes())
    path.with_suffix(".json").write_bytes(default_judge_path().with_suffix(".json").read_bytes())
    return path


def test_committed_asset_has_the_recorded_format(judge):
    info = judge_info()
    path = default_judge_path()
    assert info["format"] == "linearizer.judge/1"
    assert info["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert info["config"]["widths"] == list(JudgeConfig().widths)
    assert info["seed"] != load_info()["seed"]
    assert info["test_accuracy"] >= 0.99 and info["epochs"] == len(info["history"])
    assert "--model judge" in info["command"] and info["date"]
    assert path.stat().st_size < 1 << 20
    assert all(p.dtype == torch.float32 for p in judge.parameters())
    assert not judge.training and judge.feature_dim == 128


def test_features_shape_and_input_convention(judge, digits):
    images, _ = digits
    assert judge_features(images, judge).shape == (20, 128)
    assert judge(images).shape == (20, 10)
    with np.load(FIXTURE) as npz:
        small = torch.from_numpy(npz["images"]).float().div(255).unsqueeze(1)
    # 28x28 goes through the LeNet's resize, so it lands on the loader's 32x32 up to rounding
    torch.testing.assert_close(judge_features(small, judge), judge_features(images, judge))
    with pytest.raises(LinearizerError, match="one-channel"):
        judge_features(torch.zeros(2, 3, 32, 32), judge)


def test_reads_the_fixture_digits_and_scores_them(judge, digits):
    images, labels = digits
    scores = sample_scores(images, images, labels, judge=judge)
    assert set(scores) == {
        "fid_lenet",
        "fid_judge",
        "judge_accuracy",
        "judge_confidence",
        "judge_entropy",
    }
    assert abs(scores["fid_lenet"]) < 1e-3 and abs(scores["fid_judge"]) < 1e-3
    assert scores["judge_accuracy"] >= 0.9 and scores["judge_confidence"] > 0.9
    assert sample_scores(images, images, judge=judge)["judge_accuracy"] is None


def test_accuracy_on_real_test_digits(judge, mnist_test):
    images, labels = mnist_test
    assert accuracy(judge, images, labels) >= 0.98


def test_fid_judge_self_zero_noise_large(judge, mnist_test):
    images, _ = mnist_test
    noise = torch.rand(images.shape, generator=torch.Generator().manual_seed(0))
    assert abs(fid_judge(images, images, judge)) < 1e-3
    halves = fid_judge(images[::2], images[1::2], judge)
    assert fid_judge(noise, images, judge) > 20 * halves > 0


def test_tampered_asset_is_refused_in_one_line(tmp_path):
    path = copy_asset(tmp_path)
    load_judge(path)  # the untouched copy loads
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x01  # one bit of one weight: safetensors itself cannot notice
    path.write_bytes(bytes(data))
    with pytest.raises(LinearizerError, match="SHA-256") as err:
        load_judge(path)
    assert "\n" not in str(err.value)


def test_foreign_or_incomplete_records_are_refused(tmp_path):
    path = copy_asset(tmp_path)
    record = judge_info(path)
    (tmp_path / "judge.json").write_text('{"format": "linearizer.lenet/1"}')
    with pytest.raises(LinearizerError, match="not a linearizer judge description"):
        load_judge(path)
    record.pop("sha256")
    (tmp_path / "judge.json").write_text(json.dumps(record))
    with pytest.raises(LinearizerError, match="records no SHA-256"):
        load_judge(path)


def test_tiny_training_run_round_trips_and_is_seeded(tmp_path):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(64, 1, 32, 32, generator=g)
    y = torch.randint(0, 10, (64,), generator=g)
    small = JudgeConfig(widths=(4, 8), feature_dim=8)
    kwargs = {"epochs": 1, "batch_size": 32, "config": small, "log": None}
    result = train_judge((x, y), (x[:16], y[:16]), **kwargs)
    again = train_judge((x, y), (x[:16], y[:16]), **kwargs)
    for a, b in zip(result.model.state_dict().values(), again.model.state_dict().values()):
        assert torch.equal(a, b)
    path = save_judge(result.model, tmp_path / "j.safetensors", {"seed": 1})
    loaded = load_judge(path)
    assert isinstance(loaded, Judge) and loaded.config == small
    torch.testing.assert_close(loaded(x[:4]), result.model(x[:4]), rtol=0, atol=0)
    with pytest.raises(LinearizerError, match="epochs"):
        train_judge((x, y), (x, y), epochs=0, log=None)


def test_cli_train_judge_dry_run(capsys, tmp_path):
    assert main(["classifier", "train", "--model", "judge", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would train the judge" in out and "seed 1, 5 epochs" in out
    assert "judge_mnist.safetensors" in out
    out_file = tmp_path / "j.safetensors"
    argv = ["classifier", "train", "--model", "judge", "--seed", "7", "--epochs", "2"]
    assert main([*argv, "--out", str(out_file), "--dry-run"]) == 0
    assert "seed 7, 2 epochs" in capsys.readouterr().out and not out_file.exists()
    assert main(["classifier", "train", "--dry-run"]) == 0
    assert "would train LeNet on MNIST (seed 0, 12 epochs" in capsys.readouterr().out


def test_cli_eval_judge(mnist_test, capsys):
    assert main(["classifier", "eval", "--model", "judge"]) == 0
    assert "(judge, committed weights)" in capsys.readouterr().out
