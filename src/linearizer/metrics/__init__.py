"""Image metrics (PSNR, SSIM), FID (LeNet) / KID (LeNet), improved precision/recall and our
MNIST classifier.

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
from .precision_recall import coverage_share, knn_radii, precision_recall

__all__ = [
    "LeNet",
    "LeNetConfig",
    "accuracy",
    "classifier_stats",
    "coverage_share",
    "default_weights_path",
    "extract_features",
    "feature_stats",
    "fid_from_features",
    "fid_lenet",
    "frechet_distance",
    "gaussian_window",
    "inception_fid",
    "kid_from_features",
    "kid_lenet",
    "knn_radii",
    "lenet_features",
    "load_classifier",
    "load_info",
    "mse_per_sample",
    "precision_recall",
    "predict_logits",
    "psnr",
    "psnr_from_mse",
    "save_classifier",
    "ssim",
    "ssim_map",
    "train_classifier",
]
