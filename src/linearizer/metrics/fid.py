"""FID (LeNet), KID (LeNet) and classifier statistics of generated MNIST digits.

These use the 84-d penultimate features of *our* MNIST classifier
(:mod:`linearizer.metrics.classifier`), not Inception: the numbers are comparable with each
other and with the reference points below, never with Inception FIDs from papers.
:func:`inception_fid` computes the real thing when pytorch-fid or torch-fidelity and their
weights are already installed, and otherwise says why not.

Fréchet distance: ``|mu1 - mu2|^2 + tr(S1 + S2 - 2 (S1 S2)^(1/2))`` in float64, the square root
by ``scipy.linalg.sqrtm``. Rounding can leave tiny imaginary parts; they are dropped. If the
result is not finite, ``eps`` is added to both diagonals (as pytorch-fid does). If the square
root is still poor (relative residual ``|X X - S1 S2| / |S1 S2|`` above 1e-6, or an imaginary
part above 1e-3 on the diagonal; this happens with singular covariances, e.g. dead ReLU
features) the trace is taken from the eigenvalues of the symmetric ``S1^(1/2) S2 S1^(1/2)``
instead (the same value in exact arithmetic).

KID: the unbiased estimate of MMD^2 with the kernel ``k(x, y) = (x.y / d + 1)^3``, averaged
over random subsets (Binkowski et al. 2018); returns the mean and the standard deviation.
Independent samples of one distribution give about 0; the very same samples on both sides give
a slightly negative value, -O(1/m), because the cross term keeps the k(x, x) terms.

Reference points with the committed weights (MNIST test set = the 10,000 test images at 32x32):

    sets                                         FID (LeNet)   KID (LeNet), mean +- std
    60k train vs test                            0.59
    10k random train images vs test, 3 draws     0.69 - 1.18   0.28 +- 5.5 (first draw)
    5k vs 5k random halves of the test set       1.24          0.78 +- 5.7
    first 5k vs last 5k of the test set          20.4          (different groups of writers)
    Fashion-MNIST test vs MNIST test             595           887 +- 43
    10k uniform noise vs test                    894           938 +- 40

With few samples FID is biased upwards (ten a side: hundreds even for real digits), so compare
sets of equal size, ideally 10k.

>>> import torch
>>> f = torch.randn(500, 8, dtype=torch.float64)
>>> abs(fid_from_features(f, f)) < 1e-8
True
"""

from __future__ import annotations

import importlib.util
import math
import warnings
from pathlib import Path

import numpy as np
import scipy.linalg
import torch
from torch import Tensor

from ..errors import LinearizerError
from .classifier import LeNet, extract_features, load_classifier, predict_logits


def _features(x) -> np.ndarray:
    array = x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)
    array = np.asarray(array, dtype=np.float64)
    if array.ndim != 2 or len(array) < 2:
        raise LinearizerError(f"expected features [N >= 2, D], got shape {array.shape}")
    if not np.isfinite(array).all():
        raise LinearizerError("features contain NaN or inf")
    return array


def feature_stats(features) -> tuple[np.ndarray, np.ndarray]:
    """Mean ``[D]`` and covariance ``[D, D]`` (unbiased, float64) of ``features [N, D]``."""
    f = _features(features)
    return f.mean(0), np.cov(f, rowvar=False).reshape(f.shape[1], f.shape[1])


def _trace_sqrt_product(s1: np.ndarray, s2: np.ndarray) -> float:
    """tr((s1 s2)^(1/2)) via the symmetric form s1^(1/2) s2 s1^(1/2) (robust fallback)."""
    w, v = np.linalg.eigh(s1)
    root = (v * np.sqrt(np.clip(w, 0, None))) @ v.T
    m = root @ s2 @ root
    return float(np.sqrt(np.clip(np.linalg.eigvalsh((m + m.T) / 2), 0, None)).sum())


def _sqrtm(a: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():  # singular input: we check the result ourselves
        warnings.simplefilter("ignore", scipy.linalg.LinAlgWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        return scipy.linalg.sqrtm(a)


def _sqrtm_is_good(root: np.ndarray, a: np.ndarray) -> bool:
    if not np.isfinite(root).all():
        return False
    if np.iscomplexobj(root) and np.abs(np.diagonal(root).imag).max() > 1e-3:
        return False
    scale = max(np.linalg.norm(a), 1e-300)
    return bool(np.linalg.norm(root @ root - a) / scale <= 1e-6)


def frechet_distance(mu1, sigma1, mu2, sigma2, eps: float = 1e-6) -> float:
    """Fréchet distance between the Gaussians N(mu1, sigma1) and N(mu2, sigma2)."""
    mu1, mu2 = (np.atleast_1d(np.asarray(m, np.float64)) for m in (mu1, mu2))
    s1, s2 = (np.atleast_2d(np.asarray(s, np.float64)) for s in (sigma1, sigma2))
    if mu1.shape != mu2.shape or s1.shape != s2.shape or s1.shape != (len(mu1), len(mu1)):
        raise LinearizerError(
            f"mismatched statistics: means {mu1.shape}, {mu2.shape}; covariances {s1.shape}, "
            f"{s2.shape}"
        )
    product = s1 @ s2
    covmean = _sqrtm(product)
    if not np.isfinite(covmean).all():
        offset = eps * np.eye(len(s1))
        product = (s1 + offset) @ (s2 + offset)
        covmean = _sqrtm(product)
    if _sqrtm_is_good(covmean, product):
        tr_covmean = float(np.trace(covmean.real))
    else:
        tr_covmean = _trace_sqrt_product(s1, s2)
    diff = mu1 - mu2
    return float(diff @ diff + np.trace(s1) + np.trace(s2) - 2.0 * tr_covmean)


def fid_from_features(f1, f2) -> float:
    """Fréchet distance between the Gaussian fits of two feature sets ``[N, D]``."""
    return frechet_distance(*feature_stats(f1), *feature_stats(f2))


def kid_from_features(
    f1, f2, subset_size: int = 1000, subsets: int = 100, seed: int = 0
) -> tuple[float, float]:
    """Kernel Inception-style distance (unbiased MMD^2, cubic polynomial kernel): (mean, std)."""
    x, y = _features(f1), _features(f2)
    if x.shape[1] != y.shape[1]:
        raise LinearizerError(f"feature sizes differ: {x.shape[1]} vs {y.shape[1]}")
    m = min(subset_size, len(x), len(y))
    if m < 2 or subsets < 1:
        raise LinearizerError(f"KID needs subsets of at least 2 samples and >= 1 subset, got {m}")
    d = x.shape[1]
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(subsets):
        a = x[rng.choice(len(x), m, replace=False)]
        b = y[rng.choice(len(y), m, replace=False)]
        k_aa = (a @ a.T / d + 1) ** 3
        k_bb = (b @ b.T / d + 1) ** 3
        k_ab = (a @ b.T / d + 1) ** 3
        off = m * (m - 1)
        mmd = (k_aa.sum() - np.trace(k_aa)) / off + (k_bb.sum() - np.trace(k_bb)) / off
        values.append(mmd - 2 * k_ab.mean())
    values = np.asarray(values)
    return float(values.mean()), float(values.std())


# --- on images, through the LeNet ---------------------------------------------------------------


def lenet_features(images: Tensor, model: LeNet | None = None, batch_size: int = 1000) -> Tensor:
    """84-d LeNet features of MNIST-like images ``[N, 1, 32, 32]`` in [0, 1]."""
    return extract_features(model or load_classifier(), images, batch_size)


def fid_lenet(samples: Tensor, reference: Tensor, model: LeNet | None = None) -> float:
    """FID (LeNet) between two image sets (e.g. 10k samples vs the 10k MNIST test images)."""
    model = model or load_classifier()
    return fid_from_features(lenet_features(samples, model), lenet_features(reference, model))


def kid_lenet(
    samples: Tensor,
    reference: Tensor,
    model: LeNet | None = None,
    subset_size: int = 1000,
    subsets: int = 100,
    seed: int = 0,
) -> tuple[float, float]:
    """KID (LeNet) between two image sets: (mean, std) over random subsets."""
    model = model or load_classifier()
    return kid_from_features(
        lenet_features(samples, model), lenet_features(reference, model), subset_size, subsets, seed
    )


def classifier_stats(
    samples: Tensor, labels: Tensor | None = None, model: LeNet | None = None
) -> dict:
    """What the classifier thinks of ``samples``.

    Returns ``accuracy`` (vs ``labels``, None without them), ``mean_max_prob`` (confidence),
    ``mean_entropy`` (nats; ln 10 = 2.30 means no idea) and ``class_histogram`` (counts of
    the predicted classes).
    """
    model = model or load_classifier()
    logits = predict_logits(model, samples).to(torch.float64)
    logp = torch.log_softmax(logits, 1)
    prob = logp.exp()
    pred = logits.argmax(1)
    acc = None
    if labels is not None:
        labels = torch.as_tensor(labels).cpu()
        if labels.shape != pred.shape:
            raise LinearizerError(f"labels {tuple(labels.shape)} do not match {len(pred)} samples")
        acc = float((pred == labels).double().mean())
    return {
        "n": len(pred),
        "accuracy": acc,
        "mean_max_prob": float(prob.max(1).values.mean()),
        "mean_entropy": float(-(prob * logp).sum(1).mean()),
        "max_entropy": math.log(logits.shape[1]),
        "class_histogram": torch.bincount(pred, minlength=logits.shape[1]).tolist(),
    }


# --- Inception FID, only when already installed -------------------------------------------------

PYTORCH_FID_WEIGHTS = "pt_inception-2015-12-05-6726825d.pth"
TORCH_FIDELITY_WEIGHTS = "weights-inception-2015-12-05-6726825d.pth"


def _hub_file(name: str) -> Path:
    return Path(torch.hub.get_dir()) / "checkpoints" / name


def inception_fid(
    samples: Tensor, reference: Tensor, batch_size: int = 50, device: str = "cpu"
) -> tuple[float | None, str]:
    """Inception FID via pytorch-fid or torch-fidelity if installed *with* cached weights.

    Returns ``(value, note)``; ``value`` is None and ``note`` says why when it cannot run.
    Nothing is downloaded or installed here. Grey images are repeated to three channels.
    """
    if importlib.util.find_spec("pytorch_fid") is not None:
        if _hub_file(PYTORCH_FID_WEIGHTS).is_file():
            return _pytorch_fid(samples, reference, batch_size, device), "pytorch-fid"
        reason = f"pytorch-fid is installed but {_hub_file(PYTORCH_FID_WEIGHTS)} is missing"
    elif importlib.util.find_spec("torch_fidelity") is not None:
        if _hub_file(TORCH_FIDELITY_WEIGHTS).is_file():
            return _torch_fidelity(samples, reference, batch_size, device), "torch-fidelity"
        reason = f"torch-fidelity is installed but {_hub_file(TORCH_FIDELITY_WEIGHTS)} is missing"
    else:
        reason = "neither pytorch-fid nor torch-fidelity is installed"
    return None, f"Inception FID skipped: {reason}"


def _rgb(x: Tensor) -> Tensor:
    return x.expand(-1, 3, -1, -1) if x.shape[1] == 1 else x


@torch.no_grad()
def _pytorch_fid(samples: Tensor, reference: Tensor, batch_size: int, device: str) -> float:
    from pytorch_fid.inception import InceptionV3

    model = InceptionV3([InceptionV3.BLOCK_INDEX_BY_DIM[2048]]).to(device).eval()

    def feats(x: Tensor) -> np.ndarray:
        out = [
            model(_rgb(x[i : i + batch_size]).to(device, torch.float32).clamp(0, 1))[0]
            .flatten(1)
            .cpu()
            for i in range(0, len(x), batch_size)
        ]
        return torch.cat(out).numpy()

    return fid_from_features(feats(samples), feats(reference))


def _torch_fidelity(samples: Tensor, reference: Tensor, batch_size: int, device: str) -> float:
    import torch_fidelity

    class _Images(torch.utils.data.Dataset):
        def __init__(self, x: Tensor):
            self.x = (_rgb(x).clamp(0, 1) * 255).round().to(torch.uint8).cpu()

        def __len__(self) -> int:
            return len(self.x)

        def __getitem__(self, i: int) -> Tensor:
            return self.x[i]

    out = torch_fidelity.calculate_metrics(
        input1=_Images(samples),
        input2=_Images(reference),
        fid=True,
        batch_size=batch_size,
        cuda=str(device).startswith("cuda"),
        verbose=False,
    )
    return float(out["frechet_inception_distance"])
