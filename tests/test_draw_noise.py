"""The flow objective's draws: ``draw_noise`` on a training step's random stream is the stream
the flow trainer draws (same values, same order, so checkpoints and golden runs replay)."""

from __future__ import annotations

import pytest
import torch

from linearizer.flow import task as flow_task
from linearizer.flow.config import FlowConfig
from linearizer.flow.objective import draw_noise
from linearizer.training.random_streams import StepRandom


class _Parts:
    """Class labels of an unconditional run: none, but one draw, to see where the stream is."""

    def train_labels(self, batch, rng, like):
        self.after = rng.rand(like=like)
        return None


def _trainer_draws(cfg: FlowConfig, x1: torch.Tensor, rng: StepRandom, monkeypatch):
    seen = {}
    monkeypatch.setattr(flow_task, "flow_loss", lambda model, x1, draws, **kw: seen.update(draws))
    task = flow_task.FlowTask.__new__(flow_task.FlowTask)
    task.cfg, task.parts, task.distance = cfg, _Parts(), None
    task.loss(None, {"x1": x1}, rng)
    return seen, task.parts.after


@pytest.mark.parametrize("times, groups", [("uniform", 0), ("logit-normal", 0), ("uniform", 3)])
@pytest.mark.parametrize("rank, world", [(0, 1), (1, 2)])
def test_draw_noise_replays_the_trainers_stream(times, groups, rank, world, monkeypatch):
    cfg = FlowConfig(time_sampling=times, time_groups=groups)
    x1 = torch.rand(8 // world, 1, 4, 4)
    trained, after = _trainer_draws(cfg, x1, StepRandom(3, 5, "noise", 8, rank, world), monkeypatch)
    rng = StepRandom(3, 5, "noise", 8, rank, world)
    drawn = draw_noise(x1, rng, times=times, groups=groups)
    assert sorted(drawn) == sorted(trained) == ["n0", "n1", "t", "x0"]
    assert all(torch.equal(drawn[k], trained[k]) for k in drawn)
    assert torch.equal(rng.rand(like=x1), after)  # the stream continues at the same place


def test_a_generator_draws_the_batch_in_the_fixed_order():
    x1 = torch.zeros(4, 1, 2, 2)
    gen = torch.Generator().manual_seed(0)
    t = torch.rand(4, generator=gen)
    rest = [torch.randn(x1.shape, generator=gen) for _ in range(3)]
    drawn = draw_noise(x1, torch.Generator().manual_seed(0))
    assert torch.equal(drawn["t"], t)
    assert all(torch.equal(drawn[k], r) for k, r in zip(("x0", "n0", "n1"), rest))
