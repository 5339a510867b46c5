"""The device a run uses, from ``train.device``."""

from __future__ import annotations

import os

import torch

from speechtrain.errors import UserError


def local_rank() -> int | None:
    """``LOCAL_RANK`` as torchrun sets it for each worker (None outside torchrun)."""
    value = os.environ.get("LOCAL_RANK")
    return int(value) if value not in (None, "") else None


def resolve_device(name: str) -> torch.device:
    """``train.device`` ("auto", "cpu", "cuda", "cuda:N") as a device: ``auto`` is cuda when available.

    Under torchrun, ``auto`` and ``cuda`` mean this worker's GPU, ``cuda:LOCAL_RANK`` (one device per local rank).
    """
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"train.device={name} but no CUDA device is available; use train.device=auto or cpu")
    local = local_rank()
    if dev.type == "cuda" and dev.index is None and local is not None:
        if local >= torch.cuda.device_count():
            raise UserError(
                f"LOCAL_RANK={local} but this machine has {torch.cuda.device_count()} GPU(s): start at most that "
                "many processes per node (torchrun --nproc-per-node)"
            )
        dev = torch.device("cuda", local)
    return dev


def load_average() -> float | None:
    """The host's 1-minute load average (None where the platform has none)."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):  # not on every platform
        return None


def usable_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def foreign_load(load: float | None, own_threads: int, cores: int) -> float | None:
    """The load other processes add beyond ``own_threads`` (a measurement at N threads loads the host by
    about N itself) when it reaches half of the ``cores``: then timings taken on the CPU are unreliable.
    None when the host was quiet enough (or no load average is known). Shared by the bench and the tuner."""
    if load is None:
        return None
    extra = load - own_threads
    return extra if extra >= 0.5 * max(1, cores) else None
