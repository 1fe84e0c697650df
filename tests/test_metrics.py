"""Metrics: PSNR/SSIM against known values, FID/KID on Gaussian features, our LeNet.

tests/data/mnist_test_20.npz holds 20 real MNIST test digits (two per class, the first of each
class in the test set; indices stored in the file), uint8 28x28. MNIST is by Yann LeCun and
Corinna Cortes (CC BY-SA 3.0).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from linearizer.cli.main import main
from linearizer.data import to_float_images
from linearizer.errors import LinearizerError
from linearizer.metrics import (
    LeNet,
    classifier_stats,
    feature_stats,
    fid_from_features,
    fid_lenet,
    frechet_distance,
    inception_fid,
    kid_from_features,
    kid_lenet,
    lenet_features,
    load_classifier,
    load_info,
    mse_per_sample,
    psnr,
    psnr_from_mse,
    save_classifier,
    ssim,
    ssim_map,
    train_classifier,
)
from linearizer.metrics import fid as fid_mod
from linearizer.metrics.classifier import random_shift
from tolerance import assert_near

EPS64 = float(np.finfo(np.float64).eps)

FIXTURE = Path(__file__).parent / "data" / "mnist_test_20.npz"


def rand_images(n=3, c=1, h=16, w=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, c, h, w, generator=g, dtype=torch.float64)


# --- PSNR --------------------------------------------------------------------------------------


def test_psnr_known_values():
    a = torch.zeros(2, 1, 8, 8)
    assert psnr(a, a + 0.1) == pytest.approx(20.0)
    assert psnr(a, a + 0.1, data_range=2.0) == pytest.approx(20.0 + 20 * math.log10(2))
    assert psnr(a, a) == math.inf
    assert psnr_from_mse(1e-12) == pytest.approx(120.0)
    assert psnr_from_mse(0.0) == math.inf
    assert psnr_from_mse(torch.tensor([1e-4, 0.0])).tolist() == [pytest.approx(40.0), math.inf]


def test_psnr_reductions():
    a = torch.zeros(2, 1, 4, 4)
    b = torch.stack([torch.full((1, 4, 4), 0.1), torch.full((1, 4, 4), 0.01)])
    per = psnr(a, b, reduction="none")
    assert per.dtype == torch.float64 and per.tolist() == pytest.approx([20.0, 40.0])
    assert psnr(a, b) == pytest.approx(30.0)
    assert psnr(a, b, reduction="global") == pytest.approx(-10 * math.log10((0.01 + 1e-4) / 2))
    assert mse_per_sample(a, b).tolist() == pytest.approx([0.01, 1e-4])


def test_psnr_computes_in_float64_for_tiny_errors():
    a = torch.rand(2, 1, 8, 8, dtype=torch.float64)
    b = a + 1e-7
    assert psnr(a, b) == pytest.approx(140.0, abs=1e-6)


def test_image_metric_errors():
    with pytest.raises(LinearizerError, match="shapes differ"):
        psnr(torch.zeros(2, 1, 4, 4), torch.zeros(2, 1, 4, 5))
    with pytest.raises(LinearizerError, match="reduction"):
        psnr(torch.zeros(2, 3), torch.ones(2, 3), reduction="sum")
    with pytest.raises(LinearizerError, match="smaller than the 11x11"):
        ssim(torch.zeros(1, 1, 8, 8), torch.zeros(1, 1, 8, 8))
    with pytest.raises(LinearizerError, match=r"\[N, C, H, W\]"):
        ssim(torch.zeros(1, 16, 16, 1, 1), torch.zeros(1, 16, 16, 1, 1))


# --- SSIM --------------------------------------------------------------------------------------


def ssim_bruteforce(a: np.ndarray, b: np.ndarray, r: float = 1.0) -> float:
    """Window-by-window SSIM of one 2-D image pair, straight from the paper's formulas."""
    k = np.exp(-((np.arange(11) - 5.0) ** 2) / (2 * 1.5**2))
    w = np.outer(k, k) / np.outer(k, k).sum()
    c1, c2 = (0.01 * r) ** 2, (0.03 * r) ** 2
    vals = []
    for i in range(a.shape[0] - 10):
        for j in range(a.shape[1] - 10):
            x, y = a[i : i + 11, j : j + 11], b[i : i + 11, j : j + 11]
            mx, my = (w * x).sum(), (w * y).sum()
            vx, vy = (w * (x - mx) ** 2).sum(), (w * (y - my) ** 2).sum()
            cxy = (w * (x - mx) * (y - my)).sum()
            vals.append(
                (2 * mx * my + c1) * (2 * cxy + c2) / ((mx**2 + my**2 + c1) * (vx + vy + c2))
            )
    return float(np.mean(vals))


def test_ssim_identical_is_one_and_symmetric():
    a, b = rand_images(seed=1), rand_images(seed=2)
    assert ssim(a, a) == pytest.approx(1.0, abs=1e-12)
    assert ssim(a, b) == pytest.approx(ssim(b, a), abs=1e-12)
    assert -1.0 <= ssim(a, b) < 0.2  # independent noise is nearly unrelated


def test_ssim_constant_images_analytic():
    # no variance: SSIM = (2 mu_a mu_b + C1) / (mu_a^2 + mu_b^2 + C1)
    a = torch.full((1, 1, 12, 12), 0.2, dtype=torch.float64)
    b = torch.full((1, 1, 12, 12), 0.6, dtype=torch.float64)
    c1 = 0.01**2
    assert ssim(a, b) == pytest.approx((2 * 0.12 + c1) / (0.04 + 0.36 + c1), rel=1e-10)


def test_ssim_matches_window_by_window_reference():
    a, b = rand_images(2, 2, 14, 13, seed=3), rand_images(2, 2, 14, 13, seed=4)
    b = 0.6 * a + 0.4 * b  # correlated, so the structure term matters
    per = ssim(a, b, reduction="none")
    for n in range(2):
        ref = np.mean([ssim_bruteforce(a[n, c].numpy(), b[n, c].numpy()) for c in range(2)])
        assert float(per[n]) == pytest.approx(ref, rel=1e-10)
    assert ssim_map(a, b).shape == (2, 2, 4, 3)


def test_ssim_matches_scikit_image_when_installed():
    metrics = pytest.importorskip("skimage.metrics")
    a, b = rand_images(1, 1, 32, 32, seed=5), rand_images(1, 1, 32, 32, seed=6)
    b = (0.7 * a + 0.3 * b).clamp(0, 1)
    ref = metrics.structural_similarity(
        a[0, 0].numpy(),
        b[0, 0].numpy(),
        gaussian_weights=True,
        sigma=1.5,
        use_sample_covariance=False,
        data_range=1.0,
    )
    assert ssim(a, b) == pytest.approx(ref, abs=1e-8)


# --- FID / KID on features ---------------------------------------------------------------------


def gaussian_features(n, d, shift=0.0, scale=1.0, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)) * scale + shift


def test_fid_of_a_set_with_itself_is_zero_and_fid_is_symmetric():
    f1 = gaussian_features(2000, 16, seed=1)
    f2 = gaussian_features(2000, 16, shift=0.3, scale=1.2, seed=2)
    scale = float(np.trace(np.cov(f1, rowvar=False)))  # FID is in units of the covariance
    assert abs(fid_from_features(f1, f1)) <= 1e5 * EPS64 * scale  # measured 1e-14 on 16
    assert fid_from_features(f1, f2) == pytest.approx(fid_from_features(f2, f1), rel=1e-9)
    assert fid_from_features(f1, f2) > 1.0


def test_frechet_distance_analytic_cases():
    d = 5
    eye = np.eye(d)
    mu2 = np.arange(d, dtype=float)
    assert frechet_distance(np.zeros(d), eye, mu2, eye) == pytest.approx(float(mu2 @ mu2))
    # tr(I + 4I - 2 * 2I) = d
    assert frechet_distance(np.zeros(d), eye, np.zeros(d), 4 * eye) == pytest.approx(d)
    with pytest.raises(LinearizerError, match="mismatched statistics"):
        frechet_distance(np.zeros(3), np.eye(3), np.zeros(4), np.eye(4))


def test_trace_fallback_agrees_with_sqrtm_and_handles_singular_covariances():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((6, 6)), rng.standard_normal((6, 3))
    s1, s2 = a @ a.T, b @ b.T  # s2 has rank 3
    import scipy.linalg

    direct = float(np.trace(scipy.linalg.sqrtm(s1 @ s2)).real)
    assert fid_mod._trace_sqrt_product(s1, s2) == pytest.approx(direct, rel=1e-6)
    assert np.isfinite(frechet_distance(np.zeros(6), s1, np.zeros(6), s2))
    # dead features (all zero in both sets), as ReLU units give
    f = gaussian_features(500, 6, seed=3)
    f[:, 2] = 0.0
    assert abs(fid_from_features(f, f)) <= 1e5 * EPS64 * float(np.trace(np.cov(f, rowvar=False)))


def test_kid_identical_near_zero_and_grows_with_shift():
    f = gaussian_features(600, 8, seed=4)
    g = gaussian_features(600, 8, seed=5)
    h = gaussian_features(600, 8, shift=1.0, seed=6)
    same, _ = kid_from_features(f, f, subset_size=200, subsets=10)
    near, _ = kid_from_features(f, g, subset_size=200, subsets=10)
    far, std = kid_from_features(f, h, subset_size=200, subsets=10)
    # the same samples on both sides give -O(1/m) (the cross term keeps k(x, x)), not exactly 0
    assert abs(same) < 0.05 and abs(near) < 0.05
    assert far > 100 * 0.05 and far > 3 * std
    with pytest.raises(LinearizerError):
        kid_from_features(f[:1], f[:1])


def test_feature_errors():
    with pytest.raises(LinearizerError, match="NaN"):
        feature_stats(np.full((3, 2), np.nan))
    with pytest.raises(LinearizerError, match=r"N >= 2"):
        feature_stats(np.zeros((1, 4)))


# --- the classifier ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def digits():
    with np.load(FIXTURE) as npz:
        return to_float_images(npz["images"], 32), torch.from_numpy(npz["labels"].astype(np.int64))


@pytest.fixture(scope="module")
def model():
    return load_classifier()


def test_committed_classifier_reads_real_digits(model, digits):
    images, labels = digits
    stats = classifier_stats(images, labels, model)
    assert stats["accuracy"] >= 0.9
    assert stats["n"] == 20 and sum(stats["class_histogram"]) == 20
    assert 0.0 <= stats["mean_entropy"] < stats["max_entropy"]
    assert stats["mean_max_prob"] > 0.9
    info = load_info()
    assert info["test_accuracy"] >= 0.99 and info["seed"] == 0


def test_classifier_accepts_28x28_like_the_loader(model, digits):
    images, _ = digits
    with np.load(FIXTURE) as npz:
        small = torch.from_numpy(npz["images"]).float().div(255).unsqueeze(1)
    assert_near(lenet_features(small, model), lenet_features(images, model), eps_factor=1e3)
    with pytest.raises(LinearizerError, match="one-channel"):
        model(torch.zeros(2, 3, 32, 32))


def test_fid_and_kid_lenet_on_images(model, digits):
    images, _ = digits
    noise = torch.rand(20, 1, 32, 32, generator=torch.Generator().manual_seed(0))
    # 20 samples in 84-d: a rank-19 covariance; square roots of rounding-level eigenvalues
    # leave ~1e-5 (on a trace of order 100)
    assert abs(fid_lenet(images, images, model)) < 1e-3
    # ten samples a side bias FID upwards a lot; noise is still far worse than other digits
    halves = fid_lenet(images[::2], images[1::2], model)
    assert fid_lenet(noise[::2], images[1::2], model) > 2 * halves
    mean, _ = kid_lenet(noise, images, model, subset_size=10, subsets=5)
    assert mean > 0


def test_classifier_stats_without_labels_and_with_wrong_labels(model, digits):
    images, labels = digits
    stats = classifier_stats(images, model=model)
    assert stats["accuracy"] is None and stats["max_entropy"] == pytest.approx(math.log(10))
    wrong = classifier_stats(images, (labels + 1) % 10, model)
    assert wrong["accuracy"] <= 0.1
    with pytest.raises(LinearizerError, match="labels"):
        classifier_stats(images, labels[:5], model)


def test_train_save_load_round_trip(tmp_path):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(64, 1, 32, 32, generator=g)
    y = torch.randint(0, 10, (64,), generator=g)
    result = train_classifier((x, y), (x[:16], y[:16]), epochs=1, batch_size=32, log=None)
    path = save_classifier(result.model, tmp_path / "m.safetensors", {"seed": 0})
    loaded = load_classifier(path)
    torch.testing.assert_close(loaded(x[:4]), result.model(x[:4]), rtol=0, atol=0)
    (tmp_path / "m.json").write_text('{"format": "something else"}')
    with pytest.raises(LinearizerError, match="not a linearizer LeNet"):
        load_classifier(path)


def test_foreign_weights_are_refused(tmp_path):
    from linearizer.io import save_tensors, write_json

    path = tmp_path / "w.safetensors"
    save_tensors(path, {"conv1.weight": torch.zeros(3, 3)})
    write_json(path.with_suffix(".json"), load_info())
    with pytest.raises(LinearizerError, match="does not match its config"):
        load_classifier(path)


def test_random_shift_keeps_shape_and_zero_shift_is_identity():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(5, 1, 32, 32)
    assert random_shift(x, 2, g).shape == x.shape
    assert torch.equal(random_shift(x, 0, g), x)
    assert LeNet().feature_dim == 84


def test_inception_fid_skips_with_a_reason(monkeypatch):
    monkeypatch.setattr(fid_mod.importlib.util, "find_spec", lambda name: None)
    value, note = inception_fid(torch.zeros(2, 1, 32, 32), torch.zeros(2, 1, 32, 32))
    assert value is None and "neither pytorch-fid nor torch-fidelity" in note


def test_cli_classifier_dry_run_and_bad_out(capsys):
    assert main(["classifier", "train", "--dry-run", "--epochs", "2"]) == 0
    assert "would train LeNet" in capsys.readouterr().out
    assert main(["classifier", "train", "--out", "x.pt", "--dry-run"]) == 2


def test_kid_equals_a_brute_force_unbiased_mmd():
    """KID against the definition written out pair by pair, in float64: the unbiased MMD^2 of
    the cubic kernel k(a, b) = (a.b / d + 1)^3, with i != j in the within-set sums."""
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(6, 3)), rng.normal(0.5, 1.2, size=(6, 3))
    m, d = 6, 3

    def k(a, b):
        return (sum(a[i] * b[i] for i in range(d)) / d + 1) ** 3

    within = sum(k(x[i], x[j]) + k(y[i], y[j]) for i in range(m) for j in range(m) if i != j)
    across = sum(k(x[i], y[j]) for i in range(m) for j in range(m))
    want = within / (m * (m - 1)) - 2 * across / m**2
    # one subset of all m rows: a permutation, which the statistic does not see
    got, spread = fid_mod.kid_from_features(x, y, subset_size=m, subsets=1)
    assert spread == 0.0
    assert abs(got - want) <= 64 * np.finfo(np.float64).eps * max(1.0, abs(want))
