"""ImageTask: what the flow, projective and style tasks share."""

from __future__ import annotations

import pytest
import torch

from linearizer.flow.task import FlowTask
from linearizer.projective.task import ProjectiveTask
from linearizer.style.task import StyleTask
from linearizer.training.config import resolve
from linearizer.training.image_task import GRID_SEED_OFFSET, ImageTask
from linearizer.training.runs import run_kind
from linearizer.training.trainer import StepRandom


def test_each_task_registers_its_kind_with_what_it_overrides():
    assert [FlowTask.kind, ProjectiveTask.kind, StyleTask.kind] == ["flow", "projective", "style"]
    flow, projective, style = run_kind("flow"), run_kind("projective"), run_kind("style")
    assert flow.attach is not None and flow.label is None  # the calibration; no finer kind
    assert projective.label is not None and projective.attach is None
    assert style.build.__func__ is StyleTask.model_for_run.__func__  # its bank's styles
    with pytest.raises(TypeError, match="needs its config class"):
        type("NoConfig", (ImageTask,), {}, kind="no-config")


@pytest.mark.parametrize("task, kind", [(FlowTask, "flow"), (ProjectiveTask, "projective")])
def test_grid_noise_is_fixed_per_seed_and_apart_from_the_step_streams(task, kind):
    cfg = resolve(kind, "smoke", ["seed=3", "n_samples=5"])
    size = cfg.network.img_size
    images = torch.rand(20, 1, size, size)
    t = task(images)
    t.build(cfg)
    gen = torch.Generator().manual_seed(3 + GRID_SEED_OFFSET)
    assert torch.equal(t.grid_noise, torch.randn(5, 1, size, size, generator=gen))
    key = "x1" if kind == "flow" else "x"
    rows = t.batch(StepRandom(cfg.seed, 0, "data", 4, 0, 1))[key]
    assert rows.shape == (4, 1, size, size) and all(
        (rows[i] == images).flatten(1).all(1).any() for i in range(4)
    )
