"""One-step flow matching inside a Linearizer (registers the ``flow`` presets on import)."""

from . import config as config
from .config import FlowConfig, FlowModelConfig
from .model import OneStepFlow

__all__ = ["FlowConfig", "FlowModelConfig", "OneStepFlow"]
