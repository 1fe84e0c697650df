"""The training loop every trainer (flow, projective, style) shares.

A trainer is a :class:`Task` (what to build, how to draw a batch, what loss to minimise) plus a
:class:`~linearizer.training.config.TrainConfig` (or a subclass holding the task's own options).
The loop supplies the rest: run folder and resolved ``config.json``, Adam with warm-up/decay and
gradient clipping, EMA, progress bar, ``metrics.jsonl`` (and trackio), checkpoints every
``ckpt_every`` steps and at the end, exact ``--resume``, a stop on non-finite losses, a wall-clock
budget, and ``torchrun`` data parallelism.

Plugging in a task::

    @dataclass
    class ToyConfig(TrainConfig):
        width: int = option(16, "hidden width")

    class ToyTask:
        kind = "toy"                       # recorded in checkpoints; a foreign one is refused

        def build(self, cfg):              # called once, after seeding torch from cfg.seed
            self.cfg = cfg
            self.data = torch.randn(1000, 4, generator=torch.Generator().manual_seed(1))
            return torch.nn.Sequential(torch.nn.Linear(4, cfg.width), torch.nn.Tanh(),
                                       torch.nn.Linear(cfg.width, 4))

        def batch(self, rng):              # this process's rows of the step's global batch
            return {"x": self.data[rng.indices(len(self.data))]}

        def loss(self, model, batch, rng): # mean over the rows; draw noise through rng
            noise = rng.randn(4, like=batch["x"])
            err = model(batch["x"] + 0.1 * noise) - batch["x"]
            return err.pow(2).mean(), {"mse": err.pow(2).mean().item()}

        def on_eval(self, model, step, run_dir):   # optional; rank 0, EMA weights, no grad
            return {"weight_norm": sum(p.norm().item() for p in model.parameters())}

    result = train(ToyTask(), ToyConfig(max_steps=100), "runs/toy")
    result = train(ToyTask(), resume_config("runs/toy", ToyConfig, ["max_steps=200"]),
                   "runs/toy", resume=True)

Determinism: every random draw of step ``s`` comes from generators seeded by
``(seed, s, stream)`` (:class:`~linearizer.training.random_streams.StepRandom`), the global
torch, numpy and Python RNGs are re-seeded from ``(seed, s)`` before each step, and the learning
rate is a function of ``s``; so
a checkpoint needs only the step (plus weights, optimizer and EMA) and ``--resume`` continues
bit-for-bit on CPU (same thread count; GPU kernels may be non-deterministic). Under
``torchrun`` every process draws the whole global batch from the same generators and keeps its
rows, so W processes reproduce one process up to summation order (see
:mod:`linearizer.training.distributed`). ``max_minutes`` ends a run at a step boundary with a
checkpoint and records the step reached in ``run.json``; resuming from it is exact, but *where*
a budgeted run stops depends on the machine's speed.

``Task.loss`` must return the *mean* over this process's rows (so DDP's gradient average is the
global mean) and must not draw randomness except through ``rng`` (or the global RNGs, which
are re-seeded per step and identical on every process).
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from .. import __version__
from ..errors import LinearizerError
from ..invertible.dropout import set_dropout_seed
from ..invertible.precision import conditioners_in, resolve_precision
from ..io import read_json, write_json
from . import distributed as D
from .allocator import keep_freed_memory
from .checkpoint import checkpoint_dir, latest_checkpoint, load_checkpoint, save_checkpoint
from .config import TrainConfig
from .ema import EMA
from .progress import Progress
from .random_streams import StepRandom, derive_seed, seed_globals
from .resume import check_resume_changes
from .schedule import lr_at
from .tracking import make_tracker, truncate_metrics


@runtime_checkable
class Task(Protocol):
    """What a trainer supplies; see the module docstring for an example.

    Optional methods: ``on_eval(model, step, run_dir) -> dict | None`` (rank 0, EMA weights
    applied, eval mode, no grad; numbers are logged as ``eval/<name>``, ``str``/``Path`` values as
    images), ``on_finish(model, ema, step, run_dir) -> dict | None`` (rank 0, once after the
    final checkpoint, raw weights in eval mode, no grad; ``ema`` is the :class:`EMA` or None;
    what it returns goes into ``run.json`` under ``finish``) and ``param_groups(model) ->
    list[dict]`` (optimizer groups; default: all parameters).
    """

    kind: str

    def build(self, cfg: Any) -> nn.Module: ...

    def batch(self, rng: StepRandom) -> dict[str, Any]: ...

    def loss(
        self, model: nn.Module, batch: dict[str, Any], rng: StepRandom
    ) -> tuple[Tensor, dict[str, Any]]: ...


class _LossModule(nn.Module):
    """Model + task loss as one module, so DDP sees the whole loss as its ``forward``.

    DDP syncs gradients only for work done inside its ``forward``; losses call arbitrary
    methods (``inverse``, encoders) on the model, so the loss itself is the forward.
    """

    def __init__(self, task: Task, model: nn.Module, precision: str = "float32") -> None:
        super().__init__()
        self.model = model
        self.precision = precision
        object.__setattr__(self, "_task", task)  # not a submodule even if the task is one

    def forward(self, batch: dict[str, Any], rng: StepRandom) -> tuple[Tensor, dict[str, Any]]:
        with conditioners_in(self.precision):
            return self._task.loss(self.model, batch, rng)


def make_optimizer(cfg: TrainConfig, params: Any) -> torch.optim.Optimizer:
    cls = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    return cls(
        params, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay
    )


def grad_norm(params: list[nn.Parameter]) -> Tensor:
    grads = [p.grad.detach().norm() for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    return torch.linalg.vector_norm(torch.stack(grads))


@dataclass
class TrainResult:
    """What :func:`train` returns (rank 0 and the others alike)."""

    run_dir: Path
    step: int
    stopped: str
    loss: float
    checkpoint: Path | None
    model: nn.Module
    ema: EMA | None
    seconds: float
    steps_per_s: float


class Trainer:
    """Runs a :class:`Task` under a :class:`TrainConfig` in ``run_dir``; see :func:`train`."""

    def __init__(self, task: Task, cfg: TrainConfig, run_dir: str | Path, resume: bool = False):
        if not isinstance(cfg, TrainConfig):
            raise LinearizerError("the trainer needs a TrainConfig (or a subclass of it)")
        for hook in ("build", "batch", "loss"):
            if not callable(getattr(task, hook, None)):
                raise LinearizerError(f"task {type(task).__name__} lacks {hook}()")
        self.task, self.cfg, self.resume = task, cfg, resume
        self.precision = "float32"  # resolved for the device when fit() starts
        self.run_dir = Path(run_dir)
        self.kind = str(getattr(task, "kind", type(task).__name__))

    def _prepare_folder(self, env: D.DistEnv) -> None:
        run, cfg = self.run_dir, self.cfg
        if not env.is_main:
            return
        if self.resume:
            if not (run / "config.json").is_file():
                raise LinearizerError(f"cannot resume {run}: not a run folder (no config.json)")
            check_resume_changes(read_json(run / "config.json"), cfg)
        elif any(checkpoint_dir(run).glob("ckpt_*")):
            raise LinearizerError(
                f"{run} already holds checkpoints; continue it with --resume {run} "
                "or choose another output folder"
            )
        write_json(run / "config.json", cfg.to_dict())
        for tmp in checkpoint_dir(run).glob(".ckpt_*.tmp"):  # writes a killed process left
            tmp.unlink(missing_ok=True)

    def _status(self, env: D.DistEnv, **fields: Any) -> None:
        if env.is_main:
            record = {
                "kind": self.kind,
                "library_version": __version__,
                "world": env.world,
                "conditioner_precision": self.precision,
            }
            write_json(self.run_dir / "run.json", {**record, **fields})

    def _build(self, env: D.DistEnv) -> tuple[nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(derive_seed(self.cfg.seed, "init"))
        model = self.task.build(self.cfg)
        if not isinstance(model, nn.Module):
            raise LinearizerError(f"{type(self.task).__name__}.build must return an nn.Module")
        model = model.to(env.device).train()
        groups = getattr(self.task, "param_groups", None)
        params = groups(model) if callable(groups) else list(model.parameters())
        return model, make_optimizer(self.cfg, params)

    def _init_pass(self, model: nn.Module, env: D.DistEnv) -> None:
        """Loss once on the full global batch of step 0, no gradients: data-dependent layers
        (ActNorm) initialise from the global batch, the same as in one process."""
        cfg = self.cfg
        seed_globals(cfg.seed, "init-pass")
        set_dropout_seed(model, derive_seed(cfg.seed, "init-pass", "dropout") % (1 << 31))
        data = StepRandom(cfg.seed, 0, "data", cfg.batch_size)
        noise = StepRandom(cfg.seed, 0, "noise", cfg.batch_size)
        with torch.no_grad():
            self.task.loss(model, _to_device(self.task.batch(data), env.device), noise)

    def _init_source(self) -> dict[str, Tensor]:
        """The weights of ``init_from``: a run of the same kind, or a shipped model."""
        from .runs import load_run  # runs resolves "pretrained:NAME" through registered sources

        return load_run(self.cfg.init_from, expect=self.kind).model.state_dict()

    def _warm_start(self, model: nn.Module, source: dict[str, Tensor]) -> None:
        """Start from ``source``; its data-dependent layers are initialised, so no init pass."""
        try:
            model.load_state_dict(source)
        except RuntimeError as e:  # torch lists every mismatch; the first one names the cause
            why = next((ln.strip() for ln in str(e).splitlines()[1:] if ln.strip()), str(e))
            raise LinearizerError(
                f"init_from={self.cfg.init_from}: its weights do not fit this run's network ({why})"
            ) from None

    def _restore(self, model, optimizer, ema, env: D.DistEnv) -> int:
        """Load the newest usable checkpoint on every rank; returns its step (0 if none)."""
        step = -1
        if env.is_main:
            path = latest_checkpoint(self.run_dir)
            step = -1 if path is None else int(path.stem.split("_")[1])
        step = D.broadcast_int(step, env)
        if step < 0:
            if env.is_main:
                warnings.warn(
                    f"{self.run_dir} has no usable checkpoint yet; starting at step 0", stacklevel=3
                )
            return -1
        path = checkpoint_dir(self.run_dir) / f"ckpt_{step:08d}.safetensors"
        load_checkpoint(path, model, optimizer=optimizer, ema=ema, model_kind=self.kind)
        return step

    def fit(self) -> TrainResult:
        cfg = self.cfg
        keep_freed_memory()
        threads = torch.get_num_threads()
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        env, created = D.setup(cfg.device)
        tracker = None
        try:
            D.shard(cfg.batch_size, env.rank, env.world)  # fail early on an uneven split
            self.precision = resolve_precision(cfg.conditioner_precision, env.device)
            # read before the folder is written: a wrong init_from leaves nothing behind
            source = self._init_source() if cfg.init_from and not self.resume else None
            self._prepare_folder(env)
            D.barrier(env)
            model, optimizer = self._build(env)
            ema = EMA(model, cfg.ema_decay, cfg.ema_warmup) if cfg.ema_decay > 0 else None
            start = self._restore(model, optimizer, ema, env) if self.resume else -1
            if start < 0:
                start = 0
                if cfg.init_from:  # a resumed run without a checkpoint reads its source now
                    self._warm_start(model, source or self._init_source())
                elif cfg.init_pass:
                    self._init_pass(model, env)
                if ema is not None:  # start the average from the data-initialised weights
                    ema = EMA(model, cfg.ema_decay, cfg.ema_warmup)
            if env.is_main:
                truncate_metrics(self.run_dir, start if start else -1)
            tracker = make_tracker(
                cfg.tracker, self.run_dir, cfg.to_dict(), cfg.tracker_project, env.is_main
            )
            self._status(env, status="running", step=start, max_steps=cfg.max_steps)
            result = self._loop(model, optimizer, ema, env, tracker, start)
            # Ranks leave together: a gloo group destroyed while the other rank still has work
            # in flight can abort that process at exit.
            D.barrier(env)
            return result
        finally:
            if tracker is not None:
                tracker.close()
            D.teardown(created)
            torch.set_num_threads(threads)

    def _loop(self, model, optimizer, ema, env, tracker, start: int) -> TrainResult:
        cfg, task = self.cfg, self.task
        runner = D.wrap(_LossModule(task, model, self.precision), env, cfg.ddp_find_unused)
        params = [p for g in optimizer.param_groups for p in g["params"]]
        budget_s = cfg.step_seconds()
        # the bar counts what ends the run: the clock's budget, or max_steps under a mere cap
        timed = budget_s if cfg.lr_clock == "time" else 0.0
        progress = Progress(
            cfg.progress and env.is_main, cfg.max_steps, start, timed, cfg.finish_minutes * 60
        )
        t0 = time.perf_counter()
        window_t, window_n, window_loss, window_logs = t0, 0, 0.0, {}
        step, last_loss, stopped, last_ckpt = start, float("nan"), "max_steps", None
        clock = 0.0  # wall time at the previous step, for lr_clock="time"
        try:
            while step < cfg.max_steps:
                lr = lr_at(cfg, step, clock)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                seed_globals(cfg.seed, step)
                # SharedDropout layers get this step's mask (forward and inverse then agree)
                set_dropout_seed(model, derive_seed(cfg.seed, step, "dropout") % (1 << 31))
                data = StepRandom(cfg.seed, step, "data", cfg.batch_size, env.rank, env.world)
                noise = StepRandom(cfg.seed, step, "noise", cfg.batch_size, env.rank, env.world)
                batch = _to_device(task.batch(data), env.device)

                optimizer.zero_grad(set_to_none=True)
                loss, logs = runner(batch, noise)
                if not isinstance(loss, Tensor) or loss.dim() != 0:
                    raise LinearizerError(f"{type(task).__name__}.loss must return a scalar tensor")
                loss.backward()
                if cfg.grad_clip > 0:
                    gnorm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
                else:
                    gnorm = grad_norm(params)
                over = budget_s > 0 and time.perf_counter() - t0 >= budget_s
                now_s = (time.perf_counter() - t0) if env.is_main else 0.0
                check = torch.tensor(
                    [float(loss.detach()), float(over), now_s], dtype=torch.float64
                )
                check = D.all_reduce_sum(check.to(env.device), env).cpu()
                mean_loss = float(check[0]) / env.world
                # every rank steps with the same rate: the clock is rank 0's, shared
                clock = float(check[2])
                if not math.isfinite(mean_loss) or not math.isfinite(float(gnorm)):
                    self._fail_non_finite(env, step, mean_loss, float(gnorm))
                optimizer.step()
                if ema is not None:
                    ema.update(model)
                step += 1
                last_loss = mean_loss

                window_n += 1
                window_loss += mean_loss
                for k, v in logs.items():
                    window_logs[k] = window_logs.get(k, 0.0) + float(v)
                logged = None
                if step % cfg.log_every == 0 or step == cfg.max_steps:
                    now = time.perf_counter()
                    rate = window_n / max(now - window_t, 1e-9)
                    logged = window_loss / window_n
                    extra = _mean_logs(window_logs, window_n, env)
                    tracker.log(
                        step,
                        {
                            "loss": logged,
                            "lr": lr,
                            "grad_norm": float(gnorm),
                            "steps_per_s": rate,
                            "samples_per_s": rate * cfg.batch_size,
                            "elapsed_s": now - t0,
                            **extra,
                        },
                    )
                    window_t, window_n, window_loss, window_logs = now, 0, 0.0, {}
                progress.update(step, logged, None if logged is None else rate, clock)

                if cfg.ckpt_every and step % cfg.ckpt_every == 0:
                    last_ckpt = self._save(model, optimizer, ema, env, step)
                if cfg.eval_every and step % cfg.eval_every == 0 and step != cfg.max_steps:
                    self._eval(model, ema, env, tracker, step)
                if float(check[1]) > 0:
                    stopped = "time budget"
                    break
        finally:
            progress.close()
        if last_ckpt is None or int(last_ckpt.stem.split("_")[1]) != step:
            last_ckpt = self._save(model, optimizer, ema, env, step) if step > start else None
        self._eval(model, ema, env, tracker, step)
        seconds = time.perf_counter() - t0
        rate = (step - start) / max(seconds, 1e-9)
        summary = {
            "step": step,
            "stopped": stopped,
            "loss": last_loss,
            "seconds": seconds,
            "steps_per_s": rate,
        }
        tracker.log_summary(step, summary)
        finish_start = time.perf_counter()
        # its time comes out of finish_minutes (the steps stopped that much before max_minutes)
        finish = self._hook("on_finish", env, model, None, ema, step, self.run_dir)
        finish_s = time.perf_counter() - finish_start
        self._status(
            env,
            status="finished" if stopped == "max_steps" else "stopped",
            stopped=stopped,
            step=step,
            max_steps=cfg.max_steps,
            seconds=seconds,
            loss=last_loss,
            **({"finish": finish} if finish else {}),
        )
        if stopped != "max_steps" and env.is_main:
            budget = f"{cfg.max_minutes:g}-minute budget"
            if cfg.finish_minutes:
                budget += f" ({cfg.finish_minutes:g} of them kept for the work after the steps)"
            print(
                f"linearizer: {budget} reached; stopped at step {step} of {cfg.max_steps} "
                f"(checkpoint saved)",
                file=sys.stderr,
            )
        # only worth a line when the work after the steps pushed the run past max_minutes
        kept_s = cfg.finish_minutes * 60
        over = cfg.max_minutes > 0 and seconds + finish_s > cfg.max_minutes * 60
        if env.is_main and kept_s and finish_s > kept_s and over:
            print(
                f"linearizer: the work after the steps took {finish_s:.1f} s, more than the "
                f"{kept_s:.1f} s of finish_minutes",
                file=sys.stderr,
            )
        D.barrier(env)
        return TrainResult(
            self.run_dir, step, stopped, last_loss, last_ckpt, model, ema, seconds, rate
        )

    def _save(self, model, optimizer, ema, env: D.DistEnv, step: int) -> Path | None:
        if env.is_main:
            save_checkpoint(
                self.run_dir,
                step,
                model,
                optimizer=optimizer,
                ema=ema,
                config=self.cfg.to_dict(),
                model_kind=self.kind,
                keep_last=self.cfg.keep_last,
            )
        return checkpoint_dir(self.run_dir) / f"ckpt_{step:08d}.safetensors"

    def _hook(self, name: str, env: D.DistEnv, model, ema: EMA | None, *args: Any) -> Any:
        """``task.<name>(model, *args)`` on rank 0, in eval mode without gradients and with the
        ``ema`` weights applied when given; None on other ranks or for a task without it."""
        hook = getattr(self.task, name, None)
        if not env.is_main or not callable(hook):
            return None
        model.eval()
        try:
            with torch.no_grad(), ema.applied(model) if ema is not None else nullcontext():
                return hook(model, *args)
        finally:
            model.train()

    def _eval(self, model, ema, env: D.DistEnv, tracker, step: int) -> None:
        out = self._hook("on_eval", env, model, ema, step, self.run_dir)
        if out:
            images = {k: v for k, v in out.items() if isinstance(v, (str, Path))}
            numbers = {f"eval/{k}": v for k, v in out.items() if k not in images}
            if numbers:
                tracker.log(step, numbers)
            if images:
                tracker.log_images(step, images)

    def _fail_non_finite(self, env: D.DistEnv, step: int, loss: float, gnorm: float) -> None:
        good = latest_checkpoint(self.run_dir) if env.is_main else None
        what = f"loss {loss}" if not math.isfinite(loss) else f"gradient norm {gnorm}"
        where = f"last good checkpoint: {good}" if good else "no checkpoint was written yet"
        self._status(env, status="failed", step=step, reason=f"non-finite {what}")
        raise LinearizerError(
            f"non-finite {what} at step {step + 1}; stopped without saving ({where}). "
            "Try a lower lr, grad_clip, or resume from that checkpoint."
        )


def _to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    return {k: v.to(device) if isinstance(v, Tensor) else v for k, v in batch.items()}


def _mean_logs(sums: dict[str, float], n: int, env: D.DistEnv) -> dict[str, float]:
    if not sums:
        return {}
    keys = sorted(sums)
    t = torch.tensor([sums[k] for k in keys], dtype=torch.float64, device=env.device)
    t = D.all_reduce_sum(t, env).cpu() / (n * env.world)
    return dict(zip(keys, t.tolist()))


def train(task: Task, cfg: TrainConfig, run_dir: str | Path, resume: bool = False) -> TrainResult:
    """Train ``task`` under ``cfg`` in ``run_dir`` (``resume=True`` continues from its newest
    usable checkpoint). Works the same in one process and under ``torchrun``."""
    return Trainer(task, cfg, run_dir, resume=resume).fit()
