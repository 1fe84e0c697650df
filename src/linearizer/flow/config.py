"""Typed config and presets of one-step flow matching (``linearizer train flow``).

Presets:

* ``smoke`` — a few seconds, for tests and CI: tiny network, synthetic-size batches.
* ``cpu`` — MNIST on 2 CPU cores, 5,600 steps: the small CNN
  conditioners (1 block, 16 channels) behind a logit on the data side, two fully connected
  blocks, bounded shifts and linear logit tails, a noise side that is odd about a learned
  mean, a rank-64 operator whose factors are built once per shared time (16 per batch), and
  twenty components; docs/flow.md has its measured time and quality.
* ``cpu-cond`` — the ``cpu`` preset with a class-conditional operator (docs/conditional.md).
* ``paper`` — the authors' MNIST configuration (4 blocks of the invertible U-Net with 16
  channels, rank 8, batch 256, Adam 1e-4, 201 epochs = 47,000 steps), for GPUs.
* ``celeba`` — the authors' CelebA configuration: 64x64 RGB (D = 12,288), the same network and
  operator widths, batch 16, T = 100, 201 epochs of CelebA's 162,770 training images; for GPUs.
  The one-step matrix is kept factored (``c I + U V^T``) at this size.
* ``cpu-rgb`` — colour on 2 CPU cores in minutes: the ``cpu`` network on 32x32 crops of
  scikit-image's bundled photographs (or ``--set data.dataset=folder:PATH``); see docs/colour.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from ..config import Config
from ..data.config import DataConfig
from ..errors import LinearizerError
from ..invertible.factory import NetworkConfig
from ..training.config import TrainConfig, apply_overrides, option, register_preset
from .spec import SamplerSpec


@dataclass
class FlowModelConfig(Config):
    """What builds a :class:`~linearizer.flow.model.OneStepFlow`: the invertible network and
    the time-dependent operator, and nothing of training (:func:`~linearizer.flow.build.build_flow`
    takes this or any :class:`FlowConfig`).

    >>> from linearizer.flow.build import build_flow
    >>> model = build_flow(FlowModelConfig(network=NetworkConfig(img_size=8, blocks=1, hidden=8),
    ...                                    rank=2, lora_emb=8, lora_hidden=16))
    >>> model.image_shape
    (1, 8, 8)
    """

    network: NetworkConfig = option(NetworkConfig(), "the invertible network g")
    rank: int = option(8, "rank r of A(t) = U(t) V(t)^T")
    lora_emb: int = option(64, "width of the sinusoidal time embedding of the hypernetworks")
    lora_hidden: int = option(256, "hidden width of the hypernetworks")
    lora_depth: int = option(2, "hidden layers of the hypernetworks")
    lora_activation: Literal["gelu", "silu"] = option("silu", "hypernetwork activation")
    v_scale: float = option(0.03125, "scale on V(t) (1/sqrt(D) keeps A near unit gain at init)")
    lora_basis: int = option(
        0, "A(t)'s factors as a t-dependent mix of this many learned matrices (0: plain heads)"
    )
    conditional: bool = option(
        False,
        "class-conditional operator A(t, c): a learned class embedding added to the "
        "hypernetworks' time embedding; g stays shared by all classes (docs/conditional.md)",
    )
    classes: int = option(10, "number of classes of a conditional run (labels 0..classes-1)")
    components: int = option(
        1,
        "K components of the data found without labels, one operator A(t, k) each over the "
        "shared g: the sampler is a mixture of K exact linear generators (1: one generator; "
        "docs/mixture.md)",
    )

    def validate(self) -> None:
        super().validate()
        size = self.network.img_size
        if size % 2 or size < 4:
            raise LinearizerError(f"img_size must be even and >= 4, got {size}")
        self._require("rank lora_hidden lora_depth", ">= 1", lambda v: not v < 1, got=False)
        self._require("lora_basis", ">= 0", lambda v: not v < 0)
        self._require("classes", ">= 2", lambda v: not (self.conditional and v < 2))
        self._require("components", ">= 1", lambda v: not v < 1)
        if self.conditional and self.components > 1:
            raise LinearizerError(
                "conditional=true and components > 1 exclude each other: a class-conditional "
                "model's components are its classes (--preset cpu-cond, or set components=1)"
            )

    def model_config(self) -> FlowModelConfig:
        """The model's part alone (a :class:`FlowConfig` drops its data and training keys)."""
        names = {f.name for f in dataclasses.fields(FlowModelConfig)}
        return FlowModelConfig(**{k: v for k, v in vars(self).items() if k in names})


@dataclass
class FlowConfig(FlowModelConfig, TrainConfig):
    """One-step flow matching: the model (:class:`FlowModelConfig`), data, objective, sampling
    and training settings."""

    RENAMED = {**TrainConfig.RENAMED, "sample_temperature": "sampler.temperature"}
    # The training grids' T and solver: the grids now use the run's sampler.
    RETIRED = frozenset({"sample_steps", "sample_method"})

    data: DataConfig = option(DataConfig(), "training images")
    noise_level: float = option(0.3, "latent noise of the two reconstruction terms (authors: 0.3)")
    perceptual: Literal["auto", "lpips", "mse", "l1", "ssim", "grad"] = option(
        "mse", "distance of the x1 reconstruction terms: LPIPS (needs piq) or a stand-in"
    )
    time_sampling: Literal["uniform", "logit-normal"] = option(
        "uniform", "distribution of t in the loss (authors: uniform)"
    )
    time_groups: int = option(
        0,
        "distinct times t per batch, each shared by a run of rows (0: one per row, authors); "
        "A(t)'s factors are then built this many times per step, so a large rank costs little",
    )
    sampler: SamplerSpec = option(
        SamplerSpec(),
        "the run's sampler: linearizer sample, evaluate, invert, explore and the "
        "training grids use it unless told otherwise (flow.spec)",
    )
    n_samples: int = option(64, "images in the sample grids saved during training")
    component_features: Literal["pixels", "latent"] = option(
        "pixels",
        "where components=K finds its components before training, by k-means: the images' "
        "pixels, or the data-side latents of init_from's network (flow.components)",
    )
    class_dropout: float = option(
        0.1,
        "fraction of a conditional run's rows trained with the null class, for "
        "classifier-free guidance",
    )

    calibration_samples: int = option(
        0,
        "fit the latent calibration (flow.calibration) on this many noise draws and training "
        "images when training ends, for the run's sampler (0: none)",
    )
    transport_steps: int = option(
        0,
        "with the calibration, fit a latent transport (flow.transport: a small flow in the "
        "sampler's range, fitted to all training images' latents) for this many Adam steps "
        "(0: none)",
    )

    def validate(self) -> None:
        super().validate()
        self._require("time_groups", ">= 0", lambda v: not v < 0)
        self._require("calibration_samples", "0 or >= 2", lambda v: not (v < 0 or v == 1))
        if self.transport_steps < 0 or (self.transport_steps and not self.calibration_samples):
            raise LinearizerError(
                f"config key 'transport_steps' must be 0, or >= 1 with calibration_samples > 0, "
                f"got {self.transport_steps}"
            )
        if self.component_features == "latent" and self.components > 1 and not self.init_from:
            raise LinearizerError(
                "component_features=latent reads the data-side latents of init_from's network: "
                "set init_from=RUN or pretrained:NAME, or use component_features=pixels"
            )
        if self.conditional:
            if not 0.0 <= self.class_dropout < 1.0:
                raise LinearizerError(
                    f"config key 'class_dropout' must lie in [0, 1), got {self.class_dropout}"
                )
            if self.calibration_samples:
                raise LinearizerError(
                    "conditional=true samples the trained map alone: use "
                    "--preset cpu-cond, or set calibration_samples=0 "
                    "transport_steps=0 finish_minutes=0"
                )
        if self.components > 1 and self.calibration_samples:
            raise LinearizerError(
                "components > 1 samples the trained map alone: set calibration_samples=0 "
                "transport_steps=0 finish_minutes=0"
            )


SMOKE = FlowConfig(
    data=DataConfig(dataset="synthetic"),
    network=NetworkConfig(img_size=8, blocks=1, hidden=8),
    rank=2,
    lora_emb=8,
    lora_hidden=16,
    v_scale=0.125,
    batch_size=8,
    max_steps=6,
    lr=1e-3,
    ckpt_every=3,
    log_every=1,
    ema_decay=0.9,
    ema_warmup=2,
    sampler=SamplerSpec(steps=10),
    n_samples=16,
    threads=1,
)

# The optimiser, schedule, EMA, logging and threads of both presets for 2 CPU cores.
CPU_TRAINING = {
    "lr": 1e-3,
    "warmup_steps": 100,
    "schedule": "linear",
    "min_lr_ratio": 0.1,
    "grad_clip": 1.0,
    "ema_decay": 0.99,
    "ema_warmup": 50,
    "log_every": 25,
    "threads": 2,
}

# The cpu preset: the paper's one-step model sized for 2 CPU cores.
# - A fixed step count (lr_clock=steps), so the model does not depend on the machine's speed;
#   max_minutes is only a cap, and its last finish_minutes are kept for the fit after the steps.
# - One convolutional coupling block with 16-channel conditioners: small convolutions are the
#   slowest work per value on a CPU, so one block keeps local detail and two fully connected
#   coupling blocks (a few large matrix products) give g whole-image context.
# - A fixed logit on the data side against speckle on coarse grids; bounded shifts and linear
#   logit tails so that every exact path (invert, round trips) holds far from the data.
# - Rank 64 from a 16-matrix basis, with 16 shared times per batch: as cheap per step as rank
#   16, and the float16 weights stay under 10 MB.
# - Two threads; on a machine other jobs share, --set threads=1 trains faster.
# - A noise side odd about a learned mean, g_noise(x) = h(x) + mu with h(-x) = -h(x): every
#   scalar a in [-2, 2] of the induced scaling sends h^-1 to a h(x) + (a - 1) mu, within
#   3 |mu| / |h| (8-13 %) of a latent that training visits or its mirror image, so float32
#   linearity for a < 0 read 4.9e-6 to 1.1e-5 on three runs (the blocks alone reached 1.4e-4,
#   conditioned 1e5-1e7 on the half that training never visits). Its step costs 1.26x (one
#   process, docs/mixture/odd-mean-2026-12-07/step_rate.json), so 5,600 steps take 0.88 of the
#   blocks' time for 8,000, and scored FID (LeNet) 42.7 and 39.3 against 48.1 and 55.9 (two
#   seeds; docs/flow/roundtrip.md section 12).
# - A mixture of twenty exact linear generators whose components k-means finds in the training
#   images (no labels). At the same step cost, ten components scored FID (LeNet) 75.2 against
#   156.0 for one generator, and twenty 50.1 against 75.9 for ten (two seeds each, the trained
#   map alone; docs/mixture.md): with more clusters than digits, each covers less. A mixture
#   samples the trained map alone, so no post-hoc map is fitted after the steps (components=1
#   calibration_samples=10000 transport_steps=3000 finish_minutes=3 network.odd_noise=false
#   network.noise_mean=false max_steps=8000 is the one-generator preset), and one grid is
#   drawn, at the end (by the multi-step solver: a grid builds no B).
# What each choice measured: docs/flow.md, docs/flow/ablation.md, docs/mixture.md and
# BENCHMARKS.md sections 1 and 3.
CPU = FlowConfig(
    network=NetworkConfig(
        blocks=1,
        hidden=16,
        flag_actnorm=True,
        logit=0.05,
        dense_blocks=2,
        shift_bound=16.0,
        logit_tails="linear",
        odd_noise=True,
        noise_mean=True,
    ),
    rank=64,
    lora_basis=16,
    time_groups=16,
    batch_size=128,
    max_steps=5600,
    max_minutes=45.0,
    **CPU_TRAINING,
    ckpt_every=500,
    eval_every=5600,
    components=20,
)

# The cpu preset with the class-conditional operator and without the post-hoc fit (conditional
# runs sample the trained map alone), so the time of the fit trains instead. Its network is
# the one its reference run measured, two convolutional blocks of 32 channels (the cpu
# preset's one 16-channel block is not measured on the conditional model), with bounded shifts
# and linear tails so that invert holds off the data (docs/conditional.md).
CPU_COND = apply_overrides(
    CPU,
    # a grid integrates every class for T steps, so grids come less often
    [
        "components=1",
        "conditional=true",
        "max_steps=5000",
        "eval_every=5000",
        "network.blocks=2",
        "network.hidden=32",
        "network.odd_noise=false",
        "network.noise_mean=false",
    ],
)

PAPER = FlowConfig(
    network=NetworkConfig(
        kind="paper", blocks=4, hidden=16, dropout=0.1, clamp=5.0, clamp_mode="hard"
    ),
    rank=8,
    lora_emb=128,
    lora_hidden=512,
    lora_depth=2,
    lora_activation="gelu",
    v_scale=1.0,
    perceptual="auto",
    batch_size=256,
    lr=1e-4,
    max_steps=47_000,
    ema_decay=0.0,
    ckpt_every=2350,
    log_every=50,
    eval_every=2350,
)

# The authors' CelebA run differs from their MNIST one only in data, image size, attention level,
# batch and step counts, and the sampler's T.
CELEBA = apply_overrides(
    PAPER,
    [
        "data.dataset=celeba",
        "network.img_size=64",
        "network.unet_attn=16",  # the U-Net runs at 32x32 and 16x16 after the 2x2 squeeze
        "batch_size=16",
        "max_steps=2045000",  # 201 epochs x ceil(162,770 / 16) steps
        "ckpt_every=10000",
        "log_every=100",
        "eval_every=10000",
        "sampler.steps=100",
    ],
)

CPU_RGB = FlowConfig(
    data=DataConfig(dataset="photo-crops"),
    v_scale=0.018,  # about 1/sqrt(D), D = 3 x 32 x 32
    batch_size=64,
    max_steps=2000,
    max_minutes=8.0,
    **CPU_TRAINING,
    ckpt_every=250,
    eval_every=500,
)

for _name, _cfg in (
    ("smoke", SMOKE),
    ("cpu", CPU),
    ("cpu-cond", CPU_COND),
    ("paper", PAPER),
    ("celeba", CELEBA),
    ("cpu-rgb", CPU_RGB),
):
    register_preset("flow", _name, _cfg)
