"""The claims table (terminal and Markdown) and REPORT.md."""

from __future__ import annotations

import platform
from pathlib import Path

import torch

from .. import __version__
from ..flow.build import mixture_size
from ..flow.config import FlowConfig
from ..flow.objective import resolve_perceptual
from ..report import markdown_table, render_report, section
from ..training.weights import weights_label
from .claims import THRESHOLDS
from .numbers import sci

COLUMNS = ("claim", "paper", "reference", "measured", "verdict", "wall s")


def environment() -> dict[str, str]:
    """The fields of ``linearizer info`` plus the numeric libraries the numbers depend on."""
    import matplotlib
    import numpy
    import scipy

    return {
        "linearizer": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
        "matplotlib": matplotlib.__version__,
        "threads": str(torch.get_num_threads()),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
        "platform": platform.platform(),
    }


def rows(claims: dict[str, dict]) -> list[tuple[str, ...]]:
    return [
        (name, c["paper"], c["reference"], c["measured"], c["verdict"], f"{c['wall_s']:.1f}")
        for name, c in claims.items()
    ]


def _set_row(name: str, s: dict) -> list[str]:
    fid = "-" if s["fid_lenet"] is None else f"{s['fid_lenet']:.4f}"
    kid = "-" if s["kid_lenet"] is None else f"{s['kid_lenet']:.3g}"
    cl = s["classifier"]
    return [name, fid, kid, f"{cl['mean_max_prob']:.3f}", str(cl["class_histogram"])]


def terminal_table(claims: dict[str, dict]) -> str:
    """One block per claim: name and verdict, then the three figures."""
    width = max(len(n) for n in claims)
    out = []
    for name, paper, ref, measured, verdict, wall in rows(claims):
        out.append(f"{name:<{width}}  {verdict}  ({wall} s)")
        out.append(f"{'':<{width}}    measured: {measured}")
        out.append(f"{'':<{width}}    reference: {ref}   paper: {paper}")
    return "\n".join(out)


def summary(claims: dict[str, dict]) -> list[str]:
    """Plain-language reading of the table: what holds, what fails, how good the samples are."""
    ok = [n for n, c in claims.items() if c.get("passed")]
    bad = [n for n, c in claims.items() if not c.get("passed")]
    out = [
        f"**{len(ok)} of {len(claims)} claims meet their threshold**"
        + (f"; not met: {', '.join(bad)}." if bad else ".")
    ]
    gen = claims.get("generation")
    if gen:
        floor = gen.get("fid_lenet_train_vs_test")
        line = (
            f"Sample quality is a separate question from the exactness claims: the one-step "
            f"samples have FID (LeNet) {gen['fid_lenet_one_step']:.3g}"
        )
        if floor is not None:
            line += f", against {floor:.3g} between {gen['samples']} train and test images"
        line += (
            f"; the classifier's mean max-softmax is {gen['mean_max_prob_one_step']:.2f} on "
            f"samples and {gen['mean_max_prob_test']:.2f} on test images."
        )
        out += ["", line]
    return out


def deviations(cfg: FlowConfig, step: int) -> list[str]:
    """How this run differs from the paper's MNIST setup (read from its config)."""
    net = cfg.network
    out = [
        f"Invertible network: small CNN couplings ({net.blocks} blocks, {net.hidden} "
        "channels) instead of the authors' 4-block invertible U-Net (16 channels, dropout "
        "0.1), so that it trains on 2 CPU cores."
        if net.kind == "cpu"
        else f"Invertible network: the authors' U-Net layout, {net.blocks} blocks."
    ]
    k = mixture_size(cfg)
    if k:
        kind = ("components found without labels", "the classes")[cfg.conditional]
        out.append(
            f"Generator: a mixture of {k} exact linear generators (one B_k per component; "
            f"components: {kind}). Every exactness claim deals its rows over the components in "
            "turn and reads its worst component (per_component); generation draws each sample's "
            "component from the mixture weights. The figures show component 0."
        )
    out += [
        f"Operator A(t): rank {cfg.rank}, hypernetworks {cfg.lora_depth}x{cfg.lora_hidden} "
        f"({cfg.lora_activation}) on a {cfg.lora_emb}-d time embedding; the authors: rank 8, "
        "2x512 GELU on 128-d.",
        f"Training: {step} steps of batch {cfg.batch_size} (lr {cfg.lr:g}) against the "
        "authors' 201 epochs (about 47,000 steps of batch 256, lr 1e-4).",
    ]
    if resolve_perceptual(cfg.perceptual) != "lpips":
        out.append(
            f"Loss: the two x1 reconstruction terms use pixel {resolve_perceptual(cfg.perceptual)}"
            " instead of LPIPS (piq needs torchvision, which this project does not install)."
        )
    out += [
        "FID is computed on the 84-d features of our own MNIST LeNet (FID (LeNet)), not "
        "Inception: comparable within this project, not with Inception FIDs in papers.",
        "Perceptual distance of the inversion: LPIPS is unavailable without piq, so SSIM and "
        "a LeNet-feature distance stand in.",
        "Inversion uses B^-1 of the Euler T=100 matrix (an LU solve in float64); the authors "
        "use pinv of their T=6 'rk' matrix. Our B is square and full rank, so B^+ = B^-1.",
        "Samplers stop one step early, at t = 1 - 1/T, as the authors' code does (the velocity "
        "(A(t) z - z)/(1 - t) is singular at t = 1).",
        "Every claim is measured on the trained map alone: the post-hoc latent maps that "
        "`linearizer calibrate` fits after training (the calibration K and the latent "
        "transport, flow.calibration and flow.transport) are never applied here, whether the "
        "run holds them or not (sampler spec: maps none).",
        "The paper's numbers are second-hand (summaries of arXiv v1); the reference numbers are "
        "the reduced-scale reproduction quoted in issue 4. See "
        "../shared/research/paper-notes.md sections 2 and 7.",
    ]
    if cfg.data.dataset != "mnist":
        out.append(
            f"Dataset: {cfg.data.dataset}, not MNIST; FID (LeNet) and classifier statistics are "
            "meaningless on it (images are resized to 32x32 for the LeNet)."
        )
    return out


FIGURES = {
    "collapse.png": "one-step vs multi-step samples and their differences",
    "inversion.png": "test image -> inverted noise -> one-step reconstruction, and the error",
    "interpolation.png": "interpolation between two test images: noise space, induced space, "
    "pixels",
    "samples.png": "one-step samples at T=100 and T=1000 beside test images",
    "spectrum.png": "singular spectrum of B (Euler T=100 and T=1000, RK4, authors' rk)",
    "svd_directions.png": "top induced singular directions of the one-step generator",
    "training_curves.png": "loss terms and learning rate from metrics.jsonl",
}


TITLE = 'Reproduction of "Who Said Neural Networks Aren\'t Linear?" (one-step flow matching)'
HIDDEN = (
    "title",
    "conditioning",
    "paper",
    "reference",
    "measured",
    "threshold",
    "verdict",
    "how",
    "sets",
    "passed",
)


def claims_report(results: dict) -> str:
    """The ``REPORT.md`` of ``linearizer repro``: the claims table, then each claim's details,
    the deviations from the paper, the figures, commands, versions and wall times."""
    claims, opts = results["claims"], results["options"]
    cfg = FlowConfig.from_dict(results["config"])
    weights = weights_label("ema" if results.get("ema") else "model")
    run = (
        f"Run: `{results['run']}` (step {results['step']}, dataset {cfg.data.dataset}, "
        f"{weights} weights). Generated by `linearizer repro`; "
        f"total wall time {results['wall_s']:.0f} s"
    )
    if results.get("train_s"):
        run += f" (training {results['train_s']:.0f} s)"
    run += "."
    if results.get("run_seconds"):
        run += f" The run itself trained for {results['run_seconds']:.0f} s (its run.json)."
    sizes = (
        f"Sizes: {opts['n']} pairs/samples/images for the exactness checks (networks in "
        f"float64), {claims['generation']['samples']} samples per FID set, "
        f"{claims['invertibility']['images']} test images for invertibility"
        + (" (quick mode)" if opts["quick"] else "")
        + "."
    )
    figures = [
        f"**{Path(p).name}**: {FIGURES.get(Path(p).name, name)}\n\n![{name}]({p})"
        for name, p in results["figures"].items()
    ]
    walls = [f"- {k}: {v:.1f} s" for k, v in results["timings"].items()]
    return render_report(
        TITLE,
        run,
        section("Claims", markdown_table(COLUMNS, rows(claims)), sizes, summary(claims)),
        section("Thresholds", [f"- `{k}`: {v:g}" for k, v in THRESHOLDS.items()]),
        section("Details", *(_details(name, c) for name, c in claims.items())),
        section("Deviations from the paper", [f"- {d}" for d in deviations(cfg, results["step"])]),
        section("Figures", *figures),
        section("Commands", ["```", *results["commands"], "```"]),
        section("Versions", [f"- {k}: {v}" for k, v in results["environment"].items()]),
        section("Wall time", [*walls, f"- total: {results['wall_s']:.1f} s"]),
    )


def _details(name: str, c: dict) -> str:
    """One claim's verdict, rule, method and every other measured field."""
    bullets = [f"- verdict: **{c['verdict']}** (rule: {c['threshold']})"]
    if "how" in c:
        bullets.append(f"- how: {c['how']}")
    bullets += [f"- {key}: {_fmt(value)}" for key, value in c.items() if key not in HIDDEN]
    tables = []
    if "sets" in c:
        header = ["sample set", "FID (LeNet)", "KID (LeNet)", "mean max-softmax", "class histogram"]
        tables.append(markdown_table(header, [_set_row(n, s) for n, s in c["sets"].items()]))
    if "conditioning" in c:
        header = ["latents visited", "cond g_noise^-1", "cond g_data^-1", "eps32 x cond"]
        rows = [_cond_row(term, v) for term, v in c["conditioning"].items()]
        tables.append(markdown_table(header, rows))
    return section(f"{name}: {c['title']}", bullets, *tables, level=3)


VISITED = {
    "trained": "B g_noise(x) (sampling)",
    "additivity": "sums of latents",
    "a_pos": "a times latents, a > 0",
    "a_neg": "a times latents, a < 0",
}


def _cond_row(term: str, v: dict) -> list[str]:
    noise = _fmt(v["cond_noise"]) if v["cond_noise"] else "not visited"
    return [VISITED.get(term, term), noise, _fmt(v["cond_data"]), sci(v["eps32_x_cond"])]


def _fmt(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_fmt(v)}" for k, v in value.items())
    if isinstance(value, float):
        return f"{value:.4g}"
    if value is None:
        return "-"
    return str(value)
