"""``linearizer train projective``: the :class:`~linearizer.training.trainer.Task` of the
projective model and of its IGN baseline, and loading a trained run back."""

from __future__ import annotations

from pathlib import Path

from torch import Tensor, nn

from ..data.config import load_images as data_images
from ..invertible.factory import build_network
from ..operators.projector import ObliqueProjector, OrthogonalProjector
from ..training.image_task import ImageTask
from ..training.random_streams import StepRandom
from ..training.runs import read_run_config
from .config import ProjectiveConfig
from .ign import IGN, as_trained, ign_loss
from .model import ProjectiveModel, projective_loss, random_directions

KIND = "projective"


def load_images(cfg: ProjectiveConfig, split: str = "train") -> tuple[Tensor, Tensor]:
    """The config's dataset split as float32 images in [0, 1] and labels."""
    return data_images(cfg.data, cfg.network.img_size, split)


def build_model(cfg: ProjectiveConfig, channels: int | None = None) -> nn.Module:
    """The freshly initialised network ``cfg`` describes (ours or IGN; seeded by the caller);
    ``channels`` defaults to the data's (1 grey, 3 RGB)."""
    channels = channels or cfg.data.channels
    size = cfg.network.img_size
    if cfg.model == "ign":
        return IGN(channels, size, cfg.ign_width, cfg.ign_latent, cfg.ign_norm)
    shape = (channels, size, size)
    net = build_network(cfg.network, channels, conditioned=False)
    # The U-Net conditioners always take a flag; one constant flag keeps g_x = g_y.
    flag = 1.0 if cfg.network.kind == "paper" else None
    cls = OrthogonalProjector if cfg.projector == "orthogonal" else ObliqueProjector
    model = ProjectiveModel(net, cls(channels * size * size, cfg.rank), shape, flag)
    model.memory_saving = cfg.network.memory_saving
    if not cfg.pca_init:
        model.basis_initialized.fill_(1)
    return model


class ProjectiveTask(ImageTask, kind=KIND, config=ProjectiveConfig):
    """Draws data rows and source noise per step; the loss of ours or of IGN (``cfg.model``)."""

    def build_model(self, cfg: ProjectiveConfig, channels: int) -> nn.Module:
        return build_model(cfg, channels)

    @staticmethod
    def run_label(cfg: ProjectiveConfig) -> str:
        return cfg.model

    def loss(self, model: nn.Module, batch: dict[str, Tensor], rng: StepRandom):
        cfg, x = self.cfg, batch["x"]
        z = cfg.noise_std * rng.randn(*x.shape[1:], like=x)
        if cfg.model == "ign":
            return ign_loss(
                model, x, z, cfg.rec_weight, cfg.idem_weight, cfg.tight_weight, cfg.tight_clamp
            )
        dirs = None
        if cfg.match == "sliced":
            dirs = random_directions(cfg.rank, cfg.match_dirs, rng.int_seed("directions"), x)
        return projective_loss(
            model,
            x,
            z,
            rec_weight=cfg.rec_weight,
            match=cfg.match,
            match_weight=cfg.match_weight,
            directions=dirs,
        )

    def on_eval(self, model: nn.Module, step: int, run_dir: Path) -> dict[str, object]:
        f = as_trained(model)
        noise = self.cfg.noise_std * self.grid_noise.to(next(model.parameters()).device)
        y = f(noise)
        yy = f(y)
        rel = ((yy - y).flatten(1).norm(dim=1) / y.flatten(1).norm(dim=1).clamp_min(1e-30)).max()
        return {
            "samples": self.save_samples(y, step, run_dir, scale=2),
            "idempotence_noise_max": float(rel),
        }


def run_config(run_dir: str | Path) -> ProjectiveConfig:
    """The resolved config of a projective run folder (one clear error if it is not one)."""
    return read_run_config(run_dir, expect=KIND)
