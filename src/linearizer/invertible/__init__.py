"""Invertible networks with exact inverses: blocks, conditioners and ready-made networks.

Every block is an :class:`InvertibleModule` with ``forward(x, flag=None)`` and
``inverse(z, flag=None)`` on images ``[B, C, H, W]``; ``flag`` is the ``[B]`` flag handed to
every conditioner.
"""

from .actnorm import ActNorm
from .base import Conditioned, InvertibleModule, as_cond, as_flag, same_network
from .cnn import SmallCNN
from .conv1x1 import InvConv1x1
from .coupling import AffineCoupling
from .dropout import SharedDropout, set_dropout_seed
from .network import CouplingBlock, InvertibleNetwork, cpu_network
from .precision import conditioners_in
from .sequential import InvertibleSequential
from .squeeze import Squeeze
from .unet import paper_network

__all__ = [
    "ActNorm",
    "AffineCoupling",
    "Conditioned",
    "CouplingBlock",
    "InvConv1x1",
    "InvertibleModule",
    "InvertibleNetwork",
    "InvertibleSequential",
    "SharedDropout",
    "SmallCNN",
    "Squeeze",
    "as_cond",
    "as_flag",
    "conditioners_in",
    "cpu_network",
    "paper_network",
    "same_network",
    "set_dropout_seed",
]
