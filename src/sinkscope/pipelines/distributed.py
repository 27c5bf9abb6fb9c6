"""Data parallelism under `torchrun`: joining and leaving the `torch.distributed` process group.

`torchrun --nproc-per-node N` starts N processes and describes the group in environment variables: `RANK`
(this process, 0..N-1), `WORLD_SIZE` (N) and `LOCAL_RANK` (its GPU on this node). The command line joins the
group with `distributed_context`; a pipeline reads the running group, if any, and all-reduces its statistics.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class ProcessGroup:
    """This process's place in the group: `rank` of `world` processes, and the `device` it computes on."""

    rank: int
    world: int
    device: str


def launched_rank() -> int:
    """This process's rank as `torchrun` set it (`RANK`), 0 when run alone; known before the group is joined,
    so that rank 0 alone can claim an output directory first."""
    return int(os.environ.get("RANK", "0"))


@contextmanager
def distributed_context(device: str = "cpu") -> Iterator[ProcessGroup]:
    """Join the process group that `torchrun` describes for the duration of the block; leave it on exit.

    Run alone (`WORLD_SIZE` unset or 1) nothing is joined: rank 0 of 1 on `device`. Under `torchrun` the
    backend is gloo on CPU and nccl when `device` is not "cpu" and CUDA is available, and each process takes
    one GPU, `cuda:LOCAL_RANK` (a CPU `device` stays "cpu"). A group that was already initialised (by the
    caller) is used as it is and left to its owner.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        yield ProcessGroup(0, 1, device)
        return
    import torch
    import torch.distributed as dist

    joined = not dist.is_initialized()
    if joined:
        dist.init_process_group("nccl" if device != "cpu" and torch.cuda.is_available() else "gloo")
    try:
        rank = dist.get_rank()
        local = device if device == "cpu" else f"cuda:{os.environ.get('LOCAL_RANK', rank)}"
        yield ProcessGroup(rank, dist.get_world_size(), local)
    finally:
        if joined:
            dist.destroy_process_group()
