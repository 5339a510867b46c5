"""Optimizers, schedulers and grad scalers of a run's stages, and the precision plan the scalers follow.

:class:`StageOptimizers` owns one optimizer, its record, its LR schedule and its grad scaler per optimizer stage,
and the run's current :class:`~speechtrain.accel.precision.PrecisionPlan` (the numerics guard's fallback changes
it, and with it the scalers). :func:`build_optimizers` is what the recipe layer calls to make them
(:func:`~speechtrain.train.schedule.build_stage_optimizers`); the loop only steps and zeroes them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from speechtrain.accel.precision import PrecisionPlan
from speechtrain.accel.record import AccelRecord
from speechtrain.config import OptimConfig
from speechtrain.train.schedule import build_stage_optimizers
from speechtrain.train.task import OptimizerSpec


class StageOptimizers:
    """Each stage's optimizer, record, scheduler and grad scaler; ``scheduler_interval``: "step" or "epoch"."""

    def __init__(
        self,
        optimizers: dict[str, torch.optim.Optimizer],
        records: dict[str, AccelRecord],
        schedulers: dict[str, Any],
        precision: PrecisionPlan,
        scheduler_interval: str = "step",
    ) -> None:
        self.optimizers, self.records, self.schedulers = optimizers, records, schedulers
        self.scheduler_interval = scheduler_interval
        self.precision = precision
        self.scalers = {name: precision.grad_scaler() for name in optimizers}

    def set_precision(self, plan: PrecisionPlan) -> None:
        """Train in ``plan`` from now on (fresh grad scalers)."""
        self.precision = plan
        self.scalers = {name: plan.grad_scaler() for name in self.optimizers}

    def step_schedulers(self, interval: str) -> None:
        """Step every LR schedule when ``interval`` ("step" or "epoch") is the one they follow."""
        if self.scheduler_interval == interval:
            for s in self.schedulers.values():
                s.step()

    def zero_grad(self) -> None:
        for opt in self.optimizers.values():
            opt.zero_grad(set_to_none=True)


def build_optimizers(
    specs: list[OptimizerSpec],
    modules: dict[str, nn.Module],
    optim: OptimConfig,
    device: torch.device,
    precision: PrecisionPlan,
    lr_multiplier: float,
    total_steps: int,
) -> StageOptimizers:
    """One optimizer, schedule (over ``total_steps``) and grad scaler per stage (see :class:`StageOptimizers`)."""
    optimizers, records, schedulers = build_stage_optimizers(specs, modules, optim, device, lr_multiplier, total_steps)
    return StageOptimizers(optimizers, records, schedulers, precision, optim.scheduler_interval)
