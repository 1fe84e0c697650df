"""Image metrics (PSNR, SSIM), FID (LeNet) / KID (LeNet), improved precision/recall, our
MNIST classifier and the held-out judge behind FID (judge), which only reports.

>>> import torch
>>> from linearizer.metrics import psnr, ssim
>>> x = torch.rand(4, 1, 32, 32, dtype=torch.float64)
>>> psnr(x, x), ssim(x, x)
(inf, 1.0)
"""

from .classifier import (
    LeNet,
    LeNetConfig,
    accuracy,
    default_weights_path,
    extract_features,
    load_classifier,
    load_info,
    predict_logits,
    save_classifier,
    train_classifier,
)
from .fid import (
    classifier_stats,
    feature_stats,
    fid_from_features,
    fid_lenet,
    frechet_distance,
    inception_fid,
    kid_from_features,
    kid_lenet,
    lenet_features,
)
from .image import gaussian_window, mse_per_sample, psnr, psnr_from_mse, ssim, ssim_map
from .judge import (
    Judge,
    JudgeConfig,
    default_judge_path,
    fid_judge,
    judge_features,
    judge_info,
    load_judge,
    sample_scores,
    save_judge,
    train_judge,
)
from .precision_recall import coverage_share, knn_radii, precision_recall

__all__ = [
    "Judge",
    "JudgeConfig",
    "LeNet",
    "LeNetConfig",
    "accuracy",
    "classifier_stats",
    "coverage_share",
    "default_judge_path",
    "default_weights_path",
    "extract_features",
    "feature_stats",
    "fid_from_features",
    "fid_judge",
    "fid_lenet",
    "frechet_distance",
    "gaussian_window",
    "inception_fid",
    "judge_features",
    "judge_info",
    "kid_from_features",
    "kid_lenet",
    "knn_radii",
    "lenet_features",
    "load_classifier",
    "load_info",
    "load_judge",
    "mse_per_sample",
    "precision_recall",
    "predict_logits",
    "psnr",
    "psnr_from_mse",
    "sample_scores",
    "save_classifier",
    "save_judge",
    "ssim",
    "ssim_map",
    "train_classifier",
    "train_judge",
]
