"""Modular style transfer: a bank of linear style operators over one shared invertible network.

``f_s(x) = g_y^-1(A_s g_x(x))``; mixtures, strengths and interpolations of styles are exact
linear algebra on the operators (see :mod:`linearizer.style.bank`). Training targets can be
made offline (:mod:`linearizer.style.targets`). Importing this package registers the ``style``
presets (smoke, cpu, paper).
"""

from .bank import StyleBank
from .build import build_style_model
from .config import StyleConfig
from .images import has_skimage, image_name, load_image, save_image
from .index_net import IndexStyleNet
from .latent import LatentView
from .model import StyleModel
from .operators import (
    WeightedStyleOperator,
    apply_operator,
    apply_operator_transpose,
    identity_kernel,
)
from .targets import DEFAULT_CONTENT, DEFAULT_STYLES, GatysSettings, make_targets, stylise
from .task import StyleData, StyleTask, load_style_data, prepare_config

__all__ = [
    "DEFAULT_CONTENT",
    "DEFAULT_STYLES",
    "GatysSettings",
    "IndexStyleNet",
    "LatentView",
    "StyleBank",
    "StyleConfig",
    "StyleData",
    "StyleModel",
    "StyleTask",
    "WeightedStyleOperator",
    "apply_operator",
    "apply_operator_transpose",
    "build_style_model",
    "has_skimage",
    "identity_kernel",
    "image_name",
    "load_image",
    "load_style_data",
    "make_targets",
    "prepare_config",
    "save_image",
    "stylise",
]
