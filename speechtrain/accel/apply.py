"""apply_accelerations: every switch of ``cfg.accel`` resolved (``auto`` through the probe) and applied."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from speechtrain.accel.allocator import apply_cpu_allocator
from speechtrain.accel.backends import apply_cudnn_benchmark, apply_deterministic, apply_tf32
from speechtrain.accel.checkpointing import apply_activation_checkpointing
from speechtrain.accel.compile import apply_compile
from speechtrain.accel.memory_format import apply_channels_last
from speechtrain.accel.precision import PrecisionPlan, resolve_precision
from speechtrain.accel.probe import HardwareInfo, cached_probe, decide
from speechtrain.accel.record import AccelRecord, merge_records
from speechtrain.accel.sdpa import apply_sdpa

if TYPE_CHECKING:
    from speechtrain.config import AccelConfig


@dataclass
class AccelPlan:
    """What a run does: one record per acceleration, the precision plan, and how each switch was
    resolved (``{"key": {"config": ..., "value": ..., "why": ...}}``)."""

    records: list[AccelRecord]
    precision: PrecisionPlan
    device: str
    resolved: dict[str, dict[str, Any]] = field(default_factory=dict)
    hardware: HardwareInfo | None = None

    def record(self, name: str) -> AccelRecord | None:
        """The record named ``name`` (e.g. ``"compile"``), or None."""
        return next((r for r in self.records if r.name == name), None)

    def compile_stats(self) -> dict[str, Any] | None:
        """Dynamo counters (frames compiled, graph breaks, recompiles) when compile is on, else None.
        Log it now and then: a recompile count that keeps growing means shapes vary too much."""
        rec = self.record("compile")
        if rec is None or not rec.applied:
            return None
        from speechtrain.accel.compile import compile_stats

        return compile_stats()

    def records_dict(self) -> dict[str, Any]:
        """The content of ``accel.json``."""
        return {
            "device": self.device,
            "precision": self.precision.to_dict(),
            "records": [r.to_dict() for r in self.records],
            "resolved": self.resolved,
            "hardware": None if self.hardware is None else self.hardware.to_dict(),
        }

    def summary(self) -> str:
        """Text printed at the start of a run."""
        hw = self.hardware
        where = self.device
        if hw is not None and hw.gpu_name:
            where += f" ({hw.gpu_name}, {hw.gpu_memory_gib:.1f} GiB)"
        lines = [f"accelerations on {where}, precision {self.precision.name}:"]
        lines += [r.line() for r in self.records]
        return "\n".join(lines)


def _resolve(key: str, value: Any, rules: dict[str, Any]) -> tuple[Any, str]:
    if value == "auto":
        rec = rules.get(f"accel.{key}")
        if rec is None:
            return False, "auto: no rule for this device"
        return rec.value, f"auto: {rec.reason}"
    return value, "config"


def _per_module(name: str, modules: dict[str, nn.Module], fn: Callable[[nn.Module], AccelRecord]) -> AccelRecord:
    if not modules:
        return AccelRecord(name, False, True, "no modules")
    return merge_records(name, {mod_name: fn(m) for mod_name, m in modules.items()})


def apply_accelerations(
    acc: AccelConfig, modules: dict[str, nn.Module], device: str | torch.device, avoid_bf16: str | None = None
) -> AccelPlan:
    """Resolve and apply every acceleration of the ``accel`` section ``acc`` to
    ``modules`` (already on ``device``), in place. ``auto`` switches follow
    :func:`speechtrain.accel.probe.decide` for this device (``avoid_bf16``: the model's reason against bf16,
    see :func:`~speechtrain.accel.precision.resolve_precision`). Compile comes last so that it sees
    the other changes. Returns the plan with one record per acceleration."""
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None and torch.cuda.is_available():
        dev = torch.device("cuda", torch.cuda.current_device())
    info = cached_probe(str(dev))
    rules = decide(info)
    resolved: dict[str, dict[str, Any]] = {}

    def setting(key: str) -> Any:
        configured = getattr(acc, key)
        value, why = _resolve(key, configured, rules)
        resolved[key] = {"config": configured, "value": value, "why": why}
        return value

    def noted(rec: AccelRecord, key: str) -> AccelRecord:
        why = resolved[key]["why"]
        if why != "config" and not rec.applied and not rec.detail.startswith("not applicable"):
            rec.detail = f"{rec.detail} [{why}]"
        rec.info = {**rec.info, "setting": resolved[key]["value"], "source": why}
        return rec

    records: list[AccelRecord] = []
    deterministic = bool(acc.deterministic)
    resolved["deterministic"] = {"config": deterministic, "value": deterministic, "why": "config"}
    records.append(noted(apply_deterministic(deterministic), "deterministic"))
    records.append(noted(apply_tf32(bool(setting("tf32")), dev), "tf32"))
    rec = apply_cudnn_benchmark(bool(setting("cudnn_benchmark")), dev, deterministic)
    records.append(noted(rec, "cudnn_benchmark"))

    records.append(noted(apply_cpu_allocator(bool(setting("cpu_allocator"))), "cpu_allocator"))

    precision = resolve_precision(acc.precision, dev, avoid_bf16)
    resolved["precision"] = {"config": acc.precision, "value": precision.name, "why": precision.reason}
    records.append(precision.record())

    if setting("channels_last"):
        rec = _per_module("channels_last", modules, apply_channels_last)
    else:
        rec = AccelRecord("channels_last", False, True, "off")
    records.append(noted(rec, "channels_last"))

    sdpa_on = bool(setting("sdpa"))
    records.append(noted(_per_module("sdpa", modules, lambda m: apply_sdpa(m, sdpa_on, dev)), "sdpa"))

    ckpt_on = bool(setting("activation_checkpointing"))
    rec = _per_module("activation_checkpointing", modules, lambda m: apply_activation_checkpointing(m, ckpt_on))
    records.append(noted(rec, "activation_checkpointing"))

    compile_on = bool(setting("compile"))
    rec = _per_module(
        "compile", modules, lambda m: apply_compile(m, compile_on, acc.compile_mode, acc.compile_dynamic, dev)
    )
    records.append(noted(rec, "compile"))
    return AccelPlan(records, precision, str(dev), resolved, info)
