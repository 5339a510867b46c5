"""Deterministic algorithms: the same result every run (a debugging aid, not a speed-up)."""

from __future__ import annotations

import os

import torch

from speechtrain.accel.catalog import Acceleration, Card
from speechtrain.accel.record import AccelRecord


def apply_deterministic(enabled: bool) -> AccelRecord:
    """Deterministic algorithms everywhere (same result every run; slower, and some ops raise).

    Sets ``torch.use_deterministic_algorithms``, ``cudnn.deterministic`` and, for cuBLAS,
    ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` when not set (it must be set before the first cuBLAS call).
    Disabled: the defaults are restored (non-deterministic kernels allowed).
    """
    torch.use_deterministic_algorithms(bool(enabled))
    torch.backends.cudnn.deterministic = bool(enabled)
    if not enabled:
        return AccelRecord("deterministic", False, True, "off: fastest kernels, results may vary in the last bits")
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.benchmark = False
    return AccelRecord(
        "deterministic",
        True,
        True,
        "deterministic algorithms on, cuDNN autotuning off (slower; non-deterministic ops raise)",
        {"CUBLAS_WORKSPACE_CONFIG": os.environ["CUBLAS_WORKSPACE_CONFIG"]},
    )


ACCELERATION = Acceleration(
    key="accel.deterministic",
    record="deterministic",
    exact=True,
    order=0,  # first: cuDNN autotuning reads it
    apply=lambda on, ctx: apply_deterministic(bool(on)),
    off=None,  # not a speed-up: the ladder's rows keep the configured value
    card=Card(
        title="Deterministic algorithms",
        what="`torch.use_deterministic_algorithms(True)`, `cudnn.deterministic`, cuDNN autotuning off, "
        "`CUBLAS_WORKSPACE_CONFIG=:4096:8` if unset (set it before the first CUDA matmul).",
        helps="bit-identical reruns for debugging. Not a speed-up: it is slower, and ops without a deterministic "
        "kernel raise an error that names them. No ladder row and no probe rule (never switched on for you).",
        costs="speed.",
        own_loop="`apply_deterministic(True)`.",
    ),
)
