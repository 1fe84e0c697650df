"""``linearizer evaluate`` and the metrics behind it: improved precision/recall on hand-checked
sets, and the command end to end on a smoke run (synthetic data, tiny sizes)."""

import json

import pytest
import torch

from linearizer.cli.main import main
from linearizer.errors import LinearizerError
from linearizer.flow.evaluate import EvalOptions, default_rows, evaluate_flow, results_table
from linearizer.flow.spec import SamplerSpec
from linearizer.flow.task import FlowTask, load_flow_run, load_images
from linearizer.metrics.precision_recall import coverage_share, knn_radii, precision_recall
from linearizer.training.config import resolve
from linearizer.training.trainer import train


def line(values):
    return torch.tensor(values, dtype=torch.float64)[:, None]


def test_knn_radii_on_a_line():
    # points 0, 1, 3, 7: 1st neighbours at 1, 1, 2, 4; 2nd at 3, 2, 3, 6
    x = line([0.0, 1.0, 3.0, 7.0])
    assert knn_radii(x, 1).tolist() == [1.0, 1.0, 2.0, 4.0]
    assert knn_radii(x, 2, chunk=3).tolist() == [3.0, 2.0, 3.0, 6.0]


def test_coverage_counts_points_inside_any_ball_boundary_included():
    centres, radii = line([0.0, 10.0]), torch.tensor([1.0, 2.0], dtype=torch.float64)
    points = line([1.0, 1.5, 8.0, 12.5, -1.0])  # inside, outside, inside, outside, inside
    assert coverage_share(points, centres, radii) == pytest.approx(3 / 5, rel=1e-12)


def test_precision_recall_separates_fidelity_from_coverage():
    gen = torch.Generator().manual_seed(0)
    real = torch.randn(300, 2, generator=gen, dtype=torch.float64)
    # every sample sits on one real point: all realistic, but they cover one spot only
    collapsed = real[:1].repeat(50, 1) + 1e-9 * torch.randn(50, 2, generator=gen).double()
    p, r = precision_recall(real, collapsed, k=3)
    assert p == 1.0 and r < 0.1
    p, r = precision_recall(real, real + 100.0)
    assert (p, r) == (0.0, 0.0)


def test_precision_recall_rejects_bad_features():
    with pytest.raises(LinearizerError, match="k must be"):
        knn_radii(line([0.0, 1.0]), k=2)
    with pytest.raises(LinearizerError, match="NaN"):
        precision_recall(line([0.0, float("nan"), 1.0]), line([0.0, 1.0]))
    with pytest.raises(LinearizerError, match="sizes differ"):
        coverage_share(torch.zeros(3, 2), torch.zeros(3, 4), torch.ones(3))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("evaluate") / "run"
    train(FlowTask(), resolve("flow", "smoke", ["max_steps=4", "progress=false"]), folder)
    return folder


def test_evaluate_flow_rows_and_reference_order(run):
    model, cfg, _ = load_flow_run(run)
    reference, _ = load_images(cfg, "test")
    train_images, _ = load_images(cfg, "train")
    opts = EvalOptions(n=48, batch=16, kid_subsets=2)
    rows = default_rows(SamplerSpec(steps=4))
    results, samples = evaluate_flow(model, reference, rows, opts, train_images=train_images)
    names = [row["name"] for row in results["rows"]]
    assert names == ["method", "authors-grid", "train", "uniform"]
    assert results["rows"][1]["spec"] == SamplerSpec(steps=100, final="skip").to_dict()
    train_row, uniform_row = results["rows"][-2:]
    # real images of the same kind are far closer to the reference than uniform noise
    assert train_row["fid_lenet"] < uniform_row["fid_lenet"]
    assert train_row["precision"] > uniform_row["precision"]
    for row in results["rows"]:
        assert 0.0 <= row["precision"] <= 1.0 and 0.0 <= row["recall"] <= 1.0
        assert sum(row["class_histogram"]) == 48
    assert set(samples) == {"method", "authors-grid"}
    assert samples["method"].shape == (48, 1, 8, 8)
    assert results_table(results).count("\n") == 2 + len(names)


def test_evaluate_command_writes_results_and_grids(run, tmp_path):
    out = tmp_path / "eval"
    argv = [
        "evaluate",
        str(run),
        "--n",
        "32",
        "--steps",
        "4",
        "--kid-subsets",
        "2",
        "--no-progress",
        "--out",
        str(out),
    ]
    assert main(argv + ["--dry-run"]) == 0
    assert not out.exists()
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    assert [r["name"] for r in results["rows"]][:2] == ["method", "authors-grid"]
    assert results["spec"] == SamplerSpec(steps=4).to_dict()  # the run's sampler, --steps 4
    assert "FID (LeNet)" in (out / "results.md").read_text()
    for name in ("method", "authors-grid"):
        assert (out / f"grid_{name}.png").stat().st_size > 0


@pytest.mark.parametrize(
    "extra, message",
    [(["--n", "2"], "--n must be"), (["--steps", "1"], "steps must be"), (["--k", "0"], "--k")],
)
def test_bad_options_are_one_line_and_exit_2(run, tmp_path, capsys, extra, message):
    code = main(["evaluate", str(run), "--out", str(tmp_path / "o"), *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0]


def test_missing_run_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["evaluate", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such run folder" in err[0]
