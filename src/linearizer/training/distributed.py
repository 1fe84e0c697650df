"""Running the trainer under ``torchrun``: process-group setup, batch sharding, rank-0 duties.

``torchrun`` sets ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` (and the rendezvous address) in
every process; :func:`setup` reads them and joins the group with gloo on CPU or NCCL on GPUs.
Without them everything here degrades to a single process (no process group at all).

How W processes train like one: every process draws the *global* batch and all noise from the
same per-step generator, then keeps rows ``[r*B/W, (r+1)*B/W)`` (:func:`shard`); losses are
means over the local rows and DDP averages gradients, so the update equals one process with
batch B up to floating-point summation order. Only rank 0 writes checkpoints, logs and figures.

One machine, 2 processes (CPU or 2 GPUs)::

    torchrun --standalone --nproc_per_node 2 -m linearizer.cli.main train flow --preset cpu

Two machines with 8 GPUs each (run on both, ``--node_rank`` 0 and 1)::

    torchrun --nnodes 2 --nproc_per_node 8 --node_rank 0 \\
        --rdzv_backend c10d --rdzv_endpoint HOST0:29500 -m linearizer.cli.main train flow ...
"""

from __future__ import annotations

import datetime
import gc
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from ..errors import LinearizerError


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits: rank among ``world`` processes, its device and backend."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    backend: str = ""

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1


def env_ranks() -> tuple[int, int, int]:
    """``(rank, world, local_rank)`` from the torchrun environment (``(0, 1, 0)`` without it)."""
    try:
        rank = int(os.environ.get("RANK", "0"))
        world = int(os.environ.get("WORLD_SIZE", "1"))
        local = int(os.environ.get("LOCAL_RANK", str(rank)))
    except ValueError as e:
        raise LinearizerError(
            f"bad torchrun environment (RANK/WORLD_SIZE/LOCAL_RANK): {e}"
        ) from None
    if world < 1 or not 0 <= rank < world:
        raise LinearizerError(f"bad torchrun environment: RANK={rank}, WORLD_SIZE={world}")
    return rank, world, local


def pick_device(preference: str, local_rank: int = 0) -> torch.device:
    """``auto`` takes this process's GPU (``cuda:LOCAL_RANK``) when there is one, else the CPU."""
    if preference == "auto":
        preference = "cuda" if torch.cuda.is_available() else "cpu"
    if preference.startswith("cuda"):
        if not torch.cuda.is_available():
            raise LinearizerError(f"device {preference!r} requested but CUDA is not available")
        if preference == "cuda":
            return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device(preference)


def setup(device: str = "auto", timeout_s: float = 600.0) -> tuple[DistEnv, bool]:
    """Join the torchrun process group if there is one; returns ``(env, created)``.

    ``created`` tells the caller it owns the group and should call :func:`teardown`.
    """
    rank, world, local = env_ranks()
    dev = pick_device(device, local)
    if world == 1:
        return DistEnv(device=dev), False
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    created = not dist.is_initialized()
    if created:
        backend = "nccl" if dev.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_s))
    return DistEnv(rank, world, local, dev, dist.get_backend()), created


def teardown(created: bool) -> None:
    if created and dist.is_initialized():
        # a DDP wrapper keeps the group alive through reference cycles; left to the interpreter's
        # exit, the group's worker threads are torn down too late and the process can abort
        gc.collect()
        dist.destroy_process_group()


def shard(global_batch: int, rank: int, world: int) -> slice:
    """This rank's rows of a global batch; the batch must split evenly."""
    if global_batch % world:
        raise LinearizerError(
            f"batch_size {global_batch} does not split over {world} processes; "
            f"use a multiple of {world}"
        )
    per = global_batch // world
    return slice(rank * per, (rank + 1) * per)


def wrap(module: nn.Module, env: DistEnv, find_unused: bool = False) -> nn.Module:
    """DistributedDataParallel around ``module`` when running with several processes."""
    if not env.distributed:
        return module
    from torch.nn.parallel import DistributedDataParallel as DDP

    ids = [env.device.index] if env.device.type == "cuda" else None
    return DDP(module, device_ids=ids, find_unused_parameters=find_unused)


def all_reduce_sum(t: torch.Tensor, env: DistEnv) -> torch.Tensor:
    """Sum over processes (in place, returned); identity on one process."""
    if env.distributed:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def barrier(env: DistEnv) -> None:
    if env.distributed:
        dist.barrier()


def broadcast_int(value: int, env: DistEnv) -> int:
    """Rank 0's integer on every rank (e.g. the step to resume from)."""
    if not env.distributed:
        return int(value)
    t = torch.tensor([int(value)], dtype=torch.int64, device=env.device)
    dist.broadcast(t, src=0)
    return int(t.item())
