"""The recommendation that every ``auto`` switch follows, from what the hardware probe found.

:mod:`speechtrain.accel.hardware` reads the machine (:func:`probe_hardware`). :func:`recommend` turns it
into settings with reasons: one rule per acceleration, declared in the acceleration's own module
(:func:`speechtrain.accel.catalog.accelerations`), plus the data-loader settings and notes below. The same
rules resolve ``auto`` in :func:`speechtrain.accel.apply_accelerations` and
:func:`speechtrain.accel.resolve_precision`, so the probe's advice and a run's choices agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from speechtrain.accel.catalog import accelerations
from speechtrain.accel.hardware import (
    GIB,
    GPU_TABLE,
    GpuSpec,
    HardwareInfo,
    cached_probe,
    cpu_bf16_instructions,
    cpu_name,
    lookup_gpu,
    peak_flops,
    probe_hardware,
)

__all__ = [
    "GIB",
    "GPU_TABLE",
    "GpuSpec",
    "HardwareInfo",
    "Recommendation",
    "as_overrides",
    "cached_probe",
    "cpu_bf16_instructions",
    "cpu_name",
    "decide",
    "lookup_gpu",
    "peak_flops",
    "probe_hardware",
    "recommend",
]


@dataclass
class Recommendation:
    """One setting with the reason. ``key`` is a config path (``accel.precision``) that can be
    given as ``key=value`` on the command line, or ``note.<topic>`` for advice that is not a key."""

    key: str
    value: Any
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "value": self.value, "reason": self.reason}


def _workers_for(cores: int, gpu: bool) -> int:
    if gpu:
        return max(1, min(8, cores // 2))
    # on a CPU run the workers take cores from the training threads
    return 0 if cores <= 4 else min(4, cores // 4)


def _loader_rules(info: HardwareInfo) -> list[Recommendation]:
    """The data-loader settings and notes (not accelerations: the loader rung of the ladder uses them)."""
    cores = info.cpu_cores
    if not info.has_gpu:
        return [
            Recommendation(
                "data.num_workers", _workers_for(cores, False), f"{cores} CPU cores shared by data loading and training"
            ),
            Recommendation("data.pin_memory", False, "no GPU: pinned memory only speeds host-to-GPU copies"),
        ]
    out = [
        Recommendation(
            "data.num_workers",
            _workers_for(cores, True),
            f"{cores} CPU cores: feed the GPU from worker processes, keep cores for the main process",
        ),
        Recommendation("data.pin_memory", True, "pinned host memory makes host-to-GPU copies asynchronous"),
    ]
    mem = info.gpu_memory_gib or 0.0
    if mem < 8:
        out.append(
            Recommendation(
                "note.frame_budget",
                "smaller",
                f"{mem:.1f} GiB GPU: start with a smaller data.max_frames and let `speechtrain tune` size batches",
            )
        )
    return out


def decide(info: HardwareInfo) -> dict[str, Recommendation]:
    """The settings for this hardware, by key: each acceleration's rule (in table order), then the loader
    settings and notes. :func:`recommend` lists them; ``auto`` switches in a run resolve through the same rules."""
    recs: list[Recommendation] = []
    for acc in accelerations():
        rule = acc.probe(info) if acc.probe is not None else None
        if rule is not None:
            recs.append(Recommendation(acc.key, *rule))
    recs += _loader_rules(info)
    return {r.key: r for r in recs}


def recommend(info: HardwareInfo) -> list[Recommendation]:
    """The recommended settings for this hardware, each with its reason."""
    return list(decide(info).values())


def as_overrides(recs: list[Recommendation]) -> list[str]:
    """The config recommendations as ``key=value`` command-line overrides (notes left out)."""
    out = []
    for r in recs:
        if r.key.startswith("note."):
            continue
        value = str(r.value).lower() if isinstance(r.value, bool) else r.value
        out.append(f"{r.key}={value}")
    return out
