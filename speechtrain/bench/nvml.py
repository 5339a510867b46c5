"""GPU busy share sampled through NVML in a background thread (pynvml from nvidia-ml-py, optional).

NVML's ``utilization.gpu`` is the percentage of the last sample period (1/6 s to 1 s depending on
the GPU) during which at least one kernel was running. It says "the GPU had work", not "the GPU
was used well": a tiny kernel keeps it at 100 %. Read it beside MFU, never instead of it.
"""

from __future__ import annotations

import threading
from typing import Any


def _load_pynvml() -> Any | None:
    try:
        import pynvml  # lazy: optional dependency (pip install nvidia-ml-py)
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver / no GPU: NVML raises its own error types
        return None
    return pynvml


class GpuBusySampler:
    """Context manager: samples GPU utilization every ``interval`` seconds while the block runs.

    ``fraction`` is the mean busy share in [0, 1], or None when NVML is unavailable (no pynvml,
    no NVIDIA driver, a CPU device) or no sample was taken.
    """

    def __init__(self, device_index: int | None, interval: float = 0.05) -> None:
        self.device_index = device_index
        self.interval = float(interval)
        self.samples: list[float] = []
        self.available = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Any = None
        self._handle: Any = None

    def __enter__(self) -> GpuBusySampler:
        if self.device_index is None:
            return self
        self._nvml = _load_pynvml()
        if self._nvml is None:
            return self
        try:
            self._handle = self._nvml.nvmlDeviceGetHandleByIndex(self._physical_index(self.device_index))
        except Exception:  # NVMLError: index out of range, permissions
            return self
        self.available = True
        self._thread = threading.Thread(target=self._loop, name="speechtrain-nvml", daemon=True)
        self._thread.start()
        return self

    @staticmethod
    def _physical_index(index: int) -> int:
        # CUDA_VISIBLE_DEVICES renumbers devices for torch but not for NVML
        import os

        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible:
            parts = [p.strip() for p in visible.split(",") if p.strip()]
            if index < len(parts) and parts[index].isdigit():
                return int(parts[index])
        return index

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                util = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
                self.samples.append(float(util.gpu) / 100.0)
            except Exception:  # a transient NVML error: skip this sample
                pass
            self._stop.wait(self.interval)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass

    @property
    def fraction(self) -> float | None:
        """Mean busy share over the samples, or None without NVML."""
        if not self.available or not self.samples:
            return None
        return sum(self.samples) / len(self.samples)
