"""Data-parallel runs under ``torchrun`` (or ``accelerate launch``, which sets the same variables).

A training command run by ``torchrun --nproc_per_node K`` finds RANK/WORLD_SIZE/LOCAL_RANK in its
environment, joins a process group (NCCL on GPUs, gloo on CPUs), shards each global batch by
rank and gathers contrastive negatives across processes with gradients.
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

# How long a process waits at a barrier (e.g. while rank 0 runs the teacher pass over a large corpus)
# before the run fails; minutes, TINYGLOT_DIST_TIMEOUT_MIN overrides it.
DEFAULT_TIMEOUT_MIN = 180
# How long :func:`shutdown_distributed` leaves the GIL to gloo's threads before the process group goes.
SETTLE_SECONDS = 0.5


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def gather(self, t: torch.Tensor) -> tuple[torch.Tensor, int]:
        """All processes' rows of ``t`` (autograd flows back to each owner) and this rank's offset."""
        if not self.enabled:
            return t, 0
        import warnings

        from torch.distributed.nn.functional import all_gather

        with warnings.catch_warnings():  # deprecated in favour of a private API; still correct
            warnings.simplefilter("ignore", FutureWarning)
            parts = all_gather(t.contiguous())
        return torch.cat(parts, dim=0), self.rank * t.shape[0]

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def all_reduce_sum(self, value: float) -> float:
        """The sum of ``value`` over all processes (no gradient)."""
        return self.all_reduce_mean(value) * self.world

    def all_reduce_mean(self, value: float) -> float:
        if not self.enabled:
            return value
        t = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(t)
        return float(t.item()) / self.world


def init_distributed(device: torch.device) -> DistContext:
    """Join the process group when launched by torchrun; a single-process context otherwise."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistContext()
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        # gloo serves the small CPU reductions (logged loss parts) next to NCCL on GPUs
        backend = "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"
        minutes = int(os.environ.get("TINYGLOT_DIST_TIMEOUT_MIN", str(DEFAULT_TIMEOUT_MIN)))
        dist.init_process_group(backend=backend, timeout=datetime.timedelta(minutes=minutes))
    return DistContext(rank=rank, world=world, local_rank=local_rank)


def shutdown_distributed() -> None:
    """Leave the process group once every process is done with it.

    gloo's worker threads free a finished collective's tensors after the caller has moved on, and a
    tensor Python has already dropped needs the GIL to be freed.  The process group's destructor joins
    those threads while holding the GIL (from the DDP reducer's or the group's deallocation), so a worker
    thread still waiting for the GIL then waits forever: a ``torchrun`` run that hung after its last step
    under load (the thread in ``~AsyncAllreduceWork`` -> ``decref_pyobject`` -> ``take_gil``, the main
    thread in ``~ProcessGroupGloo`` -> ``std::thread::join``).  After the last barrier this process
    sleeps, the GIL released, so those threads finish before anything is destroyed."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    dist.barrier()
    time.sleep(SETTLE_SECONDS)
    dist.destroy_process_group()


class LossModule(torch.nn.Module):
    """A recipe's micro-batch loss run inside ``forward``.

    DistributedDataParallel synchronises gradients only for passes through its own ``forward``; the
    distillation recipes call ``model.embed`` (and heads, embedding layers) from their loss functions,
    so the whole loss runs in here and DDP wraps this module.
    """

    def __init__(self, model: torch.nn.Module, loss: Callable[[torch.nn.Module, int], Any]) -> None:
        super().__init__()
        self.model = model
        self._loss = loss

    def forward(self, index: int) -> Any:
        return self._loss(self.model, index)


def data_parallel(model: torch.nn.Module, micro_loss: Callable[[torch.nn.Module, int], Any], ctx: DistContext,
                  device: torch.device) -> tuple[torch.nn.Module, Callable[[torch.nn.Module, int], Any]]:
    """``(net, micro_loss)`` for :meth:`TrainLoop.run`: unchanged in one process; under torchrun a DDP
    module over :class:`LossModule` (unused parameters allowed: a stage may train part of a model,
    a switched-off loss leaves its head idle) and a loss that runs through it."""
    if not ctx.enabled:
        return model, micro_loss
    ddp = torch.nn.parallel.DistributedDataParallel(
        LossModule(model, micro_loss), device_ids=[device.index or 0] if device.type == "cuda" else None,
        find_unused_parameters=True)
    return ddp, lambda net, index: net(index)
