"""Distributed wrapping per stage: the strategy of a run (one process, DDP or FSDP2) and each stage's gradient sync.

:func:`wrap_stages` owns the choice of ``train.strategy`` (see :func:`~speechtrain.train.distributed.choose_strategy`)
and the building of the sync of every optimizer stage: a :class:`~speechtrain.train.distributed.StageSync` (DDP
over the stage's parameters) or, sharded, the FSDP2 units (:func:`~speechtrain.train.distributed.shard_modules`)
and a :class:`~speechtrain.train.distributed.ShardedStage`. What it builds, :class:`StageWrapping`, is the process
group as the loop's parts see it (rank, world size, sharded or not): the recipe layer builds it once per run and
hands it to the step runner, the checkpointer and the Trainer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch
from torch import nn

from speechtrain.accel.precision import PrecisionPlan
from speechtrain.capabilities import ShardedForwards
from speechtrain.config import OptimConfig, TrainConfig
from speechtrain.logs import get_logger
from speechtrain.memory.estimate import device_memory, static_memory
from speechtrain.train.distributed import (
    ShardedStage,
    StageSync,
    StrategyChoice,
    choose_strategy,
    fsdp_mixed_precision,
    shard_modules,
    world,
)
from speechtrain.train.task import OptimizerSpec, Task

log = get_logger(__name__)


@dataclass
class StageWrapping:
    """The process group as the loop sees it and each stage's gradient sync (empty in one process)."""

    rank: int
    world_size: int
    strategy: StrategyChoice
    sync: dict[str, StageSync | ShardedStage] = field(default_factory=dict)
    sharded_units: list[str] = field(default_factory=list)
    fsdp_mixed_precision: str = "none (not sharded)"
    ddp_options: dict[str, bool] = field(default_factory=dict)

    @property
    def sharded(self) -> bool:
        return self.strategy.strategy == "fsdp"


def stage_params(specs: list[OptimizerSpec], modules: dict[str, nn.Module], stage: str) -> list[nn.Parameter]:
    """The trainable parameters of optimizer stage ``stage``."""
    spec = next(s for s in specs if s.name == stage)
    return [p for name in spec.modules for p in modules[name].parameters() if p.requires_grad]


def fsdp_problems(specs: list[OptimizerSpec], precision: PrecisionPlan, optim: OptimConfig) -> list[str]:
    """Why this task cannot run under FSDP2 (empty: it can)."""
    problems = []
    if len(specs) != 1:
        problems.append(f"a task of one optimizer stage (this one has {len(specs)})")
    if precision.use_grad_scaler:
        problems.append("accel.precision bf16 or fp32 (not fp16)")
    if optim.name == "muon":
        problems.append("optim.name adamw, adam or sgd (not muon)")
    return problems


def choose_stage_strategy(
    modules: dict[str, nn.Module],
    specs: list[OptimizerSpec],
    train: TrainConfig,
    optim: OptimConfig,
    precision: PrecisionPlan,
    device: torch.device,
    world_size: int,
) -> StrategyChoice:
    """``train.strategy`` for this run (see :func:`~speechtrain.train.distributed.choose_strategy`): auto
    compares one replica's weights, gradients and optimizer state with a rank's device memory (on the
    CPU, the host's RAM shared by the ranks of this node)."""
    if world_size == 1 or train.strategy != "auto":
        static, device_bytes = 0, None
    else:
        static = static_memory(modules, specs, optim.name).static_bytes
        device_bytes = device_memory(device)["total_bytes"]
        if device_bytes is not None and device.type != "cuda":
            device_bytes //= max(1, int(os.environ.get("LOCAL_WORLD_SIZE", world_size) or 1))
    choice = choose_strategy(train.strategy, world_size, static, device_bytes, fsdp_problems(specs, precision, optim))
    if world_size > 1:
        log.info(f"strategy: {choice.strategy} ({choice.reason})")
    return choice


def wrap_stages(
    task: Task,
    train: TrainConfig,
    optim: OptimConfig,
    precision: PrecisionPlan,
    device: torch.device,
    alone: bool = False,
) -> StageWrapping:
    """The strategy and one gradient sync per stage for more than one process: DDP over its parameters, or FSDP2
    (with the mixed precision of the run's precision plan). ``alone``: under a process group, this rank by itself
    (no gradient sync, no collectives: what ``speechtrain tune`` measures on every rank)."""
    rank, world_size = world()
    if alone:
        world_size = 1
    modules, specs = task.modules(), task.optimizer_specs()
    strategy = choose_stage_strategy(modules, specs, train, optim, precision, device, world_size)
    wrapping = StageWrapping(rank, world_size, strategy)
    if world_size == 1:
        return wrapping
    if wrapping.sharded:
        policy, wrapping.fsdp_mixed_precision = fsdp_mixed_precision(precision.name)
        trained = {n: modules[n] for s in specs for n in s.modules}
        methods = task.fsdp_forward_methods() if isinstance(task, ShardedForwards) else {}
        wrapping.sharded_units = shard_modules(trained, policy, methods)
        wrapping.sync = {s.name: ShardedStage([modules[n] for n in s.modules]) for s in specs}
        return wrapping
    find_unused = train.ddp_find_unused_parameters
    if find_unused == "auto":  # only where the task says a stage may leave parameters without a gradient
        find_unused = bool(getattr(task, "ddp_find_unused_parameters", False))
    wrapping.ddp_options = {
        "find_unused_parameters": bool(find_unused),
        "static_graph": train.ddp_static_graph,
        "gradient_as_bucket_view": train.ddp_gradient_as_bucket_view,
    }
    wrapping.sync = {
        spec.name: StageSync(params, device, train.ddp_bucket_mb, **wrapping.ddp_options)
        for spec in specs
        if (params := stage_params(specs, modules, spec.name))
    }
    return wrapping
