"""The device a run uses, from ``train.device``."""

from __future__ import annotations

import torch

from speechtrain.errors import UserError


def resolve_device(name: str) -> torch.device:
    """``train.device`` ("auto", "cpu", "cuda", "cuda:N") as a device: ``auto`` is cuda when available."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"train.device={name} but no CUDA device is available; use train.device=auto or cpu")
    return dev
