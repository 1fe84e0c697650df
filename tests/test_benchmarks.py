"""The benchmark scripts stay runnable: a smoke run of ``speed.py --quick`` (no timing asserts),
and the reference algorithms agree with ours."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))


def test_speed_quick_smoke(tmp_path):
    out = tmp_path / "speed.json"
    cmd = [sys.executable, str(BENCH / "speed.py"), "--quick", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "## paper" in proc.stdout and "## cpu" in proc.stdout
    report = json.loads(out.read_text())
    for arch in ("paper", "cpu"):
        par = report["summary"][arch]["parity"]
        # float64; the reference's attention softmax runs in float32 (as the authors'), so the
        # U-Net side agrees to ~1e-7, and everything else to rounding.
        assert max(par["g"], par["g_inverse"], par["loss"]) < 1e-5
        assert max(par["B_euler_rel"], par["B_rk4-authors_rel"]) < 1e-10
        assert max(par["multistep_euler"], par["multistep_rk4"], par["onestep_euler"]) < 1e-5
        assert not any("error" in r for r in report["results"])


def test_gpu_check_runs_on_cpu(tmp_path):
    """The prepared GPU check's whole path (probe, training, B timings, sampling, FID) on the CPU
    with a tiny network and synthetic data, so a typo cannot waste a GPU lease."""
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        str(BENCH / "gpu_check.py"),
        "--device",
        "cpu",
        "--tiny",
        "--dataset",
        "synthetic",
        "--set",
        "img_size=8",
        "--steps",
        "2",
        "--samples",
        "16",
        "--probe-steps",
        "1",
        "--out",
        str(out),
        "--run",
        str(tmp_path / "run"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["train"]["steps"] == 2
    assert [p["memory_saving"] for p in report["probe"]] == [False, True]
    for key in ("B_T100_euler_f64_s", "B_T1000_euler_f32_s", "one_step_images_per_s"):
        assert report["sampling"][key] > 0
    assert (out / "samples.png").is_file()
    assert any((tmp_path / "run" / "checkpoints").iterdir())


def test_precision_quick_smoke(tmp_path):
    out = tmp_path / "precision.json"
    cmd = [
        sys.executable,
        str(BENCH / "precision.py"),
        "--quick",
        "--rounds",
        "1",
        "--threads",
        "1",
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report["steps_per_s"]) == {"float32", "bfloat16"}
    assert all(v > 0 for rates in report["steps_per_s"].values() for v in rates)
    assert report["ratio_bfloat16_to_float32"] > 0


def test_step_quick_smoke(tmp_path):
    """benchmarks/step.py's whole path: trees side by side (a checkout given by path), a
    variant, the reference, the profile's split and the JSON (tiny shapes, no timing asserts)."""
    out = tmp_path / "step.json"
    root = BENCH.parent
    cmd = [
        sys.executable,
        str(BENCH / "step.py"),
        "--quick",
        "--threads",
        "1",
        "--variants",
        "fused-adam",
        "--against",
        str(root),
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    cpu = report["results"]["cpu/ours@128"]
    assert set(cpu) == {"this", "this+fused-adam", str(root)}
    assert set(report["results"]["paper/reference@32"]) == {"this"}
    for case in report["results"].values():
        for summary in case.values():
            assert summary["steps_per_s"] > 0 and summary["gflop_per_step"] > 0
            assert abs(sum(summary["split"].values()) - 1) < 1e-9
    assert "the steps/s of the authors' algorithms" in proc.stdout


def test_quality_protocol_pieces(tmp_path):
    """benchmarks/quality.py: flow matching's schedule is our preset's, its samplers integrate
    a known field, and the report averages seeds and takes the times measured alone."""
    import quality
    import torch

    assert quality.lr_factor(0, 1000) == 1 / quality.WARMUP
    assert quality.lr_factor(quality.WARMUP, 1000) == 1.0
    assert abs(quality.lr_factor(1000, 1000) - quality.MIN_LR_RATIO) < 1e-12

    class Field(torch.nn.Module):  # v(t, x) = -x: x(1) = x(0) / e
        def forward(self, t, x):
            return -x

    x0 = torch.randn(3, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(quality.fm_euler(Field(), x0, 1), torch.zeros_like(x0))
    assert torch.allclose(quality.fm_euler(Field(), x0, 4), x0 * 0.75**4)
    x1, nfe = quality.fm_adaptive(Field(), x0, 1e-8)
    assert torch.allclose(x1, x0 * torch.exp(torch.tensor(-1.0)), rtol=1e-5) and nfe > 6

    def row(model, sampler, seed, fid, nfe=2, ms=1.0):
        keys = ("fid_judge", "precision", "recall", "confidence")
        return {
            "model": model,
            "sampler": sampler,
            "seed": seed,
            "nfe": nfe,
            "fid_lenet": fid,
            "ms_per_image": ms,
            **dict.fromkeys(keys, 0.5),
        }

    result = {
        "samples": 4,
        "threads": 2,
        "rows": [
            row("ours", "one-step", 0, 10.0),
            row("ours", "one-step", 1, 20.0),
            row("flow matching", "Euler, 4 steps", 0, 30.0, nfe=4, ms=99.0),
            row("flow matching", "RK45", 0, 40.0, nfe=12, ms=99.0),
        ],
    }
    lines = quality.table(result).splitlines()
    assert "10.0 / 20.0 (**15.0**)" in lines[2] and "0 / 1" in lines[2]
    assert "30.0" in lines[3] and "(**" not in lines[3]
    times = {"flow matching|Euler, 4 steps": 8.0, "per evaluation": 2.0}
    (tmp_path / "timing.json").write_text(json.dumps({"ms_per_image": times}))
    timed = {
        (r["model"], r["sampler"]): r["ms_per_image"]
        for r in quality.with_timing(result, tmp_path)["rows"]
    }
    assert timed[("flow matching", "Euler, 4 steps")] == 8.0
    assert timed[("flow matching", "RK45")] == 24.0  # its evaluations x one evaluation
    assert timed[("ours", "one-step")] == 1.0  # no time measured alone: the rating's


def test_preset_rate_smoke(tmp_path):
    """benchmarks/preset_rate.py: two override sets of the smoke preset, one round each."""
    out = tmp_path / "rate.json"
    cases = ["--case", "plain=", "--case", "odd=network.flag_actnorm=true,network.odd_noise=true"]
    cmd = [sys.executable, str(BENCH / "preset_rate.py"), "--preset", "smoke", *cases]
    cmd += ["--rounds", "1", "--steps", "2", "--skip", "1", "--threads", "1", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["cases"]["odd"] == ["network.flag_actnorm=true", "network.odd_noise=true"]
    assert report["ratio_to_first"]["plain"] == 1.0 and report["ratio_to_first"]["odd"] > 0
    bad = subprocess.run([*cmd[:2], "--case", "noname"], capture_output=True, text=True)
    assert bad.returncode != 0 and "NAME=OVERRIDES" in bad.stderr


def test_noise_mean_measures_the_mean_against_the_noise_latents(tmp_path):
    """benchmarks/noise_mean.py on a smoke run with an odd noise side and a mean; a run
    without a mean is refused in one line."""
    from linearizer.cli.main import main

    run, plain = tmp_path / "odd-mean", tmp_path / "plain"
    quiet = ["--set", "progress=false"]
    odd = ["network.flag_actnorm=true", "network.odd_noise=true", "network.noise_mean=true"]
    sets = [x for key in odd for x in ("--set", key)]
    assert main(["train", "flow", "--preset", "smoke", "--out", str(run), *quiet, *sets]) == 0
    assert main(["train", "flow", "--preset", "smoke", "--out", str(plain), *quiet]) == 0
    out = tmp_path / "noise_mean.json"
    cmd = [sys.executable, str(BENCH / "noise_mean.py"), str(run), "--n", "8", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads(out.read_text())["rows"][0]
    assert row["n"] == 8 and row["h_norm_median"] > 0
    assert abs(row["largest_offset_over_h"] - 3 * row["mu_over_h"]) <= 1e-12
    bad = subprocess.run([*cmd[:2], str(plain)], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "has no noise mean" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_linearity_stages_splits_the_float32_error_by_stage(tmp_path):
    """benchmarks/linearity_stages.py on a smoke run: every stage in float64 is exact to
    float64 rounding, all in float32 is not; a folder that is no run is one line."""
    from linearizer.cli.main import main

    run = tmp_path / "run"
    assert (
        main(["train", "flow", "--preset", "smoke", "--out", str(run), "--set", "progress=false"])
        == 0
    )
    out = tmp_path / "stages.json"
    cmd = [sys.executable, str(BENCH / "linearity_stages.py"), str(run), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {r["float64"]: r for r in json.loads(out.read_text())["rows"]}
    exact, rounded = rows["all float64"], rows["all float32"]
    assert max(exact["a_neg"], exact["a_pos"]) < 1e-10
    assert max(rounded["a_neg"], rounded["a_pos"]) > 1e3 * max(exact["a_neg"], exact["a_pos"])
    bad = subprocess.run([*cmd[:2], str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr


def test_linearity_blocks_takes_each_float32_module_of_the_data_side_to_float64(tmp_path):
    """benchmarks/linearity_blocks.py on a smoke run with a logit and a fully connected tail:
    one row per float32 module (the logit, the blocks before the tail) and one with all of
    them, each with finite maxima for both signs; a run without a logit is one line."""
    from linearizer.cli.main import main

    run, plain = tmp_path / "run", tmp_path / "plain"
    args = ["train", "flow", "--preset", "smoke", "--set", "progress=false", "--out"]
    wide = ["--set", "network.logit=0.05", "--set", "network.dense_blocks=1"]
    assert main([*args, str(run), *wide]) == 0
    assert main([*args, str(plain)]) == 0
    out = tmp_path / "blocks.json"
    cmd = [sys.executable, str(BENCH / "linearity_blocks.py"), str(run), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["float32_modules"] == ["logit", "block 0"]
    assert report["tail_blocks_float64"] == 1
    wides = [r["float64"] for r in report["rows"]]
    assert wides == [[], ["logit"], ["block 0"], ["logit", "block 0"]]
    for r in report["rows"]:
        assert 0 < r["a_neg"] < 1e-2 and 0 < r["a_pos"] < 1e-2
        assert len(r["worst_a_neg_pairs"]) == 5
    bad = subprocess.run([*cmd[:2], str(plain)], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "has no logit" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_latent_spread_measures_each_components_samples(tmp_path):
    """benchmarks/latent_spread.py on a smoke run: one spread per component, the median of
    them, and the test images' spread; a folder that is no run is one line."""
    from linearizer.cli.main import main

    run = tmp_path / "run"
    args = ["train", "flow", "--preset", "smoke", "--out", str(run), "--set", "progress=false"]
    assert main([*args, "--set", "components=2"]) == 0
    out = tmp_path / "spread.json"
    cmd = [sys.executable, str(BENCH / "latent_spread.py"), str(run), "--n", "32"]
    proc = subprocess.run(
        [*cmd, "--samples", "16", "--out", str(out)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    per = row["sample_spread_per_component"]
    assert len(per) == 2 and all(0 < s < 1e3 for s in per)
    assert row["sample_spread_median"] == pytest.approx(sum(per) / 2)
    assert row["test_images"] == 32 and row["test_image_spread"] > 0
    assert row["data_latent_spread"] > 0 and row["data_latent_mean_norm"] >= 0
    bad = subprocess.run([*cmd[:2], str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr


def test_rows_route_times_both_routes_of_a_shipped_mixture(tmp_path):
    """benchmarks/rows_route.py on a few rows and steps: both routes timed, their data latents
    equal to float64 rounding, and the route that ``sample`` takes named."""
    out = tmp_path / "rows_route.json"
    cmd = [sys.executable, str(BENCH / "rows_route.py"), "--models", "pretrained:mnist-mix"]
    cmd += ["--rows", "8", "--steps", "10", "--rounds", "1", "--threads", "1", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (case,) = json.loads(out.read_text())["cases"]
    assert case["rows"] == 8 and case["sample_takes"] == "basis"
    assert min(case["seconds"].values()) > 0
    assert case["max_abs_difference"] <= 1e3 * 2.0**-52 * case["max_abs_latent"]
