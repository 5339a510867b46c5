"""Allocator statistics, the per-process memory cap and the retry-storm warning.

``memory_stats(device)`` is cheap enough to call at every logging interval: on CUDA it reads the
caching allocator's counters (no device sync); on the CPU it reads the process's resident set
size. Figures are bytes; :func:`format_bytes` prints them as GiB.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch

from speechtrain.accel.record import AccelRecord

GIB = 1024**3


def format_bytes(n: int | float | None) -> str:
    """Bytes as GiB (``'-'`` for None); below 0.01 GiB the MiB follow in brackets."""
    if n is None:
        return "-"
    gib = n / GIB
    if abs(gib) >= 1 or gib == 0:
        return f"{gib:.2f} GiB"
    text = f"{gib:.3f} GiB"
    return text if abs(gib) >= 0.01 else f"{text} ({n / 1024**2:.1f} MiB)"


def _as_device(device: torch.device | str | None) -> torch.device:
    if device is None:
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(device)
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def _proc_status_bytes(field: str) -> int | None:
    """A ``kB`` field of /proc/self/status (Linux) in bytes, or None where there is no /proc."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _peak_rss_bytes() -> int | None:
    peak = _proc_status_bytes("VmHWM")
    if peak is not None:
        return peak
    try:
        import resource

        ru = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except (ImportError, OSError):
        return None
    return int(ru) if sys.platform == "darwin" else int(ru) * 1024  # macOS reports bytes, Linux kB


def _rss_bytes() -> int | None:
    rss = _proc_status_bytes("VmRSS")
    if rss is not None:
        return rss
    try:
        import psutil  # optional; only where /proc is missing

        return int(psutil.Process(os.getpid()).memory_info().rss)
    except ImportError:
        return None


def memory_stats(device: torch.device | str | None = None) -> dict[str, Any]:
    """Memory figures of ``device`` (bytes unless named otherwise).

    CUDA: ``allocated``, ``reserved``, ``peak`` (max allocated since the last :func:`reset_peak`),
    ``fragmentation`` (1 - allocated/reserved: cached blocks the allocator holds but does not use),
    ``alloc_retries`` (cudaMalloc failures that forced a cache flush and retry: a sign of memory
    pressure), ``num_ooms``. ``rss``/``peak_rss`` are None.

    CPU: ``rss`` and ``peak_rss`` (resident set size of this process, its high-water mark); the
    CUDA keys are None.
    """
    device = _as_device(device)
    out: dict[str, Any] = {
        "device": str(device),
        "allocated": None,
        "reserved": None,
        "peak": None,
        "fragmentation": None,
        "alloc_retries": None,
        "num_ooms": None,
        "rss": None,
        "peak_rss": None,
    }
    if device.type == "cuda":
        allocated = int(torch.cuda.memory_allocated(device))
        reserved = int(torch.cuda.memory_reserved(device))
        counters = torch.cuda.memory_stats(device)
        out.update(
            allocated=allocated,
            reserved=reserved,
            peak=int(torch.cuda.max_memory_allocated(device)),
            fragmentation=(1.0 - allocated / reserved) if reserved > 0 else 0.0,
            alloc_retries=int(counters.get("num_alloc_retries", 0)),
            num_ooms=int(counters.get("num_ooms", 0)),
        )
    else:
        out.update(rss=_rss_bytes(), peak_rss=_peak_rss_bytes())
    return out


def peak_bytes(device: torch.device | str | None = None) -> int | None:
    """The peak figure of ``device``: max allocated on CUDA, peak RSS on the CPU."""
    stats = memory_stats(device)
    return stats["peak"] if stats["peak"] is not None else stats["peak_rss"]


def reset_peak(device: torch.device | str | None = None) -> bool:
    """Reset the peak counter: CUDA's max allocated; on Linux the process's peak RSS (VmHWM, by
    writing ``5`` to /proc/self/clear_refs). Returns False where the peak cannot be reset (then
    the CPU figure is a process-lifetime high-water mark)."""
    device = _as_device(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return True
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        return False
    return True


def set_memory_fraction(fraction: float | None, device: torch.device | str | None = None) -> AccelRecord:
    """Cap this process's share of the GPU's memory (``torch.cuda.set_per_process_memory_fraction``).

    Returns an :class:`~speechtrain.accel.record.AccelRecord` like the accelerations do: on the
    CPU (or with ``fraction=None``) nothing is applied and ``detail`` says why.
    """
    if fraction is None:
        return AccelRecord("memory_fraction", False, True, "not set (train.memory_fraction is None)")
    if not 0 < fraction <= 1:
        from speechtrain.config import ConfigError

        raise ConfigError(f"memory_fraction must be in (0, 1], got {fraction!r}")
    device = _as_device(device)
    if device.type != "cuda":
        detail = f"not applied on {device.type}: the cap is a CUDA caching-allocator limit"
        return AccelRecord("memory_fraction", False, True, detail, {"fraction": fraction})
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    total = torch.cuda.get_device_properties(device).total_memory
    detail = f"capped at {fraction:.2f} of {format_bytes(total)} = {format_bytes(fraction * total)}"
    return AccelRecord(
        "memory_fraction", True, True, detail, {"fraction": fraction, "limit_bytes": int(fraction * total)}
    )


class RetryStormDetector:
    """Warns when the CUDA allocator keeps flushing its cache and retrying (``num_alloc_retries``).

    A few retries are harmless; many per logging interval mean every step is close to the limit
    and pays for a cache flush (slow) and is one long utterance away from an OOM.
    ``update(stats)`` takes :func:`memory_stats` output once per interval and returns a warning
    (with advice) when the counter grew by more than ``threshold`` since the previous call.
    """

    def __init__(self, threshold: int = 10) -> None:
        if threshold < 0:
            raise ValueError(f"threshold must be >= 0, got {threshold}")
        self.threshold = int(threshold)
        self.last: int | None = None
        self.warnings = 0

    def update(self, stats: dict[str, Any]) -> str | None:
        retries = stats.get("alloc_retries")
        if retries is None:
            return None
        retries = int(retries)
        previous, self.last = self.last, retries
        if previous is None:
            return None
        grown = retries - previous
        if grown <= self.threshold:
            return None
        self.warnings += 1
        frag = stats.get("fragmentation")
        frag_text = f"; {frag:.0%} of reserved memory is cached but unused" if frag is not None else ""
        return (
            f"allocator retry storm: {grown} cudaMalloc retries since the last log (threshold {self.threshold})"
            f"{frag_text}. Each retry flushes the cache and slows the step, and the next long batch may run out of "
            "memory. Lower data.max_frames (or run `speechtrain tune` to size batches per bucket), set "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to reduce fragmentation, or set data.pad_multiple "
            "so that batch shapes repeat."
        )

    def state_dict(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "last": self.last, "warnings": self.warnings}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.threshold = int(state.get("threshold", self.threshold))
        self.last = state.get("last")
        self.warnings = int(state.get("warnings", 0))
