"""The process group as the Trainer sees it: rank and world size, one agreement, gradient sync.

Gradients are averaged with one all-reduce per parameter after the backward passes of a stage.
This is the whole of the current multi-process support (DDP replaces it in a later issue); it is
kept here, in one small function, so that the loop does not change when it goes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import torch

from speechtrain.errors import UserError


def world() -> tuple[int, int]:
    """(rank, world size) of the process group; (0, 1) without one."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def init_from_env() -> bool:
    """Join the process group that a launcher (``torchrun``) describes in the environment (``WORLD_SIZE`` > 1,
    ``RANK``, ``MASTER_ADDR``/``MASTER_PORT``; on CUDA, ``LOCAL_RANK`` picks the GPU). Without it each
    process would train alone, all into one directory. True if a group was joined here."""
    world_size = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world_size <= 1 or (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return False
    missing = [k for k in ("RANK", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing or not torch.distributed.is_available():
        raise UserError(
            f"WORLD_SIZE={world_size} is set but {', '.join(missing) or 'torch.distributed'} is not available: "
            f"launch with `torchrun --nproc_per_node=N -m speechtrain train ...`, or unset WORLD_SIZE"
        )
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    torch.distributed.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return True


def any_rank(flag: bool, device: torch.device, world_size: int) -> bool:
    """True if ``flag`` is set on any rank (one all-reduce under a process group)."""
    if world_size == 1:
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return bool(t.item())  # host sync: ranks must agree before going on


def sync_grads(params: Iterable[torch.nn.Parameter], world_size: int) -> None:
    """Average the gradients of ``params`` over the ranks (a no-op for one process)."""
    if world_size == 1:
        return
    for p in params:
        if p.grad is not None:
            torch.distributed.all_reduce(p.grad)
            p.grad.div_(world_size)
