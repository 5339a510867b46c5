"""Out-of-memory recognition and fault injection.

``SPEECHTRAIN_INJECT_OOM_FRAMES=N`` makes every training micro-batch whose padded frames exceed
N raise ``torch.OutOfMemoryError`` before its forward pass, so the OOM guard and the tuner can be
rehearsed (and tested) on a CPU. ``N0,N1,...`` gives each torchrun rank (``RANK``) its own limit
(the last one for ranks beyond the list): devices of different free memory, rehearsed.
"""

from __future__ import annotations

import os

import torch

INJECT_ENV = "SPEECHTRAIN_INJECT_OOM_FRAMES"

_OOM_MARKERS = (
    "out of memory",
    "CUDNN_STATUS_NOT_SUPPORTED",  # cuDNN's way of saying its workspace did not fit
    "CUDNN_STATUS_ALLOC_FAILED",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUDA error: out of memory",
)


def is_oom_error(exc: BaseException) -> bool:
    """True for CUDA OOM and the cuDNN/cuBLAS allocation-failure variants."""
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc) for m in _OOM_MARKERS)


def injected_oom_frames() -> int | None:
    """The injected limit in padded frames, or None."""
    raw = os.environ.get(INJECT_ENV)
    if not raw:
        return None
    try:
        limits = [int(x) for x in raw.split(",")]
    except ValueError:
        from speechtrain.errors import UserError

        raise UserError(
            f"{INJECT_ENV}={raw!r} is not an integer number of frames (or one per rank, comma-separated)"
        ) from None
    rank = int(os.environ.get("RANK", "0") or 0)
    return limits[min(rank, len(limits) - 1)]


def maybe_inject_oom(batch: object) -> None:
    """Raise ``torch.OutOfMemoryError`` when injection is on and the batch is over the limit."""
    limit = injected_oom_frames()
    if limit is not None and batch.padded_frames > limit:  # type: ignore[attr-defined]
        raise torch.OutOfMemoryError(
            f"injected OOM: batch of {batch.size} x {batch.padded_frames // max(batch.size, 1)} frames "  # type: ignore[attr-defined]
            f"= {batch.padded_frames} padded frames > {INJECT_ENV}={limit}"  # type: ignore[attr-defined]
        )
