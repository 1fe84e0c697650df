"""The generic trainer: determinism, exact resume, NaN stop, time budget, hooks, tracking."""

from __future__ import annotations

import json
import math
import sys
import time

import pytest
import torch

from linearizer.errors import LinearizerError
from linearizer.training.checkpoint import latest_checkpoint, list_checkpoints, read_checkpoint
from linearizer.training.config import TrainConfig, apply_overrides
from linearizer.training.resume import resume_config
from linearizer.training.schedule import lr_at
from linearizer.training.steprate import measure_step_rate
from linearizer.training.tracking import make_tracker, read_metrics
from linearizer.training.trainer import StepRandom, train
from toy_task import ToyConfig, ToyTask

BASE = [
    "dim=4",
    "width=8",
    "n_data=40",
    "batch_size=8",
    "threads=1",
    "progress=false",
    "ema_warmup=3",
    "lr=1e-2",
    "log_every=2",
]


def cfg_of(*overrides: str) -> ToyConfig:
    return apply_overrides(ToyConfig(), [*BASE, *overrides])


def final_state(run) -> dict:
    _, tensors = read_checkpoint(latest_checkpoint(run))
    return {k: v for k, v in tensors.items() if k.startswith(("model.", "ema.", "optim."))}


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, different


# ----------------------------------------------------------------------------- randomness


def test_ranks_take_slices_of_one_global_draw():
    whole = StepRandom(3, 11, "noise", global_batch=6)
    parts = [StepRandom(3, 11, "noise", 6, rank=r, world=3) for r in range(3)]
    assert torch.equal(whole.randn(2, 2), torch.cat([p.randn(2, 2) for p in parts]))
    assert torch.equal(whole.randint(9), torch.cat([p.randint(9) for p in parts]))
    assert not torch.equal(whole.randn(1), StepRandom(3, 12, "noise", 6).randn(1))
    assert whole.int_seed("dropout") == parts[2].int_seed("dropout")


def test_indices_visit_every_sample_once_per_epoch():
    n, batch = 10, 4  # batches straddle epochs
    seen = torch.cat([StepRandom(0, s, "data", batch).indices(n) for s in range(5)])
    assert sorted(seen[:10].tolist()) == list(range(10))
    assert sorted(seen[10:20].tolist()) == list(range(10))
    assert not torch.equal(seen[:10], seen[10:20])  # a new permutation each epoch
    split = torch.cat([StepRandom(0, 3, "data", batch, r, 2).indices(n) for r in range(2)])
    assert torch.equal(split, StepRandom(0, 3, "data", batch).indices(n))


def test_learning_rate_schedules():
    cfg = TrainConfig(lr=1.0, max_steps=110, warmup_steps=10, schedule="cosine", min_lr_ratio=0.1)
    assert lr_at(cfg, 0) == pytest.approx(0.1) and lr_at(cfg, 9) == pytest.approx(1.0)
    assert lr_at(cfg, 60) == pytest.approx(0.55) and lr_at(cfg, 110) == pytest.approx(0.1)
    lin = TrainConfig(lr=2.0, max_steps=100, schedule="linear")
    assert lin.lr == lr_at(lin, 0) and lr_at(lin, 50) == pytest.approx(1.0)
    assert lr_at(TrainConfig(lr=0.3), 10**6) == 0.3


# ----------------------------------------------------------------------------- exact resume


def test_resume_is_bit_exact_and_metrics_are_truncated(tmp_path):
    straight = train(ToyTask(), cfg_of("max_steps=16", "ckpt_every=4"), tmp_path / "a")
    assert straight.step == 16 and straight.stopped == "max_steps"
    train(ToyTask(), cfg_of("max_steps=7", "ckpt_every=4"), tmp_path / "b")  # ends at 7
    resumed = resume_config(tmp_path / "b", ToyConfig, ["max_steps=16"])
    again = train(ToyTask(), resumed, tmp_path / "b", resume=True)
    assert again.step == 16
    assert_same(final_state(tmp_path / "a"), final_state(tmp_path / "b"))
    for a, b in zip(straight.model.state_dict().values(), again.model.state_dict().values()):
        assert torch.equal(a, b)
    steps = [r["step"] for r in read_metrics(tmp_path / "b") if "loss" in r and "lr" in r]
    assert steps == sorted(set(steps)) and steps[-1] == 16
    assert [r for r in read_metrics(tmp_path / "b") if "summary" in r][0]["step"] == 16
    losses_a = [r["loss"] for r in read_metrics(tmp_path / "a") if "lr" in r and r["step"] > 8]
    losses_b = [r["loss"] for r in read_metrics(tmp_path / "b") if "lr" in r and r["step"] > 8]
    assert losses_a == losses_b
    config = json.loads((tmp_path / "b" / "config.json").read_text())
    assert config["max_steps"] == 16 and config["width"] == 8


def test_resume_refuses_changed_settings_and_fresh_start_over_a_run(tmp_path):
    train(ToyTask(), cfg_of("max_steps=4"), tmp_path / "r")
    with pytest.raises(LinearizerError, match="cannot change 'lr' when resuming"):
        train(ToyTask(), cfg_of("max_steps=8", "lr=0.5"), tmp_path / "r", resume=True)
    with pytest.raises(
        LinearizerError, match="already holds checkpoints; continue it with --resume"
    ):
        train(ToyTask(), cfg_of("max_steps=4"), tmp_path / "r")
    with pytest.raises(LinearizerError, match="not a run folder"):
        train(ToyTask(), cfg_of(), tmp_path / "nothing", resume=True)


def test_resume_without_checkpoint_starts_over(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(cfg_of("max_steps=3").to_dict()))
    with pytest.warns(UserWarning, match="no usable checkpoint yet; starting at step 0"):
        result = train(ToyTask(), cfg_of("max_steps=3"), run, resume=True)
    assert result.step == 3


# ----------------------------------------------------------------------------- stopping


def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(tmp_path):
    with pytest.raises(LinearizerError) as err:
        train(ToyTask(), cfg_of("max_steps=20", "ckpt_every=5", "nan_at_step=12"), tmp_path)
    msg = str(err.value)
    assert "non-finite loss nan at step 13" in msg and "ckpt_00000010.safetensors" in msg
    assert [p.name for p in list_checkpoints(tmp_path)][-1] == "ckpt_00000010.safetensors"
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "failed"
    _, tensors = read_checkpoint(latest_checkpoint(tmp_path))
    assert all(torch.isfinite(v).all() for k, v in tensors.items() if k.startswith("model."))


def test_time_budget_stops_at_a_step_and_resumes_exactly(tmp_path):
    cut = train(
        ToyTask(),
        cfg_of("max_steps=400", "max_minutes=0.002", "step_delay_ms=20", "ckpt_every=0"),
        tmp_path / "cut",
    )
    assert cut.stopped == "time budget" and 0 < cut.step < 400
    status = json.loads((tmp_path / "cut" / "run.json").read_text())
    assert (status["status"], status["step"]) == ("stopped", cut.step)
    assert latest_checkpoint(tmp_path / "cut").name == f"ckpt_{cut.step:08d}.safetensors"
    n = cut.step + 3
    train(
        ToyTask(),
        cfg_of(f"max_steps={n}", "max_minutes=0.002", "step_delay_ms=20", "ckpt_every=0"),
        tmp_path / "cut",
        resume=True,
    )
    train(ToyTask(), cfg_of(f"max_steps={n}", "ckpt_every=0"), tmp_path / "full")
    assert_same(final_state(tmp_path / "cut"), final_state(tmp_path / "full"))


def test_a_budgeted_run_shows_its_budget_not_the_max_steps_estimate(tmp_path, capsys, monkeypatch):
    # 0.05 minutes with 0.03 kept for the finish: the steps get 1.2 s of a ceiling of 100000
    budgeted = (
        "max_steps=100000",
        "max_minutes=0.05",
        "finish_minutes=0.03",
        "step_delay_ms=20",
        "ckpt_every=0",
        "progress=true",
        "lr_clock=time",
    )
    cut = train(ToyTask(), cfg_of(*budgeted), tmp_path / "bar")
    assert cut.stopped == "time budget"
    err = capsys.readouterr().err
    frames = [f for f in err.replace("\r", "\n").splitlines() if " left" in f]
    assert frames and not [f for f in frames if "100000" in f or "step/s" in f]
    last = frames[-1]
    assert last.startswith("100%|") and "loss=" in last and "steps/s" in last
    assert f"| step {cut.step}, 00:01/00:01 budget (+00:01 after the steps), 00:00 left" in last
    # the bar only reads the clock: the same steps without it train the same weights and log
    # the same numbers (timings aside; the plain run also logs its last, partial window)
    train(ToyTask(), cfg_of(f"max_steps={cut.step}", "ckpt_every=0"), tmp_path / "plain")
    assert_same(final_state(tmp_path / "bar"), final_state(tmp_path / "plain"))

    def untimed(run):
        steps = [r for r in read_metrics(tmp_path / run) if "lr" in r]
        return [{k: v for k, v in r.items() if not k.endswith("_s")} for r in steps]

    bar, plain = untimed("bar"), untimed("plain")
    assert bar and bar == plain[: len(bar)] and len(plain) - len(bar) <= 1

    monkeypatch.setitem(sys.modules, "tqdm", None)  # no tqdm: a line every log_every steps
    train(ToyTask(), cfg_of(*budgeted), tmp_path / "lines")
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("step 2, 00:00/00:01 budget (+00:01 after the steps), 00:0")
    assert not [line for line in lines if "/100000" in line]


def test_a_capped_fixed_step_run_counts_steps_and_the_cap_says_where_it_stopped(tmp_path, capsys):
    # the step clock: max_steps is the goal and max_minutes only a cap
    capped = (
        "max_steps=400",
        "max_minutes=0.01",
        "step_delay_ms=20",
        "ckpt_every=0",
        "progress=true",
    )
    cut = train(ToyTask(), cfg_of(*capped), tmp_path / "cap")
    err = capsys.readouterr().err
    assert "budget" not in err.split("linearizer:")[0] and "/400 " in err
    assert f"linearizer: 0.01-minute budget reached; stopped at step {cut.step} of 400" in err
    assert 0 < cut.step < 400


# ----------------------------------------------------------------------------- hooks


class EvalProbe(ToyTask):
    def __init__(self) -> None:
        self.calls: list[tuple[int, bool, torch.Tensor]] = []

    def on_eval(self, model, step, run_dir):
        weight = model.body[0].weight.detach().clone()
        self.calls.append((step, model.training, weight))
        path = run_dir / f"grid_{step}.png"
        path.write_bytes(b"png")
        return {"score": 1.5, "grid": str(path)}


def test_eval_hook_sees_ema_weights_and_training_resumes_untouched(tmp_path):
    task = EvalProbe()
    result = train(task, cfg_of("max_steps=6", "eval_every=3", "ema_decay=0.9"), tmp_path)
    assert [c[0] for c in task.calls] == [3, 6] and not any(c[1] for c in task.calls)
    assert torch.equal(task.calls[-1][2], result.ema.shadow["body.0.weight"])
    assert not torch.equal(result.model.body[0].weight, result.ema.shadow["body.0.weight"])
    assert result.model.training
    records = read_metrics(tmp_path)
    assert {"step": 6, "eval/score": 1.5} in records
    assert {"step": 3, "images": {"grid": str(tmp_path / "grid_3.png")}} in records
    logged = [r for r in records if "lr" in r]
    assert {"loss", "lr", "grad_norm", "steps_per_s", "samples_per_s", "mse"} <= set(logged[0])
    assert all(math.isfinite(r["loss"]) for r in logged)


class SlowFinish(ToyTask):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_finish(self, model, ema, step, run_dir):
        time.sleep(self.seconds)
        return {"slept": self.seconds}


def test_finish_minutes_come_out_of_the_steps_budget_and_an_overrun_says_so(tmp_path, capsys):
    # 0.05 minutes = 3 s in all, 2.4 s kept: the 20 ms steps stop after about 0.6 s
    cfg = cfg_of(
        "max_steps=400",
        "max_minutes=0.05",
        "finish_minutes=0.04",
        "step_delay_ms=20",
        "ckpt_every=0",
    )
    cut = train(SlowFinish(0.0), cfg, tmp_path / "a")
    assert cut.stopped == "time budget" and 0.6 <= cut.seconds < 2.4 and 0 < cut.step < 120
    err = capsys.readouterr().err
    assert "(0.04 of them kept for the work after the steps)" in err and "took" not in err
    assert json.loads((tmp_path / "a" / "run.json").read_text())["finish"] == {"slept": 0.0}
    train(SlowFinish(2.5), cfg, tmp_path / "b")
    assert "the work after the steps took 2.5 s, more than the 2.4 s of finish_minutes" in (
        capsys.readouterr().err
    )
    # a fixed-step run done early: its long finish still ends inside max_minutes, no line
    early = cfg_of("max_steps=3", "max_minutes=0.05", "finish_minutes=0.04", "ckpt_every=0")
    train(SlowFinish(2.5), early, tmp_path / "c")
    assert "took" not in capsys.readouterr().err


def test_threads_grad_clip_and_bad_tasks(tmp_path):
    before = torch.get_num_threads()
    train(ToyTask(), cfg_of("max_steps=2", "grad_clip=1e-3", "threads=1"), tmp_path / "c")
    assert torch.get_num_threads() == before
    assert all(r["grad_norm"] > 1e-3 for r in read_metrics(tmp_path / "c") if "grad_norm" in r)

    class NoLoss:
        kind = "x"

        def build(self, cfg):
            return torch.nn.Linear(1, 1)

        def batch(self, rng):
            return {}

    with pytest.raises(LinearizerError, match="lacks loss"):
        train(NoLoss(), cfg_of(), tmp_path / "d")


def test_trackio_missing_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "trackio", None)  # import now fails like a missing package
    with pytest.raises(LinearizerError, match="needs the optional trackio package"):
        make_tracker("trackio", tmp_path)
    with pytest.raises(LinearizerError, match="trackio"):
        train(ToyTask(), cfg_of("max_steps=2", "tracker=trackio"), tmp_path / "t")


class FakeTrackio:
    """Records the calls the tracker makes, standing in for the optional package."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def init(self, **kwargs):
        self.calls.append(("init", kwargs["project"], kwargs["name"]))

    def log(self, metrics, step=None):
        self.calls.append(("log", step, dict(metrics)))

    def Image(self, value, caption=None):  # noqa: N802 (mirrors trackio.Image)
        return ("image", value, caption)

    def finish(self):
        self.calls.append(("finish",))


def test_trackio_receives_scalars_images_and_summary(tmp_path, monkeypatch):
    fake = FakeTrackio()
    monkeypatch.setitem(sys.modules, "trackio", fake)
    task = EvalProbe()
    train(
        task,
        cfg_of("max_steps=4", "eval_every=2", "tracker=trackio", "tracker_project=proj"),
        tmp_path / "run",
    )
    assert fake.calls[0] == ("init", "proj", "run") and fake.calls[-1] == ("finish",)
    logs = [c for c in fake.calls if c[0] == "log"]
    assert {"loss", "lr", "steps_per_s"} <= set(logs[0][2]) and logs[0][1] == 2
    grid = str(tmp_path / "run" / "grid_2.png")
    assert ("log", 2, {"grid": ("image", grid, "grid")}) in logs
    assert ("log", 4, {"eval/score": 1.5}) in logs
    assert logs[-1][2]["final/step"] == 4 and "final/stopped" not in logs[-1][2]
    assert len(read_metrics(tmp_path / "run")) > 0  # metrics.jsonl is written as well


def test_real_trackio_stores_runs_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "store"))
    pytest.importorskip("trackio")  # optional extra: linearizer[tracking]
    train(
        ToyTask(),
        cfg_of("max_steps=2", "tracker=trackio", "tracker_project=lin-test"),
        tmp_path / "run",
    )
    assert (tmp_path / "run" / "metrics.jsonl").is_file()


def test_measure_step_rate_times_the_steps(tmp_path):
    rate = measure_step_rate(ToyTask(), cfg_of("step_delay_ms=20", "max_steps=3"), steps=10, skip=2)
    assert 10 < rate < 50  # 20 ms a step at most 50 steps/s; a machine 5x slow still over 10
    with pytest.raises(LinearizerError, match="steps > skip"):
        measure_step_rate(ToyTask(), cfg_of(), steps=2, skip=2)
