"""The documentation's headline numbers, checked against the JSON they come from.

Each row of ``CHECKS`` names a document, a phrase as the document writes it with ``{}`` where
numbers stand, and for each number the JSON file, the key path and the format. The check
formats the JSON values into the phrase and requires the result in the document (whitespace,
line breaks and ``**`` emphasis normalised). A number that drifts from its JSON, or a phrase
reworded without this table, fails with the phrase it expected.

Key paths: ``a/b/0`` walks dicts and lists (``~`` stands for a ``/`` inside a key or a
filter's value); ``k=v``
keeps the list items whose ``k`` is ``v`` and ``k^=v`` those whose ``k`` starts with ``v``;
a key after a filter that kept several items maps over them; ``#mean`` averages a list;
``#passed`` / ``#count`` count the claims of a repro ``results.json`` that hold / exist;
``#all`` is the claim count when every claim holds. Claim counts always name the run's JSON.
Pure file reading: no model is loaded.
"""

from __future__ import annotations

import json
import re
import shutil
from functools import cache
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]

# JSON files, by short name
J = {
    "pre": "docs/flow/pretrained_eval_2026-12-04/results.json",
    "pre_old": "docs/flow/pretrained_eval_2026-12-03/results.json",
    "pre_rounding": "docs/flow/pretrained_eval_2026-12-04/fit-before-rounding/results.json",
    "controls": "docs/flow/controls/controls.json",
    "cond": "docs/conditional/pretrained_eval/results.json",
    "cond_old": "docs/conditional/pretrained_eval_2026-12-03/results.json",
    "cond25": "docs/conditional/cpu25_eval_2026-12-04/results.json",
    "cond25_old": "docs/conditional/cpu25_eval/results.json",
    "cond_exact": "docs/conditional/exactness/cond_exact.json",
    "cond_bench": "docs/benchmarks/conditional-2026-12-03/conditional.json",
    "ref05": "docs/flow/reference_2026-12-05/results.json",
    "ref04": "docs/flow/reference_2026-12-04/results.json",
    "ref03": "docs/flow/reference_2026-12-03_4000/results.json",
    "ref03wall": "docs/flow/reference_eval_2026-12-03/results.json",
    "repro": "docs/repro/results.json",
    "repro20": "docs/repro-blocks-noise/results.json",
    "repro10": "docs/repro-ten-components/results.json",
    "repro1": "docs/repro-one-generator/results.json",
    "repro_pre": "docs/repro-pretrained/results.json",
    "eqt": "docs/benchmarks/equal-time/evaluation.json",
    "probe": "docs/benchmarks/equal-time/probe.json",
    "fm_runs": "docs/benchmarks/equal-time/fm_runs.json",
    "select": "docs/benchmarks/equal-time/select.json",
    "eqt05": "docs/benchmarks/step-2026-12-05/equal-time/evaluation.json",
    "step05": "docs/benchmarks/step-2026-12-05/step_cpu.json",
    "paper05": "docs/benchmarks/step-2026-12-05/step_paper.json",
    "mixcpu": "docs/mixture/cpu_equal_time/evaluation.json",
    "mixrate": "docs/mixture/cpu_equal_time/step_rate.json",
    "mainjob": "docs/repro/evaluation/results.json",
    "mainjob20": "docs/repro-blocks-noise/evaluation/results.json",
    "mainjob10": "docs/repro-ten-components/evaluation/results.json",
    "k10s1": "docs/mixture/k20-2026-12-06/k10-s1/evaluation.json",
    "k20rate": "docs/mixture/k20-2026-12-06/step_rate.json",
    "k20eqt": "docs/mixture/k20-2026-12-06/equal_time/evaluation.json",
    "oddeqt": "docs/mixture/odd-mean-2026-12-07/equal_time/evaluation.json",
    "oddrate": "docs/mixture/odd-mean-2026-12-07/step_rate.json",
    "first_call": "docs/mixture/first_call-k10-2026-12-07.json",
    "first_call_k20": "docs/mixture/first_call-rows-2026-12-07.json",
    "first_call_basis": "docs/mixture/first_call.json",
    "first_call_cond": "docs/mixture/first_call-cond.json",
    "rows_route": "docs/mixture/rows_route.json",
    "repro_fast": "docs/repro-2026-12-08/results.json",
    "eval_fast": "docs/repro-2026-12-08/evaluation/results.json",
    "blocks": "docs/flow/stages-2026-12-08/linearity_blocks.json",
    "first_call_k20_b2b": "docs/mixture/first_call-batched-back-to-back.json",
    "first_call_k20_busy": "docs/mixture/first_call-k20-batched-2026-12-07.json",
    "first_call_memory": "docs/mixture/first_call_memory.json",
    "stages": "docs/flow/stages-2026-12-07/linearity_stages.json",
    "first_call_b": "docs/mixture/first_call_one_step.json",
    "first_call_old": "docs/mixture/first_call-2026-12-05.json",
    "odd_mix": "docs/flow/odd-noise-2026-12-05/mixture-s0/claims.json",
    "odd_mix_eval": "docs/flow/odd-noise-2026-12-05/mixture-s0/evaluation.json",
    "odd_one": "docs/flow/odd-noise-2026-12-05/one-generator-s0/claims.json",
    "odd_one_eval": "docs/flow/odd-noise-2026-12-05/one-generator-s0/evaluation.json",
    "odd_rate": "docs/flow/odd-noise-2026-12-05/step_rate.json",
    "shift0": "docs/flow/shift-noise-2026-12-06/mixture-s0/claims.json",
    "shift0_eval": "docs/flow/shift-noise-2026-12-06/mixture-s0/evaluation.json",
    "shift1": "docs/flow/shift-noise-2026-12-06/mixture-s1/claims.json",
    "shift1_eval": "docs/flow/shift-noise-2026-12-06/mixture-s1/evaluation.json",
    "oddmean0": "docs/flow/odd-mean-noise-2026-12-06/mixture-s0/claims.json",
    "oddmean0_eval": "docs/flow/odd-mean-noise-2026-12-06/mixture-s0/evaluation.json",
    "oddmean1": "docs/flow/odd-mean-noise-2026-12-06/mixture-s1/claims.json",
    "oddmean1_eval": "docs/flow/odd-mean-noise-2026-12-06/mixture-s1/evaluation.json",
    "net1": "docs/flow/odd-mean-noise-2026-12-06/network-s1/claims.json",
    "net1_eval": "docs/flow/odd-mean-noise-2026-12-06/network-s1/evaluation.json",
    "noise_mean": "docs/flow/odd-mean-noise-2026-12-06/noise_mean.json",
    "oddmean_eqt": "docs/flow/odd-mean-noise-2026-12-06/equal-time-s0/claims.json",
    "oddmean_eqt_eval": "docs/flow/odd-mean-noise-2026-12-06/equal-time-s0/evaluation.json",
    "oddmean_eqt1": "docs/flow/odd-mean-noise-2026-12-06/equal-time-s1/claims.json",
    "oddmean_eqt1_eval": "docs/flow/odd-mean-noise-2026-12-06/equal-time-s1/evaluation.json",
    "k20s0": "docs/mixture/k20-2026-12-06/s0/evaluation.json",
    "odddata_u": "docs/flow/odd-data-2026-12-07/uncentred/claims.json",
    "odddata_u_eval": "docs/flow/odd-data-2026-12-07/uncentred/evaluation.json",
    "odddata_u_spread": "docs/flow/odd-data-2026-12-07/uncentred/latent_spread.json",
    "odddata_c": "docs/flow/odd-data-2026-12-07/centred/claims.json",
    "odddata_c_eval": "docs/flow/odd-data-2026-12-07/centred/evaluation.json",
    "odddata_c_spread": "docs/flow/odd-data-2026-12-07/centred/latent_spread.json",
    "k20s1": "docs/mixture/k20-2026-12-06/s1/evaluation.json",
    "mnist": "src/linearizer/assets/flow_mnist.json",
    "mnist_cond": "src/linearizer/assets/flow_mnist_cond.json",
    "mix": "docs/mixture/pretrained_eval/results.json",
    "mix_k10": "docs/mixture/mnist-mix-k10/results.json",
    "abl_k20": "docs/mixture/ablation-k20/components_ablation.json",
    "mnist_mix": "src/linearizer/assets/flow_mnist_mix.json",
    "mix_t08": "docs/mixture/temperature-2026-12-07/tau-0.8/results.json",
    "mix_t09": "docs/mixture/temperature-2026-12-07/tau-0.9/results.json",
    "mix_t118": "docs/mixture/temperature-2026-12-07/tau-1.18/results.json",
    "mix20_t114": "docs/mixture/temperature-k20/tau-1.14/results.json",
    "mix20_t09": "docs/mixture/temperature-k20/tau-0.9/results.json",
    "mix20_cal": "docs/mixture/temperature-k20/calibration.json",
    "feat_pixels": "docs/mixture/features-2026-12-07/pixels/results.json",
    "feat_latent": "docs/mixture/features-2026-12-07/latent/results.json",
}

# key paths used often
M = "maps none"
OURS = "rows/model=ours/sampler=one-step euler, T = 1000, final predict, float64, "
FM = "rows/model=flow matching/sampler="
OURS05 = "rows/sampler=one-step euler, T = 1000, final predict, float64, "


def row(name: str, key: str) -> str:
    return f"rows/name={name}/{key}"


def eqt(sampler: str, key: str, seed: int | None = None) -> str:
    """An equal-time row of docs/benchmarks/equal-time/evaluation.json: one seed or the mean."""
    base = (
        f"{OURS}maps {sampler}"
        if sampler in ("none", "calibration", "transport")
        else (f"{FM}{sampler}")
    )
    return f"{base}/seed={seed}/{key}" if seed is not None else f"{base}/{key}/#mean"


def eqt05(maps: str, key: str, seed: int | None = None) -> str:
    base = f"{OURS05}maps {maps}"
    return f"{base}/seed={seed}/{key}" if seed is not None else f"{base}/{key}/#mean"


def v(name: str, path: str, fmt: str = ".1f") -> tuple[str, str, str]:
    return (name, path, fmt)


def first_calls(name: str, call: str) -> list[tuple[str, str, str]]:
    """``benchmarks/first_call.py``'s median seconds of one call: the mixture's, then the one
    generator's."""
    return [v(name, f"seconds/pretrained:mnist{m}/{call}") for m in ("-mix", "")]


def fid(name: str, row_name: str) -> list[tuple[str, str, str]]:
    """FID (LeNet) and FID (judge) of one evaluation row."""
    return [v(name, row(row_name, "fid_lenet")), v(name, row(row_name, "fid_judge"))]


def controls(row_name: str, key: str, fmt: str = ".1f") -> tuple[str, str, str]:
    return v("controls", f"rows/{row_name}/{key}/#mean", fmt)


def method_row(name: str, confidence: bool = False) -> list[tuple[str, str, str]]:
    """An evaluation's trained-map row: FID (LeNet), FID (judge), precision, recall and, with
    ``confidence``, the LeNet's mean confidence."""
    keys = [("fid_lenet", ".1f"), ("fid_judge", ".1f"), ("precision", ".3f"), ("recall", ".3f")]
    keys += [("confidence", ".3f")] if confidence else []
    return [v(name, row("method", k), f) for k, f in keys]


def against_fm10(name: str) -> list[tuple[str, str, str]]:
    """A preset's §3 means (JSON ``name``), then flow matching's at 10 Euler steps (FID (LeNet),
    FID (judge) each)."""
    return [
        v(name, eqt05("none", "fid_lenet")),
        v(name, eqt05("none", "fid_judge")),
        v("eqt", eqt("Euler, 10 steps", "fid_lenet")),
        v("eqt", eqt("Euler, 10 steps", "fid_judge")),
    ]


def eqt05_seeds(name: str) -> list[tuple[str, str, str]]:
    """A §3 row's seeds 0 / 1 and mean of FID (LeNet), FID (judge), precision and recall."""
    keys = (("fid_lenet", ".1f"), ("fid_judge", ".1f"), ("precision", ".3f"), ("recall", ".3f"))
    return [v(name, eqt05("none", key, seed), fmt) for key, fmt in keys for seed in (0, 1, None)]


def repro_linearity() -> list[tuple[str, str, str]]:
    """The main job's float32 linearity: sums, a > 0, a < 0."""
    keys = ("additivity_float32", "homogeneity_float32_a_pos", "homogeneity_float32_a_neg")
    return [v("repro", f"claims/linearity/{k}", "e1") for k in keys]


def mainjob_row() -> list[tuple[str, str, str]]:
    """The main job's trained-map row: FID (LeNet), FID (judge), precision, recall."""
    return method_row("mainjob10")


def odd_row(claims: str, evaluation: str) -> list[tuple[str, str, str]]:
    """A row of roundtrip.md §10: float32 linearity by term, float32 inversion, the claim
    count, and the trained map's FIDs."""
    lin = "claims/linearity/"
    return [
        v(claims, lin + "additivity_float32", "e1"),
        v(claims, lin + "homogeneity_float32_a_pos", "e1"),
        v(claims, lin + "homogeneity_float32_a_neg", "e1"),
        v(claims, "claims/inversion/psnr_db_float32"),
        v(claims, "claims/#passed", "d"),
        v(claims, "claims/#count", "d"),
        *fid(evaluation, "method"),
    ]


Check = tuple[str, str, list[tuple[str, str, str]]]

CHECKS: list[Check] = [
    (
        "docs/mixture.md",
        "| ten components | {} / {} (**{}**) | {} / {} (**{}**) |",
        [
            v("mixcpu", eqt05("none", "fid_lenet", 0)),
            v("mixcpu", eqt05("none", "fid_lenet", 1)),
            v("mixcpu", eqt05("none", "fid_lenet")),
            v("mixcpu", eqt05("none", "fid_judge", 0)),
            v("mixcpu", eqt05("none", "fid_judge", 1)),
            v("mixcpu", eqt05("none", "fid_judge")),
        ],
    ),
    (
        "docs/mixture.md",
        "one generator {} steps/s, ten components {}",
        [v("mixrate", "median/one generator", ".2f"), v("mixrate", "median/components=10", ".2f")],
    ),
    (
        "docs/quality.md",
        "scores {} / {} against {} / {} for one generator",
        [
            v("mixcpu", eqt05("none", "fid_lenet")),
            v("mixcpu", eqt05("none", "fid_judge")),
            v("eqt05", eqt05("none", "fid_lenet")),
            v("eqt05", eqt05("none", "fid_judge")),
        ],
    ),
    (
        "BENCHMARKS.md",
        "is ahead of flow matching's 4 Euler steps on both FIDs ({} / {} against {} / {})",
        [
            v("mixcpu", eqt05("none", "fid_lenet")),
            v("mixcpu", eqt05("none", "fid_judge")),
            v("eqt", eqt("Euler, 4 steps", "fid_lenet")),
            v("eqt", eqt("Euler, 4 steps", "fid_judge")),
        ],
    ),
    (
        "BENCHMARKS.md",
        "| ours, twenty components | one-step euler, T = 1000, final predict, float64, maps none "
        "| 2 | {} / {} (**{}**) | {} / {} (**{}**) | {} / {} (**{}**) | {} / {} (**{}**) |",
        eqt05_seeds("k20eqt"),
    ),
    (
        "BENCHMARKS.md",
        "Euler steps on both FIDs ({} / {} against {} / {} in the table above)",
        against_fm10("k20eqt"),
    ),
    (
        "BENCHMARKS.md",
        "two seeds) it reads {} / {}, ahead of flow matching's 10 Euler steps ({} / {})",
        against_fm10("k20eqt"),
    ),
    (
        "BENCHMARKS.md",
        "| ours, twenty components, odd noise side with a mean | one-step euler, T = 1000, final "
        "predict, float64, maps none | 2 | {} / {} (**{}**) | {} / {} (**{}**) | {} / {} (**{}**) "
        "| {} / {} (**{}**) |",
        eqt05_seeds("oddeqt"),
    ),
    (
        "BENCHMARKS.md",
        "Its step costs 1.26x the twenty-component row's ({} against {} steps/s",
        [v("oddrate", "median/cpu", ".2f"), v("oddrate", "median/blocks", ".2f")],
    ),
    (
        "BENCHMARKS.md",
        "ahead of its 10 Euler steps on both FIDs ({} / {} against {} / {})",
        against_fm10("oddeqt"),
    ),
    (
        "README.md",
        "the `cpu` preset since 2026-12-07, it scores {} / {} in 0.88 of that time",
        against_fm10("oddeqt")[:2],
    ),
    (
        "README.md",
        "in one process on this machine the preset made {} steps/s and the former network, whose "
        "noise side was the blocks alone, {}",
        [v("oddrate", "median/cpu", ".2f"), v("oddrate", "median/blocks", ".2f")],
    ),
    (
        "docs/quality.md",
        "twenty components score {} / {} in 0.88 of that time",
        against_fm10("oddeqt")[:2],
    ),
    (
        "docs/mixture.md",
        "alone scores {} / {} (mean {}) on FID (LeNet) and {} / {} (mean {}) on FID (judge),\n"
        "ahead of flow matching's 10 Euler steps ({} / {})",
        [
            *(
                v("oddeqt", eqt05("none", key, seed))
                for key in ("fid_lenet", "fid_judge")
                for seed in (0, 1, None)
            ),
            *against_fm10("oddeqt")[2:],
        ],
    ),
    (
        "CHANGELOG.md",
        "its trained map alone scores {} / {} (two seeds, 2,000\n  samples), ahead of flow "
        "matching's 10 Euler steps ({} / {})",
        against_fm10("oddeqt"),
    ),
    # the main job on the odd noise side with a mean (docs/repro)
    (
        "docs/flow/roundtrip.md",
        "Float32 linearity reads {} for sums, {} for a > 0 and {} for a < 0 (float64: {}), float32 "
        "inversion through B {} dB ({} dB in float64)",
        [
            *repro_linearity(),
            v("repro", "claims/linearity/max_rel_err_float64", "e1"),
            v("repro", "claims/inversion/psnr_db_float32"),
            v("repro", "claims/inversion/psnr_db"),
        ],
    ),
    (
        "docs/flow/roundtrip.md",
        "| `B g_noise(x)`, where sampling goes | not visited | {} | |",
        [v("repro", "claims/linearity/conditioning/trained/cond_data", "e1")],
    ),
    *(
        (
            "docs/flow/roundtrip.md",
            f"| {label} | {{}} | {{}} | {{}} |",
            [
                v("repro", f"claims/linearity/conditioning/{term}/cond_noise", "e1"),
                v("repro", f"claims/linearity/conditioning/{term}/cond_data", "e1"),
                v("repro", f"claims/linearity/{key}", "e1"),
            ],
        )
        for label, term, key in (
            ("sums of two latents", "additivity", "additivity_float32"),
            ("`a g(x)`, a > 0", "a_pos", "homogeneity_float32_a_pos"),
            ("`a g(x)`, a < 0", "a_neg", "homogeneity_float32_a_neg"),
        )
    ),
    (
        "docs/mixture.md",
        "float32 linearity {} for sums, {} for positive scalars and {} for negative ones, float32 "
        "inversion through B {} dB",
        [*repro_linearity(), v("repro", "claims/inversion/psnr_db_float32")],
    ),
    ("docs/mixture.md", "| **{}** | {} | {} | {} |", method_row("mainjob")),
    (
        "BENCHMARKS.md",
        "float32 linearity {} for sums, {} for positive scalars and {} for negative ones. Its "
        "trained map alone scores FID (LeNet) {} and FID (judge) {}",
        [*repro_linearity(), *fid("mainjob", "method")],
    ),
    (
        "CHANGELOG.md",
        "printed {} of {} claims (float32 linearity {} for sums, {} for positive scalars, {} for "
        "negative ones; float32 inversion through B {} dB)",
        [
            v("repro", "claims/#passed", "d"),
            v("repro", "claims/#count", "d"),
            *repro_linearity(),
            v("repro", "claims/inversion/psnr_db_float32"),
        ],
    ),
    ("CHANGELOG.md", "its run scores {} / {} with the trained map alone", fid("mainjob", "method")),
    (
        "README.md",
        "the trained map alone scores {} / {} with ten components (ahead of 4 Euler steps) and "
        "{} / {} with twenty",
        [
            v("mixcpu", eqt05("none", "fid_lenet")),
            v("mixcpu", eqt05("none", "fid_judge")),
            v("k20eqt", eqt05("none", "fid_lenet")),
            v("k20eqt", eqt05("none", "fid_judge")),
        ],
    ),
    (
        "docs/quality.md",
        "the trained map alone scores {} / {} with ten components and {} / {} with twenty",
        [
            v("mixcpu", eqt05("none", "fid_lenet")),
            v("mixcpu", eqt05("none", "fid_judge")),
            v("k20eqt", eqt05("none", "fid_lenet")),
            v("k20eqt", eqt05("none", "fid_judge")),
        ],
    ),
    (
        "docs/mixture.md",
        "score {} / {} (mean {}) on FID (LeNet) and {} / {} (mean {}) on FID (judge)",
        [
            v("k20eqt", eqt05("none", key, seed))
            for key in ("fid_lenet", "fid_judge")
            for seed in (0, 1, None)
        ],
    ),
    # README.md
    (
        "README.md",
        "FID (LeNet) {} and FID (judge) {} with the trained map alone",
        fid("pre", "method"),
    ),
    ("README.md", "brings it to {} / {}", fid("pre", "transport")),
    ("README.md", "FID (LeNet) {} and FID (judge) {} without guidance", fid("cond", "w=0")),
    ("README.md", "in ≥ {} % of samples", [v("cond", row("w=1", "lenet_accuracy_min"), "%")]),
    ("README.md", "(FID {} / {}: guidance costs diversity)", fid("cond", "w=1")),
    ("README.md", "took {} s on a 2-core AMD EPYC", [v("probe", "equal_seconds", ",.0f")]),
    ("README.md", "flow matching makes {} steps there", [v("probe", "fm_steps", ",d")]),
    (
        "README.md",
        "trained those {} steps on one {}",
        [v("fm_runs", "fm-lr0.001-s0/steps", ",d"), v("fm_runs", "fm-lr0.001-s0/device", "s")],
    ),
    (
        "README.md",
        "the trained map alone (FID (LeNet) {}, FID (judge) {})",
        [v("eqt", eqt("none", "fid_lenet")), v("eqt", eqt("none", "fid_judge"))],
    ),
    (
        "README.md",
        "loses from 4 ({} / {})",
        [
            v("eqt", eqt("Euler, 4 steps", "fid_lenet")),
            v("eqt", eqt("Euler, 4 steps", "fid_judge")),
        ],
    ),
    (
        "README.md",
        "one step ({} / {}) is level with 10 Euler steps ({} / {})",
        [
            v("eqt", eqt("transport", "fid_lenet")),
            v("eqt", eqt("transport", "fid_judge")),
            v("eqt", eqt("Euler, 10 steps", "fid_lenet")),
            v("eqt", eqt("Euler, 10 steps", "fid_judge")),
        ],
    ),
    (
        "README.md",
        "scores {} / {} alone and {} / {} with the maps",
        [
            v("eqt05", eqt05("none", "fid_lenet")),
            v("eqt05", eqt05("none", "fid_judge")),
            v("eqt05", eqt05("transport", "fid_lenet")),
            v("eqt05", eqt05("transport", "fid_judge")),
        ],
    ),
    (
        "README.md",
        "odd about\n  a learned mean, {} steps, run `{}`) printed **{} of {} claims hold**",
        [
            v("repro", "step", ",d"),
            v("repro", "run", "s"),
            v("repro", "claims/#passed", "d"),
            v("repro", "claims/#count", "d"),
        ],
    ),
    (
        "README.md",
        "inversion through B reads {} dB in float64 and {} dB with\n  float32 networks. Float32 "
        "linearity reads {} for sums, {} for positive scalars and\n  {} for negative ones "
        "(threshold 1e-4; float64: {}).",
        [
            v("repro", "claims/inversion/psnr_db"),
            v("repro", "claims/inversion/psnr_db_float32"),
            v("repro", "claims/linearity/additivity_float32", "e1"),
            v("repro", "claims/linearity/homogeneity_float32_a_pos", "e1"),
            v("repro", "claims/linearity/homogeneity_float32_a_neg", "e1"),
            v("repro", "claims/linearity/max_rel_err_float64", "e1"),
        ],
    ),
    (
        "README.md",
        "printed 7 of 8: negative scalars sent `g_noise⁻¹` to\n  latents training never visits, "
        "and float32 linearity read {} there",
        [v("repro20", "claims/linearity/homogeneity_float32_a_neg", "e1")],
    ),
    (
        "README.md",
        "The main job's trained map\n  alone scores FID (LeNet) {} and FID (judge) {} (10,000 "
        "samples",
        fid("mainjob", "method"),
    ),
    (
        "README.md",
        "The one-generator preset's run of 2026-12-05 met all {}, float32 linearity at {}",
        [v("repro1", "claims/#all", "d"), v("repro1", "claims/linearity/max_rel_err", "e1")],
    ),
    (
        "README.md",
        "On the shipped `pretrained:mnist`, {} of {} hold",
        [v("repro_pre", "claims/#passed", "d"), v("repro_pre", "claims/#count", "d")],
    ),
    # docs/quality.md
    ("docs/quality.md", "FID (LeNet) {} and FID (judge) {} at w = 0", fid("cond", "w=0")),
    ("docs/quality.md", "against {} and {} for the unconditional model", fid("pre", "method")),
    ("docs/quality.md", "(18,709 steps)", []),
    (
        "docs/quality.md",
        "| the trained map alone (the paper's method; the default) | {} / {} | {} / {} |",
        fid("pre", "method") + fid("pre_old", "method"),
    ),
    (
        "docs/quality.md",
        "| the authors' grid (T = 100, last interval skipped) | {} / {} | {} / {} |",
        fid("pre", "authors-grid") + fid("pre_old", "authors-grid"),
    ),
    (
        "docs/quality.md",
        "(`--maps calibration`) | {} / {} | {} / {} |",
        fid("pre", "calibration") + fid("pre_old", "calibration"),
    ),
    (
        "docs/quality.md",
        "(`--maps transport`) | {} / {} | {} / {} |",
        fid("pre", "transport") + fid("pre_old", "transport"),
    ),
    (
        "docs/quality.md",
        "the same maps scored {} / {} on the float16 weights",
        fid("pre_rounding", "transport"),
    ),
    (
        "docs/quality.md",
        "the default) | {} | {} | {} |",
        [
            controls("method", "fid_lenet"),
            controls("method", "fid_judge"),
            controls("method", "confidence", ".3f"),
        ],
    ),
    (
        "docs/quality.md",
        "(`--maps transport`) | {} | {} | {} |",
        [
            controls("transport", "fid_lenet"),
            controls("transport", "fid_judge"),
            controls("transport", "confidence", ".3f"),
        ],
    ),
    (
        "docs/quality.md",
        "trained map bypassed (control) | {} | {} | {} |",
        [
            controls("bypass", "fid_lenet"),
            controls("bypass", "fid_judge"),
            controls("bypass", "confidence", ".3f"),
        ],
    ),
    (
        "docs/quality.md",
        "one Gaussian fitted in its range ({})",
        [controls("gaussian-in-range", "fid_lenet")],
    ),
    ("docs/quality.md", "subspace scores {}", [controls("pca-transport", "fid_lenet")]),
    (
        "docs/quality.md",
        "scores {} with the trained map alone and {} with the maps"
        " (FID (LeNet); FID (judge) {} and {}",
        [
            v("ref05", row("method", "fid_lenet")),
            v("ref05", row("transport", "fid_lenet")),
            v("ref05", row("method", "fid_judge")),
            v("ref05", row("transport", "fid_judge")),
        ],
    ),
    (
        "docs/quality.md",
        "4,000 steps) scored {} and {} ({} and {}",
        [
            v("ref04", row("method", "fid_lenet")),
            v("ref04", row("transport", "fid_lenet")),
            v("ref04", row("method", "fid_judge")),
            v("ref04", row("transport", "fid_judge")),
        ],
    ),
    (
        "docs/quality.md",
        "the preset of 2026-12-03 scored {} and {} ({} and {}",
        [
            v("ref03", row("method", "fid_lenet")),
            v("ref03", row("transport", "fid_lenet")),
            v("ref03", row("method", "fid_judge")),
            v("ref03", row("transport", "fid_judge")),
        ],
    ),
    (
        "docs/quality.md",
        "{} steps, {} and {} ({} and {})",
        [
            v("ref03wall", "step", ",d"),
            v("ref03wall", row("method", "fid_lenet")),
            v("ref03wall", row("transport", "fid_lenet")),
            v("ref03wall", row("method", "fid_judge")),
            v("ref03wall", row("transport", "fid_judge")),
        ],
    ),
    (
        "docs/quality.md",
        "reads {} / {} against {} / {} with the trained map alone",
        [
            v("eqt05", eqt05("none", "fid_lenet")),
            v("eqt05", eqt05("none", "fid_judge")),
            v("eqt", eqt("none", "fid_lenet")),
            v("eqt", eqt("none", "fid_judge")),
        ],
    ),
    (
        "docs/quality.md",
        "trained map alone scores {} / {} (FID (LeNet) / FID (judge)),"
        " ahead of flow matching at 1 and 2 Euler steps and behind from 4 ({} / {})",
        [
            v("eqt", eqt("none", "fid_lenet")),
            v("eqt", eqt("none", "fid_judge")),
            v("eqt", eqt("Euler, 4 steps", "fid_lenet")),
            v("eqt", eqt("Euler, 4 steps", "fid_judge")),
        ],
    ),
    (
        "docs/quality.md",
        "K and the transport, {} / {}, level with its 10 steps ({} / {})",
        [
            v("eqt", eqt("transport", "fid_lenet")),
            v("eqt", eqt("transport", "fid_judge")),
            v("eqt", eqt("Euler, 10 steps", "fid_lenet")),
            v("eqt", eqt("Euler, 10 steps", "fid_judge")),
        ],
    ),
    (
        "docs/quality.md",
        "scores {} / {} alone and {} / {} with the maps",
        [
            v("eqt05", eqt05("none", "fid_lenet")),
            v("eqt05", eqt05("none", "fid_judge")),
            v("eqt05", eqt05("transport", "fid_lenet")),
            v("eqt05", eqt05("transport", "fid_judge")),
        ],
    ),
    (
        "docs/quality.md",
        "behind 100 on the LeNet ({}) and ahead on the judge ({})",
        [
            v("eqt", f"{FM}Euler, 100 steps/seed=0/fid_lenet"),
            v("eqt", f"{FM}Euler, 100 steps/seed=0/fid_judge"),
        ],
    ),
]


def _cond_row(w: str) -> list[tuple[str, str, str]]:
    """One row of conditional.md's pretrained table: now (before) FIDs, then the rest."""
    keys = ["precision", "recall"]
    acc = ["lenet_accuracy_mean", "lenet_accuracy_min", "judge_accuracy_mean", "judge_accuracy_min"]
    return (
        [v("cond", row(w, "fid_lenet")), v("cond_old", row(w, "fid_lenet"))]
        + [v("cond", row(w, "fid_judge")), v("cond_old", row(w, "fid_judge"))]
        + [v("cond", row(w, k), ".3f") for k in keys + acc]
    )


def _cond25_row(w: str) -> list[tuple[str, str, str]]:
    acc = ["lenet_accuracy_mean", "lenet_accuracy_min", "judge_accuracy_mean", "judge_accuracy_min"]
    return (
        [v("cond25", row(w, "fid_lenet")), v("cond25", row(w, "fid_judge"))]
        + [v("cond25", row(w, k), ".3f") for k in ["recall", *acc]]
        + [v("cond25_old", row(w, "fid_lenet")), v("cond25_old", row(w, "fid_judge"))]
        + [v("cond25_old", row(w, "lenet_accuracy_min"), ".3f")]
    )


CHECKS += (
    [
        (
            "docs/conditional.md",
            f"| {w} | {{}} ({{}}) | {{}} ({{}}) | {{}} | {{}} | {{}} / {{}} | {{}} / {{}} |",
            _cond_row(f"w={w}"),
        )
        for w in ("0", "0.5", "1", "2", "4")
    ]
    + [
        (
            "docs/conditional.md",
            f"| {w} | {{}} | {{}} | {{}} | {{}} / {{}} | {{}} / {{}} | {{}} / {{}} / {{}} |",
            _cond25_row(f"w={w}"),
        )
        for w in ("0", "1", "2")
    ]
    + [
        (
            "docs/conditional.md",
            "the trained map alone, scores FID (LeNet) {} and FID (judge) {}",
            fid("pre", "method"),
        ),
        (
            "docs/conditional.md",
            "transport, {} and {}. The conditional model",
            fid("pre", "transport"),
        ),
        (
            "docs/conditional.md",
            "met at w = 0 ({}) and w = 0.5 ({})",
            [v("cond", row("w=0", "fid_lenet")), v("cond", row("w=0.5", "fid_lenet"))],
        ),
        (
            "docs/conditional.md",
            "met at w = 1 (smallest {}, the 9s)",
            [v("cond", row("w=1", "lenet_accuracy_min"), ".3f")],
        ),
        (
            "docs/conditional.md",
            "FID (judge) {} and judge accuracy ≥ {} for every class",
            [
                v("cond", row("w=1", "fid_judge")),
                v("cond", row("w=1", "judge_accuracy_min"), ".3f"),
            ],
        ),
        ("docs/conditional.md", "5,000 steps in 29.5 minutes", []),
        (
            "docs/conditional.md",
            "(5,313 steps, 2026-12-03) scores {} / {} with the trained map alone",
            fid("ref03wall", "method"),
        ),
        ("docs/conditional.md", "K and the transport), with nothing", []),
        (
            "docs/conditional.md",
            "({} / {} with K and the transport)",
            fid("ref03wall", "transport"),
        ),
        (
            "docs/conditional.md",
            "the `cpu` preset's step makes {} steps/s",
            [v("step05", "results/cpu~ours@128/this/steps_per_s", ".2f")],
        ),
        (
            "docs/conditional.md",
            "whose unconditional step makes {}",
            [v("step05", "results/cpu~ours@128/fb819e8/steps_per_s", ".2f")],
        ),
    ]
    + [
        (
            "docs/conditional.md",
            f"| {m}, T = {t} | {c} | {w} | {{}} | {{}} dB |",
            [
                v(
                    "cond_exact",
                    f"one_step_vs_multi_step/method={m.lower()}/class={c}/max_abs_diff",
                    "e1",
                ),
                v(
                    "cond_exact",
                    f"one_step_vs_multi_step/method={m.lower()}/class={c}/agreement_db",
                    ".0f",
                ),
            ],
        )
        for m, t, c, w in [
            ("Euler", 1000, 3, 0),
            ("Euler", 1000, 7, 1),
            ("Euler", 1000, 9, 2),
            ("RK4", 100, 3, 0),
            ("RK4", 100, 7, 1),
            ("RK4", 100, 9, 2),
        ]
    ]
    + [
        (
            "docs/conditional.md",
            "| ours, one step | 0 | 2 | {} | {} | {} | {} |",
            [
                v("cond_bench", "rows/guidance=0.0/model^=ours (/ms_per_image", ".2f"),
                v("cond_bench", "rows/guidance=0.0/model^=ours (/fid_lenet"),
                v("cond_bench", "rows/guidance=0.0/model^=ours (/fid_judge"),
                v("cond_bench", "rows/guidance=0.0/model^=ours (/lenet_accuracy_min", ".3f"),
            ],
        ),
        (
            "docs/conditional.md",
            "| flow matching, Euler 4 steps | 0 | 4 | {} | {} | {} | {} |",
            [
                v("cond_bench", "rows/guidance=0.0/sampler=Euler, 4 steps/ms_per_image"),
                v("cond_bench", "rows/guidance=0.0/sampler=Euler, 4 steps/fid_lenet"),
                v("cond_bench", "rows/guidance=0.0/sampler=Euler, 4 steps/fid_judge"),
                v(
                    "cond_bench",
                    "rows/guidance=0.0/sampler=Euler, 4 steps/lenet_accuracy_min",
                    ".3f",
                ),
            ],
        ),
    ]
)


def _eqt_table_row(model: str, sampler: str, label: str) -> Check:
    """One row of BENCHMARKS §3's two-seed table: seed 0 / seed 1 (**mean**) per column."""
    keys = [
        ("fid_lenet", ".1f"),
        ("fid_judge", ".1f"),
        ("precision", ".3f"),
        ("recall", ".3f"),
        ("confidence", ".3f"),
        ("ms_per_image", ".2f"),
    ]
    values = []
    for key, fmt in keys:
        for seed in (0, 1, None):
            values.append(v("eqt", eqt(sampler, key, seed), fmt))
    cells = " | ".join(["{} / {} ({})"] * len(keys))
    return (
        "BENCHMARKS.md",
        f"| {model} | {label} | 2 / 2 | 0 / 1 | {cells} |"
        if model == "ours"
        else f"| {model} | {label} | {sampler.split(', ')[1].split()[0]} / "
        f"{sampler.split(', ')[1].split()[0]} | 0 / 1 | {cells} |",
        values,
    )


def _eqt05_cell(maps: str, label: str) -> Check:
    values = [v("eqt05", eqt05(maps, "fid_lenet", s)) for s in (0, 1, None)]
    values += [v("eqt05", eqt05(maps, "fid_judge", s)) for s in (0, 1, None)]
    values += [v("eqt", eqt(maps, "fid_lenet", s)) for s in (0, 1, None)]
    values += [v("eqt", eqt(maps, "fid_judge", s)) for s in (0, 1, None)]
    pair = "{} / {} ({}); judge {} / {} ({})"
    return ("BENCHMARKS.md", f"| {label} | {pair} | {pair} |", values)


# pretrained:mnist-mix, the trained map alone, and the temperatures tried on it
_MIX = "one-step Euler, T = 1000, final predict, float64, τ = 1"
CHECKS += [
    (
        "docs/mixture.md",
        f"(20 components, 2026-12-07) | {_MIX} | {{}} | {{}} | {{}} | {{}} |",
        method_row("mix"),
    ),
    (
        "docs/mixture.md",
        f"(5,000 steps on one thread, 2026-12-05) | {_MIX} | {{}} | {{}} | {{}} | {{}} |",
        method_row("mix_k10"),
    ),
    (
        "docs/mixture.md",
        "together took it from {} / {} to {} / {};",
        fid("mix_k10", "method") + fid("mix", "method"),
    ),
    (
        "docs/mixture.md",
        "(the shipped model's, seed 0) puts {} % of the images",
        [v("abl_k20", "rows/features=pixels/purity", "%0")],
    ),
    (
        "docs/mixture.md",
        "level with the class mixture on the judge ({} against 15.9)",
        [v("mix", row("method", "fid_judge"))],
    ),
    ("README.md", "and {} / {} for the ten-component model it replaces.", fid("mix_k10", "method")),
    (
        "docs/quality.md",
        "and {} and {} for the ten-component model it replaced on 2026-12-07",
        fid("mix_k10", "method"),
    ),
    (
        "CHANGELOG.md",
        "the trained map alone scores {} / {} against {} / {} for the ten components of 2026-12-05",
        fid("mix", "method") + fid("mix_k10", "method"),
    ),
    ("docs/mixture.md", "(FID (LeNet) {} against 84.2)", [v("mix", row("method", "fid_lenet"))]),
    (
        "README.md",
        "scores FID (LeNet) {} and FID (judge) {} with the trained map alone (one-step",
        fid("mix", "method"),
    ),
    (
        "docs/quality.md",
        "it scores FID (LeNet) {} and FID (judge) {}, against 84.2",
        fid("mix", "method"),
    ),
    ("CHANGELOG.md", "FID (LeNet) / FID (judge) {} / {} (10,000 samples,", fid("mix", "method")),
    (
        "docs/flow.md",
        "| **{}** ([mixture.md](mixture.md)) | {} / {} |",
        [method_row("mix")[i] for i in (0, 2, 3)],
    ),
    (
        "docs/mixture.md",
        "scores {} / {} against {} / {} at τ = 1",
        fid("mix_t118", "method") + fid("mix_k10", "method"),
    ),
    (
        "docs/mixture.md",
        "τ = 0.9 and 0.8 score {} / {} and {} / {}",
        fid("mix_t09", "method") + fid("mix_t08", "method"),
    ),
    (
        "docs/mixture.md",
        "the rule picks τ = {} (2,000 samples against the first 2,000 training images' pixel "
        "spread {};",
        [v("mix20_cal", "tau", ".2f"), v("mix20_cal", "target_pixel_spread", ".3f")],
    ),
    (
        "docs/mixture.md",
        "which scores {} / {} against {} / {} at τ = 1, and τ = 0.9 scores {} / {}",
        fid("mix20_t114", "method") + fid("mix", "method") + fid("mix20_t09", "method"),
    ),
    (
        "CHANGELOG.md",
        "At the temperature rule's τ = {} and at τ = 0.9 the twenty components score {} / {} and "
        "{} / {}, so τ = 1 stays",
        [v("mix20_cal", "tau", ".2f")] + fid("mix20_t114", "method") + fid("mix20_t09", "method"),
    ),
    ("docs/mixture.md", "| pixels | {} | {} | {} | {} |", method_row("feat_pixels")),
    ("docs/mixture.md", "| latent | {} | {} | {} | {} |", method_row("feat_latent")),
]

CHECKS += (
    [
        _eqt_table_row("flow matching", "Euler, 1 step", "Euler, 1 step"),
        _eqt_table_row("flow matching", "Euler, 2 steps", "Euler, 2 steps"),
        _eqt_table_row("flow matching", "Euler, 4 steps", "Euler, 4 steps"),
        _eqt_table_row("flow matching", "Euler, 10 steps", "Euler, 10 steps"),
        _eqt_table_row(
            "ours", "none", "one-step euler, T = 1000, final predict, float64, maps none"
        ),
        _eqt_table_row(
            "ours",
            "calibration",
            "one-step euler, T = 1000, final predict, float64, maps calibration",
        ),
        _eqt_table_row(
            "ours", "transport", "one-step euler, T = 1000, final predict, float64, maps transport"
        ),
        (
            "BENCHMARKS.md",
            "| flow matching | Euler, 100 steps | 100 | 0 | {} | {} | {} | {} | {} | {} |",
            [
                v("eqt", f"{FM}Euler, 100 steps/fid_lenet"),
                v("eqt", f"{FM}Euler, 100 steps/fid_judge"),
                v("eqt", f"{FM}Euler, 100 steps/precision", ".3f"),
                v("eqt", f"{FM}Euler, 100 steps/recall", ".3f"),
                v("eqt", f"{FM}Euler, 100 steps/confidence", ".3f"),
                v("eqt", f"{FM}Euler, 100 steps/ms_per_image", ".2f"),
            ],
        ),
        _eqt05_cell(
            "none", "**trained map alone** (one-step Euler, T = 1000, final predict, float64)"
        ),
        _eqt05_cell("calibration", "with the post-hoc K"),
        _eqt05_cell("transport", "with the post-hoc K and transport"),
        (
            "BENCHMARKS.md",
            "our `cpu` preset at {} steps/s, flow matching at {}",
            [v("probe", "ours_steps_per_s", ".2f"), v("probe", "fm_steps_per_s", ".2f")],
        ),
        (
            "BENCHMARKS.md",
            "post-hoc fit ({} % of the reference run's time) take {} s,"
            " in which flow matching makes {} steps",
            [
                v("probe", "fit_share", "%1"),
                v("probe", "equal_seconds", ",.0f"),
                v("probe", "fm_steps", ",d"),
            ],
        ),
        (
            "BENCHMARKS.md",
            "samples ({} against {}, [select.json]",
            [v("select", "scores/fm-lr0.001-s0"), v("select", "scores/fm-lr0.002-s0")],
        ),
        (
            "BENCHMARKS.md",
            "runs (two rates, two seeds) trained at the fixed {} steps on one {}",
            [
                v("fm_runs", "fm-lr0.002-s1/steps", ",d"),
                v("fm_runs", "fm-lr0.002-s1/device", "H200"),
            ],
        ),
        (
            "BENCHMARKS.md",
            "| `cpu` preset, batch 128 | this version | {} | {} | {} | {} | {} | {} |",
            [
                v("step05", "results/cpu~ours@128/this/steps_per_s", ".2f"),
                v("step05", "results/cpu~ours@128/this/samples_per_s", ".0f"),
                v("step05", "results/cpu~ours@128/this/gflop_per_step", ".1f"),
                v("step05", "results/cpu~ours@128/this/gflops", ".1f"),
                v("step05", "results/cpu~ours@128/this/percent_of_sgemm", ".1f"),
                v("step05", "results/cpu~ours@128/this/peak_mib", ".0f"),
            ],
        ),
        (
            "BENCHMARKS.md",
            "| | fb819e8 | {} | {} | {} | {} | {} | {} |",
            [
                v("step05", "results/cpu~ours@128/fb819e8/steps_per_s", ".2f"),
                v("step05", "results/cpu~ours@128/fb819e8/samples_per_s", ".0f"),
                v("step05", "results/cpu~ours@128/fb819e8/gflop_per_step", ".1f"),
                v("step05", "results/cpu~ours@128/fb819e8/gflops", ".1f"),
                v("step05", "results/cpu~ours@128/fb819e8/percent_of_sgemm", ".1f"),
                v("step05", "results/cpu~ours@128/fb819e8/peak_mib", ".0f"),
            ],
        ),
        (
            "BENCHMARKS.md",
            "| paper architecture, batch 32 | this version | {} | {} | {} | {} | {} |",
            [
                v("paper05", "results/paper~ours@32/this/steps_per_s", ".2f"),
                v("paper05", "results/paper~ours@32/this/samples_per_s", ".0f"),
                v("paper05", "results/paper~ours@32/this/gflop_per_step", ".1f"),
                v("paper05", "results/paper~ours@32/this/gflops", ".1f"),
                v("paper05", "results/paper~ours@32/this/percent_of_sgemm", ".1f"),
            ],
        ),
        (
            "BENCHMARKS.md",
            "| | the authors' algorithms | {} | {} | {} | {} | {} |",
            [
                v("paper05", "results/paper~reference@32/this/steps_per_s", ".2f"),
                v("paper05", "results/paper~reference@32/this/samples_per_s", ".0f"),
                v("paper05", "results/paper~reference@32/this/gflop_per_step", ".1f"),
                v("paper05", "results/paper~reference@32/this/gflops", ".1f"),
                v("paper05", "results/paper~reference@32/this/percent_of_sgemm", ".1f"),
            ],
        ),
        (
            "BENCHMARKS.md",
            "the new reference run meets all {} repro claims",
            [v("repro1", "claims/#all", "d")],
        ),
        (
            "BENCHMARKS.md",
            "peak resident memory 3.1 GiB, {} of {} claims",
            [v("repro1", "claims/#passed", "d"), v("repro1", "claims/#count", "d")],
        ),
        (
            "BENCHMARKS.md",
            "float32 linearity, which the former preset missed, reads {}",
            [v("repro1", "claims/linearity/max_rel_err", "e1")],
        ),
        (
            "BENCHMARKS.md",
            "rounding ({} to {} dB, measured on `pretrained:mnist-cond`",
            [
                v("cond_exact", "one_step_vs_multi_step/agreement_db/#min", ".0f"),
                v("cond_exact", "one_step_vs_multi_step/agreement_db/#max", ".0f"),
            ],
        ),
    ]
    + [
        (
            "BENCHMARKS.md",
            f"| ours | one step (B) | {g} | 2 | **{{}}** | {{}} | {{}}"
            " | {} / {} | {} / {} |",
            [
                v("cond_bench", f"rows/guidance={g}.0/model^=ours (/{k}", f)
                for k, f in [
                    ("ms_per_image", ".2f"),
                    ("fid_lenet", ".1f"),
                    ("fid_judge", ".1f"),
                    ("lenet_accuracy_mean", ".3f"),
                    ("lenet_accuracy_min", ".3f"),
                    ("judge_accuracy_mean", ".3f"),
                    ("judge_accuracy_min", ".3f"),
                ]
            ],
        )
        for g in (0, 1)
    ]
    + [
        # docs/flow.md: its claim counts, each against the run it names
        (
            "docs/flow.md",
            "from this run: {} of {} claims",
            [v("repro1", "claims/#passed", "d"), v("repro1", "claims/#count", "d")],
        ),
        (
            "docs/flow.md",
            "All {} claims hold on the 2026-12-05 run",
            [v("repro1", "claims/#all", "d")],
        ),
        (
            "docs/flow.md",
            "regenerated 2026-12-04) {} of {} claims hold",
            [v("repro_pre", "claims/#passed", "d"), v("repro_pre", "claims/#count", "d")],
        ),
    ]
    + [
        # docs/flow.md: each reference run's table, FID (LeNet) / FID (judge) per run
        (
            "docs/flow.md",
            f"| {label} | {{}} / {{}} | {{}} / {{}} |",
            fid(left, name) + fid(right, name),
        )
        for left, right in (("ref05", "ref04"), ("ref04", "ref03"), ("ref03", "ref03wall"))
        for label, name in (
            ("trained map alone: T = 1000, final predict (default)", "method"),
            ("authors' grid: T = 100, final skip", "authors-grid"),
            ("with the post-hoc K", "calibration"),
            ("with the post-hoc K and transport", "transport"),
        )
    ]
    + [
        (
            "docs/flow.md",
            "The trained map alone: precision {}, recall {}, confidence {}, rarest class {} %.)",
            [
                v(run, row("method", "precision"), ".3f"),
                v(run, row("method", "recall"), ".3f"),
                v(run, row("method", "confidence"), ".3f"),
                v(run, row("method", "min_class_share"), "%"),
            ],
        )
        for run in ("ref05", "ref04")
    ]
    + [
        # CHANGELOG.md: the Unreleased section states each current number once
        (
            "CHANGELOG.md",
            "FID (LeNet) / FID (judge) {} / {} without guidance,"
            " {} / {} at w = 0.5 and {} / {} at w = 1",
            fid("cond", "w=0") + fid("cond", "w=0.5") + fid("cond", "w=1"),
        ),
        (
            "CHANGELOG.md",
            "trained map alone scores FID (LeNet) {} and FID (judge) {} against {} and {}",
            [
                v("eqt05", eqt05("none", "fid_lenet")),
                v("eqt05", eqt05("none", "fid_judge")),
                v("eqt", eqt("none", "fid_lenet")),
                v("eqt", eqt("none", "fid_judge")),
            ],
        ),
        (
            "CHANGELOG.md",
            "the post-hoc K and transport {} and {} against {} and {}",
            [
                v("eqt05", eqt05("transport", "fid_lenet")),
                v("eqt05", eqt05("transport", "fid_judge")),
                v("eqt", eqt("transport", "fid_lenet")),
                v("eqt", eqt("transport", "fid_judge")),
            ],
        ),
        (
            "CHANGELOG.md",
            "{} / {} with the trained map alone, {} / {} with the maps,"
            " and all {} of the paper's claims hold, float32 linearity at {}",
            fid("ref05", "method")
            + fid("ref05", "transport")
            + [v("repro1", "claims/#all", "d"), v("repro1", "claims/linearity/max_rel_err", "e1")],
        ),
        (
            "CHANGELOG.md",
            "({} against {})",
            [
                v("step05", "results/cpu~ours@128/this/steps_per_s", ".2f"),
                v("step05", "results/cpu~ours@128/fb819e8/steps_per_s", ".2f"),
            ],
        ),
        (
            "CHANGELOG.md",
            "{} / {} without guidance and {} / {} at w = 1 (10,000 samples)",
            fid("cond25", "w=0") + fid("cond25", "w=1"),
        ),
        (
            "CHANGELOG.md",
            "10,000 samples: {} / {}; with K and the transport {} / {}",
            fid("pre", "method") + fid("pre", "transport"),
        ),
        (
            "CHANGELOG.md",
            "{} of its {} repro claims hold",
            [v("repro_pre", "claims/#passed", "d"), v("repro_pre", "claims/#count", "d")],
        ),
        # the mixture's main job and its first call
        (
            "CHANGELOG.md",
            "printed {} of {} claims: float32 linearity reads {} for positive scalars and {} for"
            " negative ones",
            [
                v("repro10", "claims/#passed", "d"),
                v("repro10", "claims/#count", "d"),
                v("repro10", "claims/linearity/homogeneity_float32_a_pos", "e1"),
                v("repro10", "claims/linearity/homogeneity_float32_a_neg", "e1"),
            ],
        ),
        (
            "CHANGELOG.md",
            "Its run scores FID (LeNet) / FID (judge) {} / {}",
            fid("mainjob10", "method"),
        ),
        ("docs/mixture.md", "| **{}** | {} | {} | {} |", mainjob_row()),
        ("docs/quality.md", "seed 0, 10,000 samples) scores {} / {}", fid("mainjob10", "method")),
        ("docs/quality.md", "the main job's run scored {} / {}", fid("mainjob20", "method")),
        ("docs/quality.md", "the main job's run scores {} / {}", fid("mainjob", "method")),
        # docs/flow/roundtrip.md §13: an odd data side against the main job, seed 0
        (
            "CHANGELOG.md",
            "float32 inversion {} dB, but the trained map alone scores FID (LeNet) / FID (judge) "
            "{} / {} against {} / {}",
            [
                v("odddata_c", "claims/inversion/psnr_db_float32"),
                *fid("odddata_c_eval", "method"),
                *fid("mainjob", "method"),
            ],
        ),
        (
            "docs/flow/roundtrip.md",
            "| the main job (no odd data side) | {} / {} / {} | {} dB | {} of {} | **{} / {}** | "
            "{} / {} |",
            [*odd_row("repro", "mainjob"), *method_row("mainjob")[2:]],
        ),
        (
            "docs/flow/roundtrip.md",
            "| odd data side about pixel 1/2 | {} / {} / {} | {} dB | {} of {} | {} / {} | "
            "{} / {} |",
            [*odd_row("odddata_u", "odddata_u_eval"), *method_row("odddata_u_eval")[2:]],
        ),
        (
            "docs/flow/roundtrip.md",
            "| odd data side about the mean image | **{} / {} / {}** | **{} dB** | {} of {} | "
            "{} / {} | {} / {} |",
            [*odd_row("odddata_c", "odddata_c_eval"), *method_row("odddata_c_eval")[2:]],
        ),
        (
            "docs/flow/roundtrip.md",
            "(the norm of their mean {} against a median distance of {} from it; "
            "{} against {} for the main job)",
            [
                v("odddata_u_spread", "rows/run=runs~odd-data-s0/data_latent_mean_norm"),
                v("odddata_u_spread", "rows/run=runs~odd-data-s0/data_latent_spread"),
                v("odddata_u_spread", "rows/run=runs~repro-cpu~run/data_latent_mean_norm"),
                v("odddata_u_spread", "rows/run=runs~repro-cpu~run/data_latent_spread"),
            ],
        ),
        # docs/flow/roundtrip.md §10: the odd noise side against the main job, one seed each
        (
            "docs/flow/roundtrip.md",
            "over the noise rows: {} against {} steps/s ({}x)",
            [
                v("odd_rate", "median/cpu, odd noise side", ".2f"),
                v("odd_rate", "median/cpu", ".2f"),
                v("odd_rate", "ratio_to_first/cpu, odd noise side", ".2f"),
            ],
        ),
        (
            "docs/flow/roundtrip.md",
            "| ten components, odd noise side | {} / {} / {} | {} dB | {} of {} | **{} / {}** |",
            odd_row("odd_mix", "odd_mix_eval"),
        ),
        (
            "docs/flow/roundtrip.md",
            "| one generator, odd noise side | {} / {} / {} | {} dB | {} of {} | {} / {} |",
            odd_row("odd_one", "odd_one_eval"),
        ),
        (
            "docs/flow/roundtrip.md",
            "| ten components (the main job) | {} / {} / {} | {} dB | {} of {} | {} / {} |",
            odd_row("repro10", "mainjob10"),
        ),
        # docs/mixture.md: twenty components against the main job's ten, seed 0
        (
            "docs/mixture.md",
            "| twenty components, seed 0 | **{}** | {} | {} | {} | {} |",
            method_row("k20s0", confidence=True),
        ),
        (
            "docs/mixture.md",
            "| ten components (the main job), seed 0 | {} | {} | {} | {} | {} |",
            method_row("mainjob10", confidence=True),
        ),
        (
            "docs/mixture.md",
            "| twenty components, seed 1 | {} | {} | {} | {} | {} |",
            method_row("k20s1", confidence=True),
        ),
        (
            "docs/mixture.md",
            "| ten components, seed 1 | {} | {} | {} | {} | {} |",
            method_row("k10s1", confidence=True),
        ),
        (
            "docs/mixture.md",
            "{} steps/s with ten components and {} with twenty",
            [v("k20rate", "median/cpu", ".2f"), v("k20rate", "median/k20", ".2f")],
        ),
        ("docs/mixture.md", "| **{}** | {} | {} | {} |", method_row("mainjob20")),
        (
            "docs/mixture.md",
            "Float32 linearity reads {} for positive scalars and {} for negative ones (threshold"
            " 1e-4; {} with ten components)",
            [
                v("repro20", "claims/linearity/homogeneity_float32_a_pos", "e1"),
                v("repro20", "claims/linearity/homogeneity_float32_a_neg", "e1"),
                v("repro10", "claims/linearity/homogeneity_float32_a_neg", "e1"),
            ],
        ),
        # docs/flow/roundtrip.md §11: the shift noise side, two seeds
        (
            "docs/flow/roundtrip.md",
            "| noise side a shift, seed 0 | {} / {} / {} | {} dB | {} of {} | {} / {} |",
            odd_row("shift0", "shift0_eval"),
        ),
        (
            "docs/flow/roundtrip.md",
            "| noise side a shift, seed 1 | {} / {} / {} | {} dB | {} of {} | {} / {} |",
            odd_row("shift1", "shift1_eval"),
        ),
        (
            "CHANGELOG.md",
            "twenty-component preset's trained map alone scores {} / {}, ahead of flow matching's "
            "10 Euler steps ({} / {})",
            against_fm10("k20eqt"),
        ),
        # docs/flow/roundtrip.md §12: the odd noise side with a mean, two seeds per side
        (
            "docs/flow/roundtrip.md",
            "| odd noise side with a mean, 5,600 steps, seed 0 | {} / {} / {} | {} dB "
            "| {} of {} | {} / {} | {} / {} |",
            [
                *odd_row("oddmean_eqt", "oddmean_eqt_eval"),
                v("oddmean_eqt_eval", row("method", "precision"), ".3f"),
                v("oddmean_eqt_eval", row("method", "recall"), ".3f"),
            ],
        ),
        (
            "docs/flow/roundtrip.md",
            "| odd noise side with a mean, 5,600 steps, seed 1 | {} / {} / {} | {} dB "
            "| {} of {} | {} / {} | {} / {} |",
            [
                *odd_row("oddmean_eqt1", "oddmean_eqt1_eval"),
                v("oddmean_eqt1_eval", row("method", "precision"), ".3f"),
                v("oddmean_eqt1_eval", row("method", "recall"), ".3f"),
            ],
        ),
        (
            "CHANGELOG.md",
            "linearity for negative scalars {} and {}, against {} and {} with the blocks; float32 "
            "inversion {} and {} dB) at FID (LeNet) {} and {} against {} and {} for",
            [
                v("oddmean0", "claims/linearity/homogeneity_float32_a_neg", "e1"),
                v("oddmean1", "claims/linearity/homogeneity_float32_a_neg", "e1"),
                v("repro20", "claims/linearity/homogeneity_float32_a_neg", "e1"),
                v("net1", "claims/linearity/homogeneity_float32_a_neg", "e1"),
                v("oddmean0", "claims/inversion/psnr_db_float32"),
                v("oddmean1", "claims/inversion/psnr_db_float32"),
                v("oddmean0_eval", row("method", "fid_lenet")),
                v("oddmean1_eval", row("method", "fid_lenet")),
                v("mainjob20", row("method", "fid_lenet")),
                v("net1_eval", row("method", "fid_lenet")),
            ],
        ),
        (
            "docs/flow/roundtrip.md",
            "| noise side: the blocks (the main job), seed 0 | {} / {} / {} | {} dB | {} of {} "
            "| {} / {} |",
            odd_row("repro20", "mainjob20"),
        ),
        (
            "docs/flow/roundtrip.md",
            "| noise side: the blocks, seed 1 | {} / {} / {} | {} dB | {} of {} | {} / {} |",
            odd_row("net1", "net1_eval"),
        ),
        (
            "docs/flow/roundtrip.md",
            "| odd noise side with a mean, seed 0 | {} / {} / {} | {} dB | {} of {} | {} / {} |",
            odd_row("oddmean0", "oddmean0_eval"),
        ),
        (
            "docs/flow/roundtrip.md",
            "| odd noise side with a mean, seed 1 | {} / {} / {} | {} dB | {} of {} | {} / {} |",
            odd_row("oddmean1", "oddmean1_eval"),
        ),
        (
            "docs/flow/roundtrip.md",
            "`|mu|` is {} % and {} % of the median `|h(x0)|` on the two seeds, so the largest "
            "offset a scalar in [−2, 2] adds, `3 |mu|`, is {} % and {} % of it",
            [
                v("noise_mean", "rows/run=runs~oddmean-s0/mu_over_h", "%"),
                v("noise_mean", "rows/run=runs~oddmean-s1/mu_over_h", "%"),
                v("noise_mean", "rows/run=runs~oddmean-s0/largest_offset_over_h", "%0"),
                v("noise_mean", "rows/run=runs~oddmean-s1/largest_offset_over_h", "%0"),
            ],
        ),
        (
            "docs/flow/roundtrip.md",
            "FID (LeNet) {} and {} (mean 51.4) against {} and {} (mean 52.0) for the blocks",
            [
                v("oddmean0_eval", row("method", "fid_lenet")),
                v("oddmean1_eval", row("method", "fid_lenet")),
                v("mainjob20", row("method", "fid_lenet")),
                v("net1_eval", row("method", "fid_lenet")),
            ],
        ),
        (
            "docs/mixture.md",
            "(float32 linearity {} and {} at worst on two seeds, float32 inversion {} and {} dB,",
            [
                v("shift0", "claims/linearity/max_rel_err", "e1"),
                v("shift1", "claims/linearity/max_rel_err", "e1"),
                v("shift0", "claims/inversion/psnr_db_float32"),
                v("shift1", "claims/inversion/psnr_db_float32"),
            ],
        ),
        (
            "docs/mixture.md",
            "FID (LeNet) {} and {} against {} for the main job's seed",
            [
                v("shift0_eval", row("method", "fid_lenet")),
                v("shift1_eval", row("method", "fid_lenet")),
                v("mainjob10", row("method", "fid_lenet")),
            ],
        ),
        (
            "CHANGELOG.md",
            "(float32 linearity at worst {} and {}, now the same for either sign of a; float32 "
            "inversion {} and {} dB), but score FID (LeNet) {} and {} against {} for",
            [
                v("shift0", "claims/linearity/max_rel_err", "e1"),
                v("shift1", "claims/linearity/max_rel_err", "e1"),
                v("shift0", "claims/inversion/psnr_db_float32"),
                v("shift1", "claims/inversion/psnr_db_float32"),
                v("shift0_eval", row("method", "fid_lenet")),
                v("shift1_eval", row("method", "fid_lenet")),
                v("mainjob10", row("method", "fid_lenet")),
            ],
        ),
        (
            "CHANGELOG.md",
            "the first call on a fresh cache takes {} s against {} s ({}x;",
            [
                v("first_call_old", "seconds/pretrained:mnist-mix/first"),
                v("first_call_old", "seconds/pretrained:mnist/first"),
                v("first_call_old", "ratio_second_to_first/first"),
            ],
        ),
        (
            "docs/flow/roundtrip.md",
            "| all float32 | {} | {} | | noise side float64 | {} | {} | | B float64 | {} | {} | "
            "| data side float64 | {} | {} |",
            [
                v("stages", f"rows/float64={name}/{key}", "e1")
                for name in ("all float32", "noise side float64", "B float64", "data side float64")
                for key in ("a_neg", "a_pos")
            ],
        ),
        (
            "CHANGELOG.md",
            "on an empty cache takes {} s against {} s for `pretrained:mnist` ({}x, median of "
            "three rounds), against {} s and {} s through B on the same machine",
            [
                *first_calls("first_call", "first"),
                v("first_call", "ratio_second_to_first/first"),
                *first_calls("first_call_b", "first"),
            ],
        ),
        (
            "docs/mixture.md",
            "pretrained:mnist-mix --n 64` took {} s against {} s for the one-generator "
            "`pretrained:mnist`, {}×. Through B, the route every call took before, the same "
            "first calls took {} s against {} s ({}×,",
            [
                *first_calls("first_call", "first"),
                v("first_call", "ratio_second_to_first/first"),
                *first_calls("first_call_b", "first"),
                v("first_call_b", "ratio_second_to_first/first"),
            ],
        ),
        (
            "docs/mixture.md",
            "--n 64` takes {} s against {} s for the one-generator `pretrained:mnist`, {}×, and a "
            "warm call {} s against {} s",
            [
                *first_calls("first_call_basis", "first"),
                v("first_call_basis", "ratio_second_to_first/first"),
                *first_calls("first_call_basis", "warm"),
            ],
        ),
        (
            "docs/mixture.md",
            "--out docs/mixture/first_call-cond.json`): {} s against {} s, {}×",
            [
                v("first_call_cond", "seconds/pretrained:mnist-cond/first"),
                v("first_call_cond", "seconds/pretrained:mnist/first"),
                v("first_call_cond", "ratio_second_to_first/first"),
            ],
        ),
        (
            "docs/mixture.md",
            "Before the basis route, the same benchmark read {} s against {} s ({}×,",
            [
                *first_calls("first_call_k20", "first"),
                v("first_call_k20", "ratio_second_to_first/first"),
            ],
        ),
        (
            "docs/mixture.md",
            "(largest difference {} on latents of size {} for 64 samples of "
            "`pretrained:mnist-mix`, {} on {} for `pretrained:mnist-cond`",
            [
                v("rows_route", f"cases/model=pretrained:mnist{m}/rows=64/{key}", f)
                for m in ("-mix", "-cond")
                for key, f in (("max_abs_difference", "e1"), ("max_abs_latent", ".1f"))
            ],
        ),
        (
            "docs/mixture.md",
            "({} s against {} s for 64 samples of the twenty components, {} s against {} s for 64 "
            "of the ten classes; at 19.2 rows a class the ten classes' factors are faster, {} s "
            "against {} s)",
            [
                v("rows_route", f"cases/model=pretrained:mnist{m}/rows={n}/seconds/{route}")
                for m, n, routes in (
                    ("-mix", 64, ("basis", "factors")),
                    ("-cond", 64, ("basis", "factors")),
                    ("-cond", 192, ("factors", "basis")),
                )
                for route in routes
            ],
        ),
        (
            "docs/mixture.md",
            "the call's peak memory is {} MB, against {} MB through every component's factors",
            [
                v("first_call_memory", "routes/basis/peak_rss_mb", ",.0f"),
                v("first_call_memory", "routes/per-component factors/peak_rss_mb", ",.0f"),
            ],
        ),
        (
            "CHANGELOG.md",
            "takes {} s against {} s for `pretrained:mnist` ({}x, median of three rounds; {} s "
            "against {} s before), and the ten classes of `pretrained:mnist-cond` {} s against "
            "{} s ({}x)",
            [
                *first_calls("first_call_basis", "first"),
                v("first_call_basis", "ratio_second_to_first/first"),
                *first_calls("first_call_k20", "first"),
                v("first_call_cond", "seconds/pretrained:mnist-cond/first"),
                v("first_call_cond", "seconds/pretrained:mnist/first"),
                v("first_call_cond", "ratio_second_to_first/first"),
            ],
        ),
        (
            "CHANGELOG.md",
            "The call's peak memory is {} MB ({} MB before; {} MB through every component's "
            "factors)",
            [
                v("first_call_memory", "routes/basis/peak_rss_mb", ",.0f"),
                v("first_call_memory", "routes/rows/peak_rss_mb", ",.0f"),
                v("first_call_memory", "routes/per-component factors/peak_rss_mb", ",.0f"),
            ],
        ),
        (
            "CHANGELOG.md",
            "`sample pretrained:mnist-mix --n 64` on an empty cache takes {} s against {} s for "
            "`pretrained:mnist` ({}x, median of three rounds; the ten components took",
            [
                *first_calls("first_call_k20", "first"),
                v("first_call_k20", "ratio_second_to_first/first"),
            ],
        ),
        (
            "CHANGELOG.md",
            "the same benchmark run just before on the per-component route read {} s against {} s "
            "({}x)",
            [
                *first_calls("first_call_k20_b2b", "first"),
                v("first_call_k20_b2b", "ratio_second_to_first/first"),
            ],
        ),
        (
            "docs/mixture.md",
            "and through every component's factors {} s against {} s ({}×, "
            "[first_call-batched-back-to-back.json]",
            [
                *first_calls("first_call_k20_b2b", "first"),
                v("first_call_k20_b2b", "ratio_second_to_first/first"),
            ],
        ),
        (
            "docs/mixture.md",
            "and earlier that day, on a busier machine, {} s against {} s ({}×,",
            [
                *first_calls("first_call_k20_busy", "first"),
                v("first_call_k20_busy", "ratio_second_to_first/first"),
            ],
        ),
        (
            "CHANGELOG.md",
            "the call's peak memory falls from {} MB to {} MB",
            [
                v("first_call_memory", "routes/per-component factors/peak_rss_mb", ",.0f"),
                v("first_call_memory", "routes/rows/peak_rss_mb", ",.0f"),
            ],
        ),
        (
            "docs/mixture.md",
            "{} s against {} s on the faster machine of 2026-12-05",
            first_calls("first_call_old", "first"),
        ),
        (
            "docs/mixture.md",
            "(warm calls {} s and {} s), where stored B's are read back in {} s and {} s",
            [*first_calls("first_call", "warm"), *first_calls("first_call_b", "warm")],
        ),
    ]
)


def fast_linearity() -> list[tuple[str, str, str]]:
    """The faster machine's main job (2026-12-08): float32 linearity, sums, a > 0, a < 0."""
    keys = ("additivity_float32", "homogeneity_float32_a_pos", "homogeneity_float32_a_neg")
    return [v("repro_fast", f"claims/linearity/{k}", "e1") for k in keys]


def blocks_row(name: str) -> list[tuple[str, str, str]]:
    """A row of roundtrip.md §14: the a < 0 and a > 0 maxima with some modules in float64."""
    return [v("blocks", row(name, key), "e1") for key in ("a_neg", "a_pos")]


CHECKS += [
    (
        "BENCHMARKS.md",
        "{} of {} claims ([results.json](docs/repro-2026-12-08/results.json)): float32 linearity "
        "{} for sums, {} for positive scalars and {} for negative ones; float32 inversion through "
        "B {} dB. Its trained map alone scores FID (LeNet) {} and FID (judge) {}",
        [
            v("repro_fast", "claims/#passed", "d"),
            v("repro_fast", "claims/#count", "d"),
            *fast_linearity(),
            v("repro_fast", "claims/inversion/psnr_db_float32"),
            *fid("eval_fast", "method"),
        ],
    ),
    ("BENCHMARKS.md", "the 5,600 steps ran in {} s", [v("repro_fast", "train_s", ",.0f")]),
    (
        "README.md",
        "4.47 steps/s, {} of {} claims, [docs/repro-2026-12-08/]",
        [v("repro_fast", "claims/#passed", "d"), v("repro_fast", "claims/#count", "d")],
    ),
    (
        "docs/flow/roundtrip.md",
        "printed {} of {} claims hold ([results.json](../repro-2026-12-08/results.json)): float32 "
        "linearity {} for sums, {} for a > 0 and {} for a < 0 (float64: {}), float32 inversion "
        "through B {} dB",
        [
            v("repro_fast", "claims/#passed", "d"),
            v("repro_fast", "claims/#count", "d"),
            *fast_linearity(),
            v("repro_fast", "claims/linearity/max_rel_err_float64", "e1"),
            v("repro_fast", "claims/inversion/psnr_db_float32"),
        ],
    ),
    (
        "docs/flow/roundtrip.md",
        "composes the passes as `benchmarks/linearity_stages.py` does and reads {} where the "
        "claim reads {})",
        [
            v("blocks", row("none", "a_neg"), "e1"),
            v("repro_fast", "claims/linearity/homogeneity_float32_a_neg", "e1"),
        ],
    ),
    (
        "docs/flow/roundtrip.md",
        "| nothing more (the tail only) | {} | {} | | the logit | {} | {} | | the convolutional "
        "block | {} | {} | | the logit and the convolutional block | {} | {} |",
        [x for n in ("none", "logit", "block 0", "logit, block 0") for x in blocks_row(n)],
    ),
    (
        "CHANGELOG.md",
        "8 of 8 claims, float32 linearity {} for negative scalars; docs/repro-2026-12-08/) the "
        "convolutional block carries the negative scalars' excess: with it in float64 they read "
        "{} against {}",
        [
            v("repro_fast", "claims/linearity/homogeneity_float32_a_neg", "e1"),
            v("blocks", row("block 0", "a_neg"), "e1"),
            v("blocks", row("none", "a_neg"), "e1"),
        ],
    ),
]


# ---------------------------------------------------------------- the checker


@cache
def load_json(rel: str) -> Any:
    return json.loads((ROOT / rel).read_text(encoding="utf-8"))


def _step(node: Any, seg: str) -> Any:
    many = isinstance(node, list) and node and isinstance(node[0], dict)
    if seg.startswith("#"):
        return _reduce(node, seg)
    if "^=" in seg and isinstance(node, list):
        key, prefix = seg.split("^=", 1)
        return [item for item in node if str(item.get(key)).startswith(prefix)]
    if "=" in seg and isinstance(node, list):
        key, want = seg.split("=", 1)
        return [item for item in node if str(item.get(key)) == want.replace("~", "/")]
    if isinstance(node, list) and not many:
        return node[int(seg)]
    if many:
        return node[0][seg] if len(node) == 1 else [item[seg] for item in node]
    return node[seg.replace("~", "/")]


def _reduce(node: Any, op: str) -> Any:
    if op in ("#passed", "#count", "#all"):
        passed = sum(bool(claim["passed"]) for claim in node.values())
        if op == "#all":
            return len(node) if passed == len(node) else f"not all ({passed} of {len(node)})"
        return passed if op == "#passed" else len(node)
    values = [float(x) for x in node]
    return {"#mean": sum(values) / len(values), "#min": min(values), "#max": max(values)}[op]


def resolve(rel: str, path: str) -> Any:
    """The value at ``path`` in the JSON file ``rel`` (see the module docstring)."""
    node = load_json(rel)
    for seg in path.split("/"):
        node = _step(node, seg)
        if isinstance(node, list) and not node:
            raise KeyError(f"{rel}: {path!r} selects nothing at {seg!r}")
    if isinstance(node, list) and len(node) == 1:
        node = node[0]
    return node


def fmt(value: Any, spec: str) -> str:
    """Format a JSON value as the documents write it.

    >>> fmt(7.119e-05, "e1"), fmt(0.982, "%"), fmt(0.1268, "%0"), fmt(1488.6, ",.0f")
    ('7.1e-5', '98.2', '13', '1,489')
    """
    if spec == "e1":
        mantissa, exponent = f"{value:.1e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    if spec == "%":
        return f"{100 * value:.1f}"
    if spec == "%1":
        return f"{100 * value:.1f}"
    if spec == "%0":
        return f"{100 * value:.0f}"
    if spec == "H200":
        return str(value).replace("NVIDIA ", "")
    if spec == "s":
        return str(value)
    return format(value, spec)


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("**", ""))


def expected_phrase(check: Check) -> str:
    _doc, phrase, values = check
    return normalise(phrase.format(*(fmt(resolve(J[n], p), f) for n, p, f in values)))


def check_doc(text: str, checks: list[Check]) -> list[str]:
    """One line per check whose JSON-formatted phrase is missing from ``text``."""
    body = normalise(text)
    return [
        f"{check[0]}: expected {expected_phrase(check)!r} (from the JSON), not found"
        for check in checks
        if expected_phrase(check) not in body
    ]


def count_numbers() -> int:
    return sum(len(values) for _doc, _phrase, values in CHECKS)


# ---------------------------------------------------------------- the tests


@pytest.mark.parametrize("doc", sorted({c[0] for c in CHECKS}))
def test_every_number_matches_its_json(doc):
    text = (ROOT / doc).read_text(encoding="utf-8")
    assert check_doc(text, [c for c in CHECKS if c[0] == doc]) == []


def test_the_table_covers_the_headline_documents():
    docs = {c[0] for c in CHECKS}
    assert {
        "README.md",
        "docs/quality.md",
        "docs/conditional.md",
        "BENCHMARKS.md",
        "CHANGELOG.md",
    } <= docs
    assert count_numbers() >= 150


def test_every_json_file_exists():
    for rel in J.values():
        assert (ROOT / rel).is_file(), rel


def test_a_planted_wrong_number_fails(tmp_path):
    copy = tmp_path / "conditional.md"
    shutil.copy(ROOT / "docs/conditional.md", copy)
    text = copy.read_text(encoding="utf-8")
    assert "| 0 | 22.0 (18.8) |" in text
    copy.write_text(text.replace("| 0 | 22.0 (18.8) |", "| 0 | 18.8 (18.8) |"), encoding="utf-8")
    problems = check_doc(
        copy.read_text(encoding="utf-8"), [c for c in CHECKS if c[0] == "docs/conditional.md"]
    )
    assert len(problems) == 1
    assert "| 0 | 22.0 (18.8) |" in problems[0]


def test_a_claim_count_names_its_run(tmp_path):
    copy = tmp_path / "README.md"
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    # the shipped model's count written as the cpu preset's: the check reads its own run's JSON
    copy.write_text(
        text.replace("`pretrained:mnist`, 6 of 8 hold", "`pretrained:mnist`, 8 of 8 hold")
    )
    problems = check_doc(copy.read_text(), [c for c in CHECKS if c[0] == "README.md"])
    assert problems == [
        "README.md: expected 'On the shipped `pretrained:mnist`, 6 of 8 hold'"
        " (from the JSON), not found"
    ]
    assert resolve(J["repro_pre"], "claims/#all").startswith("not all")


def test_the_changelog_states_each_shipped_score_once():
    unreleased = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8").split("## [0.1.0]")[0]
    old = [
        fmt(resolve(J["cond_old"], row("w=0", "fid_lenet")), ".1f"),
        fmt(resolve(J["pre_old"], row("method", "fid_lenet")), ".1f"),
    ]
    for number in old:  # the superseded weights' scores are history, not the current state
        assert number not in unreleased, number
    assert "4,000 steps" not in unreleased


def test_the_shipped_model_count_is_the_package_assets():
    words = {1: "One", 2: "Two", 3: "Three", 4: "Four", 5: "Five"}
    shipped = sorted((ROOT / "src/linearizer/assets").glob("flow_*.json"))
    flow_md = normalise((ROOT / "docs/flow.md").read_text(encoding="utf-8"))
    assert f"{words[len(shipped)]} models ship inside the package" in flow_md
    for asset in shipped:
        name = load_json(str(asset.relative_to(ROOT)))["name"]
        assert f"`pretrained:{name}`" in flow_md, name


def test_a_shipped_models_evaluation_is_its_docs_json():
    """The evaluation a shipped model carries in its JSON is the one its docs show."""
    docs = resolve(J["mix"], "rows/name=method")
    shipped = resolve(J["mnist_mix"], "evaluation/rows/name=method")
    assert {k: shipped[k] for k in ("fid_lenet", "fid_judge", "precision", "recall")} == {
        k: docs[k] for k in ("fid_lenet", "fid_judge", "precision", "recall")
    }
    assert resolve(J["mnist_mix"], "evaluation/command") == load_json(J["mix"])["command"]
