"""The builder of the training loop's parts: what every door that trains runs (train, tune, bench, the UI's jobs,
the tests, a user's own loop).

:func:`build_parts` makes, from the typed config sections and a task already placed on ``device`` with its
accelerations applied (:func:`speechtrain.accel.apply.apply_accelerations`), every part of
:mod:`speechtrain.train` that a loop runs, in this order: the distributed wrapping of each stage
(:func:`~speechtrain.train.wrapping.wrap_stages`), the optimizers, schedulers and grad scalers
(:func:`~speechtrain.train.optimizers.build_optimizers`), the guards, the step runner, the metrics log, the
evaluation schedule and the checkpointer, around one :class:`~speechtrain.train.state.RunState`.
:func:`build_trainer` hands them to a :class:`~speechtrain.train.trainer.Trainer` (which builds nothing);
``TrainRecipe.build_trainer`` applies the process-wide settings first and calls it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from speechtrain.accel.apply import AccelPlan
from speechtrain.config import OptimConfig, TrainConfig
from speechtrain.data.batch import Batch
from speechtrain.data.loader import TrainBatches
from speechtrain.quality.catalog import resolve_best
from speechtrain.quality.score import QualityScorer
from speechtrain.train.checkpointer import Checkpointer
from speechtrain.train.compiling import CompileWatch
from speechtrain.train.eval_schedule import EvalSchedule
from speechtrain.train.evaluate import Evaluator
from speechtrain.train.metrics import MetricsWriter, ResourceFields
from speechtrain.train.metrics_log import MetricsLog
from speechtrain.train.numerics import NumericsGuard
from speechtrain.train.oom_guard import OOMGuard
from speechtrain.train.optimizers import StageOptimizers, build_optimizers
from speechtrain.train.rundir import RunDir
from speechtrain.train.state import RunState
from speechtrain.train.step import BatchTransform, StepRunner
from speechtrain.train.task import Task
from speechtrain.train.trainer import Trainer
from speechtrain.train.wrapping import StageWrapping, wrap_stages


@dataclass
class LoopParts:
    """The parts of a training loop (see :func:`build_parts`); ``Trainer(**parts.trainer_kwargs())`` runs them."""

    train: TrainConfig
    state: RunState
    wrapping: StageWrapping
    optimizers: StageOptimizers
    runner: StepRunner
    checkpointer: Checkpointer
    evals: EvalSchedule
    log_rows: MetricsLog
    compile_watch: CompileWatch
    train_loader: TrainBatches | None = None

    def trainer_kwargs(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def build_parts(
    task: Task,
    *,
    train: TrainConfig,
    optim: OptimConfig,
    device: torch.device,
    accel: AccelPlan,
    train_loader: TrainBatches | None = None,
    eval_loader: Iterable[Batch] | None = None,
    run_dir: str | Path | RunDir | None = None,
    oom_guard: bool = True,
    batch_transform: BatchTransform | None = None,
    lr_multiplier: float = 1.0,
    recompile_limit: int = 40,
    run_config: dict[str, Any] | None = None,
    alone: bool = False,
    quality: QualityScorer | None = None,
) -> LoopParts:
    """Every part of the loop of ``task`` (its modules already on ``device`` with ``accel`` applied).

    ``train``/``optim`` are the typed config sections; ``lr_multiplier`` the recipe's LR scaling;
    ``batch_transform`` the on-device features (``speechtrain.data.loader.DeviceFeatures``);
    ``recompile_limit`` the torch.compile recompiles tolerated before a warning; ``run_config`` the
    resolved config saved in every checkpoint. ``alone``: under a process group, train this rank by
    itself (no gradient sync, no collectives): what ``speechtrain tune`` measures on every rank, whose
    trials differ from rank to rank. ``quality``: the scorer of the task's quality metrics at each evaluation
    (:class:`~speechtrain.quality.score.QualityScorer`, built by the recipe with the run's mel and f0); None:
    evaluations report the task's own metrics only, and ``best.pt`` defaults to the eval loss.
    """
    runs_in = RunDir(run_dir) if run_dir else None
    modules, specs = task.modules(), task.optimizer_specs()
    wrapping = wrap_stages(task, train, optim, accel.precision, device, alone)  # DDP (or FSDP2) per stage
    optimizers = build_optimizers(specs, modules, optim, device, accel.precision, lr_multiplier, train.max_steps)
    # FSDP all-gathers inside the forward: a rank out of memory there leaves the others in the collective
    oom = OOMGuard(oom_guard and not wrapping.sharded, train.oom_single_utterance)
    numerics = NumericsGuard(train.nan_fallback_after)
    compile_watch = CompileWatch(accel, modules, runs_in, wrapping.rank)
    runner = StepRunner(
        task, device, wrapping, optimizers, oom, numerics, compile_watch, optim.grad_clip, batch_transform
    )
    writes = runs_in if wrapping.rank == 0 else None  # rank 0 alone writes metrics, samples and checkpoints
    writer = MetricsWriter(writes, train.tensorboard)
    state = RunState(last_epoch=train_loader.epoch if train_loader is not None else 0)
    evaluator = (
        None
        if eval_loader is None or (wrapping.rank != 0 and not wrapping.sharded)  # sharded: every rank's forward
        else Evaluator(task, eval_loader, train, writes, writer, quality)
    )
    # what picks best.pt: train.best_metric, else the task's default quality metric (scored only with a scorer;
    # a classifier's come from its own eval summary)
    kind = task.quality_kind if quality is not None or task.quality_kind == "classifier" else ""
    best = resolve_best(kind, train.best_metric, train.quality_items)
    evals = EvalSchedule(evaluator, best, train, state, writer, device, wrapping)
    log_rows = MetricsLog(
        writer, ResourceFields(device, recompile_limit), state, optimizers, oom, numerics, compile_watch, wrapping
    )
    checkpointer = Checkpointer(
        runs_in,
        train,
        state,
        modules,
        specs,
        optimizers,
        wrapping,
        oom,
        numerics,
        evals,
        writer,
        device,
        train_loader,
        run_config,
        optim.name,
    )
    return LoopParts(
        train, state, wrapping, optimizers, runner, checkpointer, evals, log_rows, compile_watch, train_loader
    )


def build_trainer(task: Task, **kwargs: Any) -> Trainer:
    """A :class:`~speechtrain.train.trainer.Trainer` over :func:`build_parts` (the same keyword arguments)."""
    return Trainer(**build_parts(task, **kwargs).trainer_kwargs())
