"""Fault tolerance: SIGKILL at random points and resume, corrupt checkpoints, read-only folders.

The killed run is a subprocess (``python tests/toy_task.py``); the reference is the
same training run uninterrupted in this process. Both use one thread, so the final weights,
EMA and optimizer state must be bitwise equal.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from linearizer.training.checkpoint import checkpoint_path, latest_checkpoint, read_checkpoint
from linearizer.training.config import apply_overrides
from linearizer.training.tracking import read_metrics
from linearizer.training.trainer import train
from toy_task import SCRIPT, ToyConfig, ToyTask

SETTINGS = [
    "dim=4",
    "width=8",
    "n_data=40",
    "batch_size=8",
    "threads=1",
    "progress=false",
    "ema_warmup=3",
    "lr=1e-2",
    "log_every=1",
    "ckpt_every=3",
    "keep_last=2",
]
STEPS = 60


def toy_command(run: Path, *extra: str, resume: bool = False) -> list[str]:
    cmd = [sys.executable, SCRIPT, str(run)]
    return cmd + (["--resume"] if resume else []) + ["--set", *SETTINGS, *extra]


def final_state(run: Path) -> dict:
    _, tensors = read_checkpoint(latest_checkpoint(run))
    return {k: v for k, v in tensors.items() if k.startswith(("model.", "ema.", "optim."))}


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, different


def kill_at_random(cmd: list[str], run: Path, delay_s: float) -> tuple[int, int]:
    """Start ``cmd``, SIGKILL it ``delay_s`` after its training loop starts; return the last
    step it logged and the step of the newest usable checkpoint it left (0 if none)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    status = run / "run.json"
    start_mtime = status.stat().st_mtime_ns if status.exists() else None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if status.exists() and status.stat().st_mtime_ns != start_mtime:
            break  # run.json is rewritten just before the loop starts
        time.sleep(0.01)
    time.sleep(delay_s)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    logged = [r["step"] for r in read_metrics(run) if "lr" in r]
    path = latest_checkpoint(run)
    return (logged[-1] if logged else 0), (0 if path is None else int(path.stem.split("_")[1]))


def test_sigkill_at_random_points_then_resume_is_bitwise_identical(tmp_path, recwarn):
    # recwarn: resuming past a checkpoint torn by a kill warns, as it should
    reference = train(
        ToyTask(),
        apply_overrides(ToyConfig(), [*SETTINGS, f"max_steps={STEPS}"]),
        tmp_path / "reference",
    )
    run = tmp_path / "killed"
    rng = random.Random(int(os.environ.get("LINEARIZER_KILL_SEED", "8")))
    reached = []
    for attempt in range(3):
        cmd = toy_command(run, f"max_steps={STEPS}", "step_delay_ms=8", resume=attempt > 0)
        reached.append(kill_at_random(cmd, run, rng.uniform(0.02, 0.25)))
    cfg = apply_overrides(ToyConfig(), [*SETTINGS, f"max_steps={STEPS}"])
    resumed = train(ToyTask(), cfg, run, resume=True)  # the last leg runs here, uninterrupted
    print(f"(last logged step, newest checkpoint) at each kill: {reached}")
    assert resumed.step == STEPS
    assert_same(final_state(run), final_state(tmp_path / "reference"))
    for name, value in reference.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[name]), name
    steps = [r["step"] for r in read_metrics(run) if "lr" in r]
    assert steps == list(range(1, STEPS + 1))  # killed tails were truncated on resume
    assert not list((run / "checkpoints").glob(".*.tmp"))


def test_corrupt_latest_checkpoint_falls_back_and_still_matches(tmp_path):
    def cfg(steps):
        return apply_overrides(ToyConfig(), [*SETTINGS, "keep_last=5", f"max_steps={steps}"])

    train(ToyTask(), cfg(12), tmp_path / "a")
    newest = checkpoint_path(tmp_path / "a", 12)
    blob = bytearray(newest.read_bytes())
    blob[-10] ^= 0x55
    newest.write_bytes(bytes(blob))
    with pytest.warns(UserWarning, match=r"ckpt_00000012.*corrupt.*falling back to ckpt_00000009"):
        result = train(ToyTask(), cfg(15), tmp_path / "a", resume=True)
    assert result.step == 15
    train(ToyTask(), cfg(15), tmp_path / "b")
    assert_same(final_state(tmp_path / "a"), final_state(tmp_path / "b"))


def _read_only_runner(folder: Path) -> list[str] | None:
    """A command prefix under which ``folder`` is read-only, or None if none can be made."""
    folder.chmod(0o555)
    if not os.access(folder, os.W_OK):
        return []  # an ordinary user: permissions suffice
    folder.chmod(0o755)
    if shutil.which("unshare") is None:
        return None
    probe = subprocess.run(
        [
            "unshare",
            "-m",
            "sh",
            "-c",
            f"mount --bind -o ro '{folder}' '{folder}' && ! touch '{folder}/x'",
        ],
        capture_output=True,
    )
    if probe.returncode != 0:
        return None  # root without the right to mount: cannot make a read-only folder
    return [
        "unshare",
        "-m",
        "sh",
        "-c",
        f"mount --bind -o ro '{folder}' '{folder}' && exec \"$@\"",
        "sh",
    ]


@pytest.mark.parametrize("case", ["fresh", "resume"])
def test_read_only_output_folder_is_a_clear_error(tmp_path, case):
    folder = tmp_path / "ro"
    folder.mkdir()
    run = folder / "run" if case == "fresh" else folder
    if case == "resume":
        train(ToyTask(), apply_overrides(ToyConfig(), [*SETTINGS, "max_steps=3"]), folder)
    prefix = _read_only_runner(folder)
    if prefix is None:
        pytest.skip("cannot make a read-only folder here (root without mount rights)")
    try:
        cmd = prefix + toy_command(run, "max_steps=6", resume=case == "resume")
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    finally:
        folder.chmod(0o755)
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("linearizer: error: cannot write")
    assert "Read-only file system" in lines[0] or "Permission denied" in lines[0]
