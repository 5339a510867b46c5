"""The optimizers of a task's stages, their learning-rate schedules, and the opt-in LR scaling rule."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

import torch
from torch import nn

from speechtrain.accel.optim import build_optimizer
from speechtrain.accel.record import AccelRecord
from speechtrain.train.task import OptimizerSpec

if TYPE_CHECKING:
    from speechtrain.config import OptimConfig


def lr_factor(optim_cfg: OptimConfig, n: int, total: int) -> float:
    """LR multiplier after ``n`` scheduler steps out of ``total``."""
    kind = optim_cfg.scheduler
    if kind == "none":
        return 1.0
    if kind == "exponential":
        return optim_cfg.gamma**n
    warm = optim_cfg.warmup_steps
    if warm and n < warm:
        return (n + 1) / warm
    progress = min(1.0, (n - warm) / max(1, total - warm))
    floor = optim_cfg.min_lr_ratio
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def build_scheduler(
    optimizer: torch.optim.Optimizer, optim_cfg: OptimConfig, total: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR following ``optim.scheduler`` (stepped per step or per epoch by the Trainer)."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda n: lr_factor(optim_cfg, n, total))


def lr_scale(optim_cfg: OptimConfig, effective_batch: float) -> tuple[float, str]:
    """The opt-in scaling of lr with the effective batch against ``optim.reference_batch_size``."""
    ratio = effective_batch / optim_cfg.reference_batch_size
    if optim_cfg.lr_scaling == "linear":
        return (
            ratio,
            f"lr x {ratio:.3g} (linear: effective batch {effective_batch:.1f} / {optim_cfg.reference_batch_size})",
        )
    if optim_cfg.lr_scaling == "sqrt":
        s = math.sqrt(ratio)
        return s, f"lr x {s:.3g} (sqrt: effective batch {effective_batch:.1f} / {optim_cfg.reference_batch_size})"
    return 1.0, "lr as configured (optim.lr_scaling: none)"


def spec_parameters(spec: OptimizerSpec, modules: dict[str, nn.Module], names: Iterable[str]) -> list[nn.Parameter]:
    """The parameters of a stage named ``module.parameter`` (``gpt.text_embedding.weight``); a ValueError
    naming one that its modules do not have (a task's typo must not silently decay everything)."""
    names = list(names)
    own = {f"{m}.{n}": p for m in spec.modules for n, p in modules[m].named_parameters()}
    missing = [n for n in names if n not in own]
    if missing:
        raise ValueError(f"optimizer stage '{spec.name}': no parameter {', '.join(sorted(missing)[:5])}")
    return [own[n] for n in names]


def build_stage_optimizers(
    specs: list[OptimizerSpec],
    modules: dict[str, nn.Module],
    optim_cfg: OptimConfig,
    device: torch.device,
    lr_multiplier: float,
    total_steps: int,
) -> tuple[dict[str, torch.optim.Optimizer], dict[str, AccelRecord], dict[str, torch.optim.lr_scheduler.LambdaLR]]:
    """One optimizer per stage over its modules (``optim_cfg`` is an OptimConfig; the stage's own
    ``lr_multiplier`` on top of the run's), its record and its schedule over ``total_steps``."""
    optimizers, records = {}, {}
    for spec in specs:
        mods = [modules[name] for name in spec.modules]
        no_decay = spec_parameters(spec, modules, spec.no_weight_decay)
        opt, rec = build_optimizer(mods, optim_cfg, device, lr_multiplier * spec.lr_multiplier, no_decay)
        optimizers[spec.name], records[spec.name] = opt, rec
    schedulers = {name: build_scheduler(opt, optim_cfg, total_steps) for name, opt in optimizers.items()}
    return optimizers, records, schedulers
