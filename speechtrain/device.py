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
