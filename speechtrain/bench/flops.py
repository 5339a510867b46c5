"""Model FLOPs of a training step (torch.utils.flop_counter) and model FLOPs utilisation (MFU).

FLOPs are counted once, on one eager fp32 step of the plain baseline loop (forward + backward of
every optimizer stage, no optimizer update), and expressed per padded mel frame. Each configuration's
FLOPs are that figure times the padded frames it processed: recomputation by activation
checkpointing is not counted (MFU counts model FLOPs, not hardware FLOPs), and attention's
quadratic term is scaled linearly (a small error for the short tiny-recipe utterances; state it
when you quote MFU of long-context models). MFU = FLOPs per second / the device's peak for the
configuration's precision; without a known peak (most CPUs) MFU is None.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def count_flops(fn: Callable[[], Any]) -> int | None:
    """FLOPs counted while ``fn()`` runs (matmuls, convolutions, attention), or None when the
    counter cannot run this code (then MFU is reported as None rather than guessed)."""
    try:
        from torch.utils.flop_counter import FlopCounterMode
    except ImportError:
        return None
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    total = int(counter.get_total_flops())
    return total if total > 0 else None


def peak_flops_for(probe: Any, precision: str, tf32: bool = False) -> float | None:
    """The device's peak FLOP/s for ``precision`` (bf16, fp16, fp32, tf32) from the hardware
    probe's table (``probe`` is what ``speechtrain.accel.probe_hardware()`` returned), or None
    when it is unknown (CPUs, GPUs missing from the table)."""
    if probe is None:
        return None
    try:
        from speechtrain.accel.probe import peak_flops
    except ImportError:
        return None
    try:
        value = peak_flops(probe, precision, tf32=tf32)
    except (KeyError, ValueError, TypeError):
        return None
    return float(value) if value else None


def mfu(flops: float | None, seconds: float, peak: float | None) -> float | None:
    """Model FLOPs utilisation: ``flops / seconds / peak`` (None when either is unknown)."""
    if flops is None or peak is None or peak <= 0 or seconds <= 0:
        return None
    return float(flops) / seconds / peak
