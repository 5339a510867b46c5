"""apply_accelerations: every acceleration of the table, its ``accel`` switch resolved (``auto`` through its
probe rule) and applied."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from speechtrain.accel.catalog import Acceleration, ApplyContext, accelerations
from speechtrain.accel.hardware import HardwareInfo, cached_probe
from speechtrain.accel.precision import PrecisionPlan, resolve_precision
from speechtrain.accel.record import AccelRecord

if TYPE_CHECKING:
    from speechtrain.config import AccelConfig


@dataclass(frozen=True)
class LoaderShapes:
    """What the training loader plans, as torch.compile needs it: distinct batch shapes in an epoch (None:
    unknown), duration buckets, worker processes."""

    shapes: int | None
    buckets: int
    workers: int = 0


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


def _setting(acc: Acceleration, configured: Any, ctx: ApplyContext) -> tuple[Any, str]:
    """The value to apply and why: the acceleration's own resolver, else the configured value with
    ``auto`` through its probe rule."""
    if acc.resolve is not None:
        return acc.resolve(configured, ctx)
    if configured != "auto":
        return configured, "config"
    rule = acc.probe(ctx.hardware) if acc.probe is not None and ctx.hardware is not None else None
    if rule is None:
        return False, "auto: no rule for this device"
    value, reason = rule
    return value, f"auto: {reason}"


def _shown(value: Any) -> Any:
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def apply_accelerations(
    acc: AccelConfig,
    modules: dict[str, nn.Module],
    device: str | torch.device,
    avoid_bf16: str | None = None,
    loader: LoaderShapes | None = None,
) -> AccelPlan:
    """Resolve and apply every acceleration of the ``accel`` section ``acc`` to ``modules`` (already on
    ``device``), in place, in the table's order (:func:`speechtrain.accel.catalog.accelerations`; compile
    last, so that it sees the other changes). ``auto`` switches follow each acceleration's probe rule
    for this device (``avoid_bf16``: the model's reason against bf16, see
    :func:`~speechtrain.accel.precision.resolve_precision`; ``loader``: the shapes the training loader plans,
    which compile's ``dynamic`` follows). Returns the plan with one record per acceleration."""
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None and torch.cuda.is_available():
        dev = torch.device("cuda", torch.cuda.current_device())
    info = cached_probe(str(dev))
    ctx = ApplyContext(modules, dev, acc, info, avoid_bf16=avoid_bf16)
    if loader is not None:
        ctx.batch_shapes, ctx.buckets, ctx.loader_workers = loader.shapes, loader.buckets, loader.workers
    resolved: dict[str, dict[str, Any]] = {}
    records: list[AccelRecord] = []
    for entry in accelerations():
        if entry.apply is None or entry.section != "accel":
            continue  # applied by another piece (the optimizer kernel: build_optimizer)
        configured = getattr(acc, entry.field)
        value, why = _setting(entry, configured, ctx)
        resolved[entry.field] = {"config": configured, "value": _shown(value), "why": why}
        rec = entry.apply(value, ctx)
        if (
            why != "config"
            and why not in rec.detail
            and not rec.applied
            and not rec.detail.startswith("not applicable")
        ):
            rec.detail = f"{rec.detail} [{why}]"
        rec.info = {**rec.info, "setting": _shown(value), "source": why}
        records.append(rec)
    precision = ctx.precision if ctx.precision is not None else resolve_precision(acc.precision, dev, avoid_bf16)
    return AccelPlan(records, precision, str(dev), resolved, info)
