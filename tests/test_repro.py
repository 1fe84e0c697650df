"""``linearizer repro`` and ``linearizer svd`` end to end on a smoke run trained in the test."""

from __future__ import annotations

import json
import re

import pytest
import torch

from linearizer.cli.main import main
from linearizer.flow.task import FlowTask
from linearizer.io import read_json, write_json
from linearizer.repro import claims as claims_module
from linearizer.repro import runner as runner_module
from linearizer.training.config import resolve
from linearizer.training.trainer import train

QUICK = ["--quick", "--n", "4", "--fid-n", "48", "--long-steps", "12", "--steps", "10"]
FIGURES = [
    "collapse",
    "inversion",
    "interpolation",
    "samples",
    "spectrum",
    "svd_directions",
    "training_curves",
]
REQUIRED = {
    "linearity": [
        "max_rel_err",
        "max_rel_err_float64",
        "homogeneity_float32_a_pos",
        "homogeneity_float32_a_neg",
        "homogeneity_float64_a_pos",
        "homogeneity_float64_a_neg",
        "conditioning",
    ],
    "collapse_euler": ["psnr_db", "psnr_db_float32", "latent_rel_err", "fid_lenet_between"],
    "collapse_rk4": ["psnr_db", "psnr_db_float32"],
    "collapse_rk4_authors": ["psnr_db", "mse"],
    "inversion": ["psnr_db", "cond_B", "ssim"],
    "invertibility": ["max_abs_err"],
    "generation": ["fid_lenet_one_step", "fid_lenet_multi_step", "kid_lenet_one_step"],
    "composition": ["max_rel_err", "max_rel_err_float64"],
}
EXACT = [
    "linearity",
    "collapse_euler",
    "collapse_rk4",
    "inversion",
    "invertibility",
    "composition",
    "generation",
]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("repro") / "run"
    train(FlowTask(), resolve("flow", "smoke", ["progress=false"]), run)
    return run


@pytest.fixture(scope="module")
def repro_out(smoke_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("repro-out")
    assert main(["repro", str(smoke_run), "--out", str(out), *QUICK]) == 0
    return out


def test_results_hold_every_claim_with_a_verdict(repro_out):
    results = json.loads((repro_out / "results.json").read_text())
    claims = results["claims"]
    assert set(REQUIRED) <= set(claims)
    for name, keys in REQUIRED.items():
        for key in keys:
            assert key in claims[name], f"{name}.{key} missing"
        for field in ("verdict", "paper", "reference", "measured", "threshold", "wall_s"):
            assert field in claims[name], f"{name}.{field} missing"
        assert isinstance(claims[name]["verdict"], str) and claims[name]["verdict"]
    # a trained-for-6-steps model still satisfies every exactness claim
    for name in EXACT:
        assert claims[name]["passed"] is True, (name, claims[name]["verdict"])
    lin = claims["linearity"]
    assert lin["max_rel_err_float64"] < 1e-9
    split = (lin["homogeneity_float32_a_pos"], lin["homogeneity_float32_a_neg"])
    assert max(split) == lin["homogeneity_float32"]
    split = (lin["homogeneity_float64_a_pos"], lin["homogeneity_float64_a_neg"])
    assert max(split) == lin["homogeneity_float64"]
    cond = lin["conditioning"]
    assert set(cond) == {"trained", "additivity", "a_pos", "a_neg"}
    assert cond["trained"]["cond_noise"] == 0.0  # sampling never inverts the noise side
    eps32 = torch.finfo(torch.float32).eps
    for term in ("additivity", "a_pos", "a_neg"):
        c = cond[term]
        assert c["cond_noise"] >= 0.9 and c["cond_data"] >= 0.9, term  # cond >= 1 up to estimate
        # the worst pair's sum of both sides: between the larger side's worst and both worsts
        low, high = max(c["cond_noise"], c["cond_data"]), c["cond_noise"] + c["cond_data"]
        assert low * (1 - 1e-12) <= c["eps32_x_cond"] / eps32 <= high * (1 + 1e-12), term
    psnr64 = claims["collapse_euler"]["psnr_db"]
    assert psnr64 is None or psnr64 >= 120
    assert results["options"]["quick"] is True
    assert results["wall_s"] > 0 and "environment" in results


def test_a_mixture_is_measured_per_component(tmp_path, repro_out):
    run, out = tmp_path / "run", tmp_path / "out"
    train(FlowTask(), resolve("flow", "smoke", ["progress=false", "components=3"]), run)
    assert main(["repro", str(run), "--out", str(out), *QUICK, "--n", "6"]) == 0
    claims = read_json(out / "results.json")["claims"]
    for name in ("linearity", "collapse_euler", "collapse_rk4", "inversion"):
        assert claims[name]["components"] == 3 and len(claims[name]["per_component"]) == 3, name
        assert "dealt over the 3 components" in claims[name]["how"], name
    for name in EXACT:
        assert claims[name]["passed"] is True, (name, claims[name]["verdict"])
    assert max(claims["linearity"]["per_component"].values()) == claims["linearity"]["max_rel_err"]
    assert claims["generation"]["components"] == 3
    assert "a mixture of 3 exact linear generators" in (out / "REPORT.md").read_text()
    # a one-generator report keeps its keys
    one = read_json(repro_out / "results.json")["claims"]
    assert not any("per_component" in c or "components" in c for c in one.values())


def test_figures_and_report_are_written(repro_out):
    results = json.loads((repro_out / "results.json").read_text())
    for name in FIGURES:
        path = repro_out / results["figures"][name]
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    report = (repro_out / "REPORT.md").read_text()
    assert "| claim | paper | reference | measured | verdict | wall s |" in report
    assert "collapse_rk4_authors" in report and "## Deviations from the paper" in report


def test_missing_and_foreign_folders_fail_with_one_line(tmp_path, capsys):
    out = str(tmp_path / "out")
    assert main(["repro", str(tmp_path / "missing"), "--out", out]) == 2
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("not a run")
    assert main(["repro", str(foreign), "--out", out]) == 2
    other = tmp_path / "other-kind"
    write_json(other / "config.json", {"seed": 0})
    write_json(other / "run.json", {"kind": "projective", "status": "finished"})
    assert main(["repro", str(other), "--out", out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("linearizer: error: ") for line in err)
    assert "neither a run folder nor a flow preset" in err[0]
    assert "no config.json" in err[1] and "projective" in err[2]
    assert not (tmp_path / "out" / "results.json").exists()


def test_preset_dry_run_and_no_train(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["repro", "smoke", "--out", str(out), "--dry-run"]) == 0
    said = capsys.readouterr().out
    assert "train preset 'smoke'" in said
    assert re.search(r"this machine: [0-9.]+ steps/s \(timed now\): 6 steps take [0-9.]+ min", said)
    assert not out.exists()
    assert main(["repro", "smoke", "--out", str(out), "--no-train"]) == 2


def test_the_estimate_names_the_cap_a_slow_machine_hits(monkeypatch):
    monkeypatch.setattr("linearizer.training.steprate.measure_step_rate", lambda task, cfg: 1.0)
    said = runner_module.expected_time("cpu")  # 5,600 steps at 1 step/s: 93 min, over 45
    assert "5,600 steps take 93.3 min, over the 45-minute cap" in said
    assert "stop near step 2,700 of 5,600" in said
    monkeypatch.setattr("linearizer.training.steprate.measure_step_rate", lambda task, cfg: 8.0)
    said = runner_module.expected_time("cpu")  # 11.7 + 4.1 (claims scaled from 3.08 steps/s)
    assert "11.7 min, then about 4.1 min of claims" in said
    assert said.endswith("about 16 min")


@pytest.mark.parametrize("where", ["claim", "figures"])
def test_interrupted_repro_keeps_the_previous_outputs(smoke_run, tmp_path, monkeypatch, where):
    out = tmp_path / "out"
    write_json(out / "results.json", {"previous": True})
    (out / "figures").mkdir()
    (out / "figures" / "samples.png").write_bytes(b"previous")

    def interrupted_claim(ctx):
        raise KeyboardInterrupt

    def interrupted_figures(ctx, folder):
        folder.mkdir(parents=True)
        (folder / "samples.png").write_bytes(b"half")
        raise KeyboardInterrupt

    if where == "claim":
        monkeypatch.setitem(claims_module.CLAIMS, "linearity", interrupted_claim)
    else:
        monkeypatch.setattr(runner_module, "_figures", interrupted_figures)
    assert main(["repro", str(smoke_run), "--out", str(out), *QUICK]) == 130
    assert read_json(out / "results.json") == {"previous": True}
    assert (out / "figures" / "samples.png").read_bytes() == b"previous"
    assert sorted(p.name for p in out.iterdir()) == ["figures", "results.json"]


def test_svd_command(smoke_run, tmp_path, capsys):
    out = tmp_path / "svd"
    assert main(["svd", str(smoke_run), "--steps", "10", "--k", "4", "--out", str(out)]) == 0
    assert "cond" in capsys.readouterr().out
    info = json.loads((out / "svd.json").read_text())
    assert len(info["sigma_top"]) == 4
    assert info["sigma_top"] == sorted(info["sigma_top"], reverse=True)
    for name in ("spectrum.png", "svd_directions.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
