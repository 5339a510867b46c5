"""The training loop.

One optimizer step = for each stage of the task (one for most models; ``disc`` then ``gen`` for
GANs): forward/backward every micro-batch, each loss scaled by its share of the step's weight,
then sync, unscale, clip, check finite, step. No model code lives here, and no process-wide
setting is changed here: the recipe (:mod:`speechtrain.recipes.train`) seeds, places the modules,
applies the accelerations and hands over what it built.

The units the loop leans on, each in its own module: :class:`~speechtrain.train.oom_guard.OOMGuard`
(redo a stage in pieces after an out-of-memory error), :class:`~speechtrain.train.numerics.NumericsGuard`
(skip non-finite steps, fall back from fp16), :mod:`~speechtrain.train.checkpoint` (atomic files),
:class:`~speechtrain.train.evaluate.Evaluator`, :class:`~speechtrain.train.signals.StopSignals`,
:mod:`~speechtrain.train.metrics` (rows) and :mod:`~speechtrain.train.distributed` (gradient sync).
"""

from __future__ import annotations

import gc
import json
import math
import os
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from speechtrain.accel.apply import AccelPlan
from speechtrain.accel.compile import compile_seconds, disable_compile, failure_record, is_compile_error
from speechtrain.accel.precision import PrecisionPlan, resolve_precision
from speechtrain.capabilities import ShardedForwards
from speechtrain.config import OptimConfig, TrainConfig
from speechtrain.data.batch import Batch
from speechtrain.data.loader import TimedIterator, TrainBatches
from speechtrain.errors import CheckpointError, UserError
from speechtrain.logs import get_logger
from speechtrain.memory.estimate import device_memory, static_memory
from speechtrain.memory.oom import maybe_inject_oom
from speechtrain.quality.catalog import METRICS, BestMetric, resolve_best
from speechtrain.quality.score import QualityScorer
from speechtrain.train import checkpoint as ckpt
from speechtrain.train.distributed import (
    ShardedStage,
    StageSync,
    StrategyChoice,
    all_sum,
    any_rank,
    any_ranks,
    choose_strategy,
    fsdp_mixed_precision,
    full_state,
    gather,
    is_peer_failure,
    load_full_state,
    load_sharded,
    mean_over_ranks,
    peer_failure_error,
    save_sharded,
    shard_modules,
    unused_parameters_error,
    world,
)
from speechtrain.train.evaluate import Evaluator
from speechtrain.train.metrics import Interval, MetricsWriter, ResourceFields, StepFile, progress_bar
from speechtrain.train.numerics import NumericsGuard, SkippableStep, nonfinite
from speechtrain.train.oom_guard import OOMGuard, StageRun, StageVote, merge_rank_states
from speechtrain.train.rundir import RunDir
from speechtrain.train.schedule import build_stage_optimizers
from speechtrain.train.signals import StopSignals, peer_stopped
from speechtrain.train.task import Task

log = get_logger(__name__)

#: under a process group the ranks agree on a stop (a signal, train.max_minutes) every this many steps at most (or
#: every log interval when shorter): the agreement is an all-reduce read on the host, a sync the GPU drains for
STOP_AGREE_EVERY = 10

#: on-device features/augmentation applied to a batch after the copy: ``transform(batch, training)``
BatchTransform = Callable[[Batch, bool], Batch]


class Trainer:
    """Runs a :class:`Task` whose modules are already on ``device`` with ``accel`` applied.

    ``train``/``optim`` are the typed config sections; ``lr_multiplier`` the recipe's LR scaling;
    ``batch_transform`` the on-device features (``speechtrain.data.loader.DeviceFeatures``);
    ``recompile_limit`` the torch.compile recompiles tolerated before a warning; ``run_config`` the
    resolved config saved in every checkpoint. ``alone``: under a process group, train this rank by
    itself (no gradient sync, no collectives): what ``speechtrain tune`` measures on every rank, whose
    trials differ from rank to rank. ``quality``: the scorer of the task's quality metrics at each evaluation
    (:class:`~speechtrain.quality.score.QualityScorer`, built by the recipe with the run's mel and f0); None:
    evaluations report the task's own metrics only, and ``best.pt`` defaults to the eval loss.
    """

    def __init__(
        self,
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
    ) -> None:
        self.task, self.train, self.optim, self.device, self.accel = task, train, optim, device, accel
        self.train_loader, self.batch_transform, self.run_config = train_loader, batch_transform, run_config
        self.run_dir = run_dir  # a RunDir (see the property)
        self.rank, self.world_size = world()
        if alone:
            self.world_size = 1
        self.modules: dict[str, nn.Module] = task.modules()
        self.precision: PrecisionPlan = accel.precision
        self.specs = task.optimizer_specs()
        self.strategy: StrategyChoice = self._choose_strategy()
        self.sharded = self.strategy.strategy == "fsdp"
        self.sharded_units: list[str] = []
        self.fsdp_mixed_precision = "none (not sharded)"
        self.ddp_options: dict[str, bool] = {}
        self.sync = self._build_sync()  # one DDP (or FSDP2) per stage under a process group, else none
        self.optimizers, self.optimizer_records, self.schedulers = build_stage_optimizers(
            self.specs, self.modules, optim, device, lr_multiplier, train.max_steps
        )
        self.scalers = {name: self.precision.grad_scaler() for name in self.optimizers}
        # FSDP all-gathers inside the forward: a rank out of memory there leaves the others in the collective
        self.oom = OOMGuard(oom_guard and not self.sharded, train.oom_single_utterance)
        self.numerics = NumericsGuard(train.nan_fallback_after)
        self._params: dict[str, list[nn.Parameter]] = {}  # each stage's trainable parameters, listed once
        self._steppers: dict[str, SkippableStep] = {}  # each stage's optimizer step, skipped on the device
        self._copy_stream: Any = None  # CUDA: the side stream of the batches' copies (see _copy_ahead)
        compile_record = accel.record("compile")
        self.compiling = compile_record is not None and compile_record.applied
        self.compile_warmup_seconds = 0.0  # wall time of the steps that compiled (kept out of the rates)
        self.compile_steps = 0
        self._compile_events: list[dict[str, Any]] = []
        self._compile_failed_at: int | None = None
        writes = self.run_dir if self.rank == 0 else None  # rank 0 alone writes metrics, samples and checkpoints
        self.metrics = MetricsWriter(writes, train.tensorboard)
        self.resources = ResourceFields(device, recompile_limit)
        self.evaluator = (
            None
            if eval_loader is None or (self.rank != 0 and not self.sharded)  # sharded: every rank runs the forward
            else Evaluator(task, eval_loader, train, writes, self.metrics, quality)
        )
        # what picks best.pt: train.best_metric, else the task's default quality metric (scored only with a scorer;
        # a classifier's come from its own eval summary)
        kind = task.quality_kind if quality is not None or task.quality_kind == "classifier" else ""
        self.best_metric: BestMetric = resolve_best(kind, train.best_metric, train.quality_items)
        self.evals_since_best = 0  # evaluations in a row without a better best_metric (train.early_stop_patience)
        self._fit_start: float | None = None
        self._eval_seconds = 0.0  # this process's evaluations, summed (left out of the eval rows' train_seconds)
        # run state (saved in checkpoints with the guards' state)
        self.step = 0
        self.samples_seen = 0
        self.audio_seconds_seen = 0.0
        self.last_epoch = train_loader.epoch if train_loader is not None else 0
        self.best_eval: float | None = None
        self.interval = Interval()  # the steps since the last metrics row (saved in checkpoints)
        self.idle_steps = 0  # steps in a row in which every utterance was left out (nothing trained)
        self.trained_steps = 0  # steps of the run with an update of some stage (saved in checkpoints)
        self._idle_since_epoch: int | None = None
        self._rank_idle = IdleSteps()  # this rank's own (under a process group: the others may train)
        self._initial_state: dict[str, Any] | None = None

    @property
    def run_dir(self) -> RunDir | None:
        """The run directory the checkpoints go to (None: none are written)."""
        return self._run_dir

    @run_dir.setter
    def run_dir(self, value: str | os.PathLike[str] | RunDir | None) -> None:
        self._run_dir = RunDir(value) if value else None

    def _fsdp_problems(self) -> list[str]:
        """Why this task cannot run under FSDP2 (empty: it can)."""
        problems = []
        if len(self.specs) != 1:
            problems.append(f"a task of one optimizer stage (this one has {len(self.specs)})")
        if self.precision.use_grad_scaler:
            problems.append("accel.precision bf16 or fp32 (not fp16)")
        if self.optim.name == "muon":
            problems.append("optim.name adamw, adam or sgd (not muon)")
        return problems

    def _choose_strategy(self) -> StrategyChoice:
        """``train.strategy`` for this run (see :func:`~speechtrain.train.distributed.choose_strategy`): auto
        compares one replica's weights, gradients and optimizer state with a rank's device memory (on the
        CPU, the host's RAM shared by the ranks of this node)."""
        if self.world_size == 1 or self.train.strategy != "auto":
            static, device_bytes = 0, None
        else:
            static = static_memory(self.modules, self.specs, self.optim.name).static_bytes
            device_bytes = device_memory(self.device)["total_bytes"]
            if device_bytes is not None and self.device.type != "cuda":
                device_bytes //= max(1, int(os.environ.get("LOCAL_WORLD_SIZE", self.world_size) or 1))
        choice = choose_strategy(self.train.strategy, self.world_size, static, device_bytes, self._fsdp_problems())
        if self.world_size > 1:
            log.info(f"strategy: {choice.strategy} ({choice.reason})")
        return choice

    def _build_sync(self) -> dict[str, StageSync | ShardedStage]:
        """One gradient sync per stage for more than one process: DDP over its parameters, or FSDP2
        (with the mixed precision of the run's precision plan)."""
        if self.world_size == 1:
            return {}
        if self.sharded:
            policy, self.fsdp_mixed_precision = fsdp_mixed_precision(self.precision.name)
            trained = {n: self.modules[n] for s in self.specs for n in s.modules}
            methods = self.task.fsdp_forward_methods() if isinstance(self.task, ShardedForwards) else {}
            self.sharded_units = shard_modules(trained, policy, methods)
            return {s.name: ShardedStage([self.modules[n] for n in s.modules]) for s in self.specs}
        t = self.train
        find_unused = t.ddp_find_unused_parameters
        if find_unused == "auto":  # only where the task says a stage may leave parameters without a gradient
            find_unused = bool(getattr(self.task, "ddp_find_unused_parameters", False))
        self.ddp_options = {
            "find_unused_parameters": bool(find_unused),
            "static_graph": t.ddp_static_graph,
            "gradient_as_bucket_view": t.ddp_gradient_as_bucket_view,
        }
        return {
            spec.name: StageSync(params, self.device, t.ddp_bucket_mb, **self.ddp_options)
            for spec in self.specs
            if (params := self.params_of(spec.name))
        }

    # the guards' counters, as the run summary and the tests read them
    oom_recoveries = property(lambda self: self.oom.recoveries)
    bucket_caps = property(lambda self: self.oom.caps)
    nonfinite_steps = property(lambda self: self.numerics.nonfinite_steps)
    precision_fallbacks = property(lambda self: self.numerics.fallbacks)

    # ------------------------------------------------------------------ one optimizer step
    def to_device(self, batch: Batch, training: bool = True) -> Batch:
        """Host batch -> device (non-blocking), then the on-device features/augmentation."""
        out = batch.to(self.device, non_blocking=True)  # no-op for tensors already there
        return self.batch_transform(out, training) if self.batch_transform is not None else out

    def _copy_ahead(self, micro: list[Batch]) -> list[Batch]:
        """CUDA: the step's batches copied host -> device (pinned memory, non-blocking) on a side stream.

        The step issues no host sync, so the CPU reaches the next step while the GPU still runs this one: the
        copies then overlap its kernels instead of queueing behind them on the compute stream, which waits for
        the copy stream only from here on. No batch is fetched ahead of the loader (its state stays the batches
        the trainer took). Elsewhere the batches are returned as they are (copied in :meth:`to_device`)."""
        if self.device.type != "cuda":
            return micro
        if self._copy_stream is None:
            self._copy_stream = torch.cuda.Stream(self.device)
        with torch.cuda.stream(self._copy_stream):
            moved = [mb.to(self.device, non_blocking=True) for mb in micro]
        compute = torch.cuda.current_stream(self.device)
        compute.wait_stream(self._copy_stream)
        for mb in moved:
            for t in mb.tensors.values():
                t.record_stream(compute)  # the allocator must not reuse them while the compute stream reads them
        return moved

    def params_of(self, stage: str) -> list[nn.Parameter]:
        spec = next(s for s in self.specs if s.name == stage)
        return [p for name in spec.modules for p in self.modules[name].parameters() if p.requires_grad]

    def _run_stage(
        self, stage: str, micro: list[Batch], weights: list[float], total: float, caches: list[dict[str, Any]]
    ) -> tuple[dict[str, torch.Tensor], StageRun, float]:
        """Forward/backward of every micro-batch of ``stage``; the OOM guard redoes it in pieces when needed.
        Returns the rank-mean loss terms, whether this rank and any rank trained, and the step's weight it
        ended with.

        ``total`` is the step's weight over every rank: a piece's loss is scaled by its share of it (times
        the world size, which DDP's average divides out), so the gradient is the one of the whole global batch.
        An utterance left out (it does not fit alone) is taken out of that weight before the stage is redone:
        the gradient is the mean over what was trained. A rank left with nothing to train joins the others'
        gradient sync with zero gradients (:meth:`StageSync.contribute_nothing`) and zero loss terms.
        """
        sums: dict[str, torch.Tensor] = {}
        sync = self.sync.get(stage)

        def run_piece(i: int, piece: Batch, split: bool, agree: Callable[[], None] | None) -> None:
            maybe_inject_oom(piece)
            share = (self.task.batch_weight(piece) if split else weights[i]) / total * self.world_size
            dev_piece = self.to_device(piece)

            def forward() -> dict[str, torch.Tensor]:
                with self.precision.autocast():
                    out = self.task.training_step(dev_piece, stage, {} if split else caches[i])
                if agree is not None and self.world_size > 1:
                    agree()  # every rank got here without running out of memory: the syncing backward may start
                return out

            out = forward() if sync is None else sync.run(forward, sync=agree is not None)
            self.scalers[stage].scale(out["loss"].float() * share).backward()
            for k, v in out.items():
                v = v.detach().float()
                sums[k] = sums[k] + v * share if k in sums else v * share

        def reset() -> None:  # drop every reference to the failed attempt; weigh what the next one trains
            nonlocal total
            sums.clear()
            for c in caches:
                c.clear()
            self.optimizers[stage].zero_grad(set_to_none=True)
            gc.collect()
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            left = [p for mb in micro for p in [self.oom.without_skipped(mb)] if p is not None]
            total = all_sum([sum(self.task.batch_weight(p) for p in left)], self.device, self.world_size)[0] or 1.0

        # under a process group: one all-reduce read on the host per attempt (a sync), between the last piece's
        # forward and its gradient-syncing backward: a rank out of memory (or left with nothing) must not leave the
        # others in DDP's all-reduce. Without the guard (FSDP, oom_guard off) an OOM stops the run anyway and no
        # utterance is ever left out: no agreement, no sync.
        def vote(mine: StageVote) -> StageVote:
            if not self.oom.enabled:
                return mine
            return StageVote(*any_ranks([mine.failed, mine.empty, mine.trained], self.device, self.world_size))

        run = self.oom.run_stage(micro, run_piece, reset, stage=stage, step=self.step + 1, vote=vote)
        if run.anywhere and not run.here and isinstance(sync, StageSync):
            sync.contribute_nothing()  # the other ranks' gradient all-reduce needs this rank's (zero) part
        if run.anywhere and run.empty_somewhere and self.world_size > 1:  # the same terms, in the same order
            names: list[str] = next((n for n in gather(list(sums), self.world_size) if n), [])
            sums = {k: sums[k] if k in sums else torch.zeros((), device=self.device) for k in names}
        return mean_over_ranks(sums, self.world_size), run, total

    def _stage_params(self, stage: str) -> list[nn.Parameter]:
        """``params_of(stage)``, listed once (a Python walk over every module's parameters each step is host
        time the GPU waits for)."""
        if stage not in self._params:
            self._params[stage] = self.params_of(stage)
        return self._params[stage]

    def _optimizer_step(self, stage: str, loss: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Unscale, clip and step ``stage``, the step skipped on the device when the loss or the gradient norm
        is not finite. Returns the gradient norm and a 0-dim bool tensor: the step counts as non-finite (an
        fp16 overflow that the scaler absorbs by backing off does not). No host sync (see
        :class:`~speechtrain.train.numerics.SkippableStep` for its first update)."""
        opt, scaler = self.optimizers[stage], self.scalers[stage]
        params = self._stage_params(stage)  # gradients already averaged over the ranks by the stage's DDP
        scaler.unscale_(opt)  # fp16: records the scaler's found-inf on the device
        spec = next(s for s in self.specs if s.name == stage)
        clip = spec.grad_clip if spec.grad_clip is not None else self.optim.grad_clip
        grads = [p.grad for p in params if p.grad is not None]
        grad_norm = torch.nn.utils.get_total_norm(grads)
        if clip:
            torch.nn.utils.clip_grads_with_norm_(params, clip, grad_norm)
        full = getattr(grad_norm, "full_tensor", None)  # FSDP2: a DTensor, the same norm on every rank
        grad_norm = full() if full is not None else grad_norm
        skip = nonfinite(loss, grad_norm)
        if stage not in self._steppers:
            self._steppers[stage] = SkippableStep(opt)
        self._steppers[stage](skip, len(grads))
        scaler.update()  # fp16: backs the scale off after an overflow, on the device
        routine = NumericsGuard.routine_overflow(scaler)  # fp16: an overflow the scaler absorbs is not counted
        loss_bad = ~torch.isfinite(loss.detach()).reshape(())
        counted = skip if isinstance(routine, bool) else loss_bad | (skip & ~routine)
        opt.zero_grad(set_to_none=True)
        return grad_norm.detach(), counted

    def train_step(self, micro_batches: list[Batch]) -> dict[str, Any]:
        """One optimizer step over ``micro_batches`` (host or device batches) for every stage; utterances the
        OOM guard left out (too long to fit alone) are taken out first."""
        if self.oom.skipped:
            micro_batches = [p for mb in micro_batches for p in [self.oom.without_skipped(mb)] if p is not None]
        micro_batches = self._copy_ahead(micro_batches)
        weights = [self.task.batch_weight(mb) for mb in micro_batches]
        # the global batch: its weight (for each piece's share), items and audio seconds, summed over the ranks
        items = sum(mb.size for mb in micro_batches)
        seconds = sum(mb.audio_seconds for mb in micro_batches)
        # (and how many ranks trained nothing for a whole epoch while others did: agreed here, with no collective
        # of its own); under a process group a host sync (all_sum reads the all-reduce): the share of each piece
        # is a host number
        starved = float(self._rank_idle.starved)
        total, size, seconds, starved = all_sum([sum(weights), items, seconds, starved], self.device, self.world_size)
        if starved:
            raise self._rank_trained_nothing()
        total = total or 1.0
        caches: list[dict[str, Any]] = [{} for _ in micro_batches]  # per micro-batch, shared by its stages
        out: dict[str, Any] = {}
        bad: torch.Tensor | None = None  # on the device: some stage's step was skipped as non-finite
        trained = trained_here = False
        for spec in self.specs:
            last = spec is self.specs[-1]
            self.optimizers[spec.name].zero_grad(set_to_none=True)  # each stage starts from clean gradients
            try:
                sums, run, total = self._run_stage(spec.name, micro_batches, weights, total, caches)
            except Exception as exc:
                if not (self.compiling and is_compile_error(exc)):
                    raise
                self._compile_failed(exc)  # the stage again, in eager
                del exc
                for c in caches:
                    c.clear()
                self.optimizers[spec.name].zero_grad(set_to_none=True)
                sums, run, total = self._run_stage(spec.name, micro_batches, weights, total, caches)
            trained_here |= run.here
            if not run.anywhere:  # every utterance of every rank left out (each runs out of memory alone)
                self.optimizers[spec.name].zero_grad(set_to_none=True)  # no update on any rank this stage
                out[f"grad_norm_{spec.name}"] = torch.tensor(float("nan"))
                continue
            trained = True
            grad_norm, counted = self._optimizer_step(spec.name, sums["loss"])  # the same on every rank
            bad = counted if bad is None else bad | counted
            for k, v in sums.items():  # an earlier stage's loss is "<stage>_loss"; its components keep their names
                out[k if (k != "loss" or last) else f"{spec.name}_loss"] = v
            out[f"grad_norm_{spec.name}"] = grad_norm
            if last:
                out["grad_norm"] = grad_norm
            sync = self.sync.get(spec.name)
            if isinstance(sync, StageSync):
                sync.settle()  # every rank is here: DDP's one bucket rebuild happens now, not inside a forward
        del caches
        for opt in self.optimizers.values():
            opt.zero_grad(set_to_none=True)  # free stray gradients between steps
        self.step += 1
        self.samples_seen += int(size)
        if self.world_size == 1:
            for mb in micro_batches:  # the same float sums as before process groups existed
                self.audio_seconds_seen += mb.audio_seconds
        else:
            self.audio_seconds_seen += seconds
        if self.optim.scheduler_interval == "step":
            for s in self.schedulers.values():
                s.step()
        if bad is not None:
            self.numerics.observe(bad)
        if self._host_reads_now():
            self._check_numerics()
        self._check_trained(trained)
        if self.world_size > 1:
            self._rank_idle.update(trained_here, self._epoch())
        out["finite"] = True if bad is None else ~bad  # a device bool (reading it is a host sync)
        return out

    def _host_reads_now(self) -> bool:
        """The steps at which the host reads device values on purpose: the log interval, a checkpoint, the
        last step."""
        t = self.train
        return self.step % t.log_every == 0 or self.step % t.save_every == 0 or self.step == t.max_steps

    def _compile_failed(self, exc: BaseException) -> None:
        """torch.compile failed in this step: its whole traceback goes to ``compile_error.log`` in the run
        directory, its first lines to the log and to the compile record (and ``accel.json``), and the modules
        run in eager from now on. Every rank compiles the same graphs, so every rank gets here in the same
        stage."""
        path = None
        if self.run_dir is not None and self.rank == 0:
            path = self.run_dir.compile_log
            try:
                self.run_dir.mkdir()
                path.write_text("".join(traceback.format_exception(exc)))
            except OSError as err:
                log.warning(f"warning: could not write {path}: {err}")
                path = None
        record = failure_record(exc, self.step + 1, str(path) if path else None)
        undone = disable_compile(self.modules)
        self.accel.records = [record if r.name == "compile" else r for r in self.accel.records]
        self.compiling = False
        self._compile_failed_at = self.step + 1
        log.warning(f"warning: {record.detail} (modules back in eager: {', '.join(undone) or 'none'})")
        self._compile_events.append({"event": "compile_failed", "step": self.step + 1, "detail": record.detail})
        if path is not None and self.run_dir is not None and self.run_dir.accel.is_file():
            try:  # accel.json says what ran: now eager
                saved = json.loads(self.run_dir.accel.read_text())
                saved["accelerations"] = self.accel.records_dict()
                self.run_dir.accel.write_text(json.dumps(saved, indent=2, default=str) + "\n")
            except (OSError, ValueError, KeyError) as err:
                log.warning(f"warning: could not update {self.run_dir.accel}: {err}")

    def _epoch(self) -> int:
        return self.train_loader.epoch if self.train_loader is not None else self.last_epoch

    def _rank_trained_nothing(self) -> UserError:
        """Every rank's error when some rank trained nothing for a whole epoch while the others trained (every
        rank calls it: one gather of who and what)."""
        ranks = gather((self._rank_idle.starved, self._rank_idle.steps, dict(self.oom.skipped)), self.world_size)
        who = [r for r, (starved, _, _) in enumerate(ranks) if starved]
        skipped = {uid: frames for r in who for uid, frames in ranks[r][2].items()}
        some = ", ".join(f"{uid} ({frames} frames)" for uid, frames in list(skipped.items())[:5])
        names = ", ".join(str(r) for r in who)
        return UserError(
            f"nothing trained on rank {names} (of {self.world_size}) in {max(ranks[r][1] for r in who)} step(s) "
            f"in a row, a whole epoch of its share of the data, while the other ranks trained: every utterance it "
            f"was given ran out of memory on its own and was left out ({len(skipped)} utterance(s), e.g. "
            f"{some or 'none'}). That rank's device has less free memory than the others' (another process on "
            "it?): free it, or set data.max_frames / data.max_duration below those lengths (data.oversize=skip), "
            "data.crop_frames, accel.activation_checkpointing or bf16"
        )

    def _check_trained(self, trained: bool) -> None:
        """A whole epoch of steps in which every utterance was left out (each ran out of memory on its own) is
        a run that trains nothing: an error with the fix, not a run that "finishes" with ``loss: null`` rows."""
        if trained:
            self.idle_steps, self._idle_since_epoch = 0, None
            self.trained_steps += 1
            return
        epoch = self.train_loader.epoch if self.train_loader is not None else self.last_epoch
        if self._idle_since_epoch is None:
            self._idle_since_epoch = epoch
        self.idle_steps += 1
        if epoch >= self._idle_since_epoch + 2:  # a full epoch went by without an update
            raise self._nothing_trained()

    def _nothing_trained(self) -> UserError:
        skipped = self.oom.skipped
        some = ", ".join(f"{uid} ({frames} frames)" for uid, frames in list(skipped.items())[:5])
        return UserError(
            f"nothing trained: in {self.idle_steps} step(s) in a row every utterance ran out of "
            f"memory on its own and was left out ({len(skipped)} utterance(s) so far, e.g. {some or 'none'}); set "
            "data.max_frames / data.max_duration below their lengths (data.oversize=skip), data.crop_frames, "
            "accel.activation_checkpointing or bf16, or use a larger GPU"
        )

    def _check_numerics(self) -> None:
        fallback = self.numerics.settle(self.step, self.precision)  # host sync: the guard's device counts
        if fallback is None:
            return
        old = self.precision.name
        found = self.run_dir.latest() if self.run_dir else None  # the last good state: the newest, else the start
        state = found[1] if found is not None else self._initial_state
        if state is not None:
            self.load_state_dict(state, restore_loader=False)
        self._set_precision(fallback)
        self.numerics.fell_back(old, fallback, self.step)

    def _set_precision(self, plan: PrecisionPlan) -> None:
        self.precision = plan
        self.scalers = {name: plan.grad_scaler() for name in self.optimizers}

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue the same run (sharded: the full states, every rank calls it)."""
        return {**self._run_state(), **self._model_state()}

    def _run_state(self) -> dict[str, Any]:
        """The state without the modules and optimizers (a sharded checkpoint keeps those in its shards)."""
        return {
            ckpt.FORMAT_KEY: ckpt.FORMAT_VERSION,
            "step": self.step,
            "samples_seen": self.samples_seen,
            "audio_seconds_seen": self.audio_seconds_seen,
            "trained_steps": self.trained_steps,
            "last_epoch": self.last_epoch,
            "schedulers": {k: s.state_dict() for k, s in self.schedulers.items()},
            "scalers": {k: s.state_dict() for k, s in self.scalers.items()},
            "loader": self.train_loader.state_dict() if self.train_loader is not None else None,
            "rng": ckpt.rng_state(),
            **self.oom.state_dict(),
            **self.numerics.state_dict(),
            "interval": self.interval.state_dict(),
            "precision": self.precision.name,
            "best_eval": self.best_eval,
            "best_metric": self.best_metric.name,
            "evals_since_best": self.evals_since_best,
            "config": self.run_config,
        }

    def _stage_modules(self) -> dict[str, list[str]]:
        return {s.name: list(s.modules) for s in self.specs}

    def _model_state(self) -> dict[str, Any]:
        """Modules and optimizers; sharded: full state dicts (every rank calls it), loadable by any world size."""
        if self.sharded:
            mods, opts = full_state(self.modules, self.optimizers, self._stage_modules())
            return {"modules": mods, "optimizers": opts, "sharded_optimizer_state": True}
        return {
            "modules": {k: m.state_dict() for k, m in self.modules.items()},
            "optimizers": {k: o.state_dict() for k, o in self.optimizers.items()},
        }

    def load_state_dict(self, state: dict[str, Any], restore_loader: bool = True) -> None:
        """Restore a :meth:`state_dict` (checkpoint)."""
        group_keys = {k: {key for g in o.param_groups for key in g} for k, o in self.optimizers.items()}
        try:
            if ckpt.SHARDS_KEY in state:  # a sharded checkpoint (saved by any number of ranks)
                load_sharded(
                    self.modules,
                    self.optimizers,
                    self._stage_modules(),
                    Path(state[ckpt.SHARDS_KEY]),
                    state[ckpt.SHARD_REST_KEY],
                )
            elif self.sharded or state.get("sharded_optimizer_state"):  # FQN-keyed optimizer state (FSDP2 runs)
                load_full_state(
                    self.modules, self.optimizers, self._stage_modules(), state["modules"], state["optimizers"]
                )
            else:
                for k, m in self.modules.items():
                    m.load_state_dict(state["modules"][k])
                for k, o in self.optimizers.items():
                    o.load_state_dict(state["optimizers"][k])
            for k, s in self.schedulers.items():
                s.load_state_dict(state["schedulers"][k])
        except (KeyError, RuntimeError, ValueError) as exc:
            raise UserError(
                f"checkpoint does not match this model/optimizer config ({str(exc).splitlines()[0]}); "
                f"resume with the run's own config (speechtrain train --resume RUN_DIR)"
            ) from None
        self._check_optimizer_state(state, group_keys)
        if state["precision"] != self.precision.name:
            self._set_precision(resolve_precision(state["precision"], self.device, self.precision.avoid_bf16))
        for k, scaler in self.scalers.items():
            if state["scalers"].get(k):
                scaler.load_state_dict(state["scalers"][k])
        self.step, self.last_epoch = int(state["step"]), int(state["last_epoch"])
        self.samples_seen, self.audio_seconds_seen = int(state["samples_seen"]), float(state["audio_seconds_seen"])
        self.trained_steps = int(state.get("trained_steps", self.step))  # (older checkpoints: every step)
        oom_ranks = state.get("oom_ranks")  # each rank's caps and counters, when as many ranks saved them
        if oom_ranks and len(oom_ranks) == self.world_size:
            self.oom.load_state_dict(oom_ranks[self.rank])
        else:  # one process's state, or the ranks' merged: the smallest caps, every skip, the counters on rank 0
            self.oom.load_state_dict(state if self.rank == 0 else {**state, "oom_recoveries": 0, "oom_events": []})
        self.numerics.load_state_dict(state)
        self.interval = Interval()
        if state.get("interval") is not None:
            self.interval.load_state_dict(state["interval"])
        self.best_eval, self.evals_since_best = state["best_eval"], int(state.get("evals_since_best", 0))
        if state.get("best_metric", "loss") != self.best_metric.name:  # another metric now: its best starts afresh
            self.best_eval, self.evals_since_best = None, 0
        if restore_loader and state.get("loader") is not None and self.train_loader is not None:
            self.train_loader.load_state_dict(state["loader"])
        ranks = state.get("rng_ranks")  # every rank's streams, when saved by as many ranks as there are now
        ckpt.set_rng_state(ranks[self.rank] if ranks and len(ranks) == self.world_size else state["rng"])

    def _check_optimizer_state(self, state: dict[str, Any], group_keys: dict[str, set[str]]) -> None:
        """A checkpoint's optimizer state must be of this run's optimizer: another one's loads "fine" and fails
        at the first step (SGD on AdamW state: KeyError 'momentum'), or silently keeps the old settings."""
        saved = state.get("config") if isinstance(state.get("config"), dict) else {}
        saved_name = (saved.get("optim") or {}).get("name") if isinstance(saved, dict) else None
        missing = {
            k: sorted(want - {key for g in self.optimizers[k].param_groups for key in g})
            for k, want in group_keys.items()
        }
        missing = {k: v for k, v in missing.items() if v}
        if (saved_name is None or saved_name == self.optim.name) and not missing:
            return
        lacks = "; ".join(f"{k}: no {', '.join(v)}" for k, v in missing.items())
        where = self.run_dir or "RUN_DIR"
        raise UserError(
            f"the checkpoint's optimizer state is of {saved_name or 'another optimizer'}"
            f"{f' ({lacks})' if lacks else ''}, not of optim.name={self.optim.name}: resume with the run's own "
            f"optim settings (leave out the optim.* overrides), or start a new run from its weights with "
            f"train.init_from={where}"
        )

    def save_checkpoint(self, best: bool = False) -> Path | None:
        """Atomically write ``checkpoints/step_N.pt`` (and ``best.pt``), keep the last K.

        Every rank calls it at the same step (it gathers every rank's RNG state); rank 0 alone writes the
        file. Sharded (FSDP2): every rank first writes its shards to a temporary folder, which rank 0 renames
        to ``step_N.dcp`` before writing ``step_N.pt`` (run state only) last, as the commit marker. A failed
        write is a CheckpointError on every rank.
        """
        if self.run_dir is None:
            return None
        ranks = (
            gather((ckpt.rng_state(), os.getpid(), self.oom.state_dict()), self.world_size)
            if self.world_size > 1
            else None
        )
        shards, state = None, None
        if self.sharded:
            assert ranks is not None
            shards = self.run_dir.shard_temp(self.step, ranks[0][1])
            rest = save_sharded(self.modules, self.optimizers, self._stage_modules(), shards)
            state = {**self._run_state(), ckpt.SHARD_REST_KEY: rest, "shard_ranks": self.world_size}
        error: CheckpointError | None = None
        path = None
        if self.rank == 0:
            state = state if state is not None else self.state_dict()
            if ranks is not None:  # every rank's random streams and OOM state (caps, counters, skips)
                state["rng_ranks"] = [rng for rng, _, _ in ranks]
                state["oom_ranks"] = [oom for _, _, oom in ranks]
                state.update(merge_rank_states(state["oom_ranks"]))
            try:
                path = self.run_dir.save(state, self.train.keep_checkpoints, best, shards)
            except CheckpointError as exc:
                error = exc
        if any_rank(error is not None, self.device, self.world_size):  # the others must not train on alone
            raise error or CheckpointError(
                f"rank {self.rank}: rank 0 could not write the checkpoint of step {self.step} (see its message)"
            )
        return path

    def resume(self, found: tuple[Path, dict[str, Any]] | None = None) -> bool:
        """Load the newest loadable checkpoint of ``run_dir`` (or ``found``, a ``(path, state)`` already read)
        and rewind ``metrics.jsonl`` to its step (the rows after it are written again); False if there is none."""
        if found is None:
            found = self.run_dir.latest(quarantine=self.rank == 0) if self.run_dir else None
        if found is None:
            return False
        self.load_state_dict(found[1])
        self.metrics.rewind(self.step)
        log.info(f"resumed from {found[0]} (step {self.step})")
        return True

    # ------------------------------------------------------------------ the loop
    def fit(self) -> dict[str, Any]:
        """Train until ``train.max_steps`` (or max_minutes, or a signal). Returns a summary."""
        t = self.train
        if self.train_loader is None:
            raise UserError("Trainer.fit needs a train_loader")
        if self.run_dir is not None:
            self.run_dir.mkdir()
        if self._initial_state is None and self.step == 0 and self.precision.use_grad_scaler:
            # only fp16 falls back (reloading the last good state); before the first checkpoint that is the start
            self._initial_state = ckpt.cpu_copy(self.state_dict())
        it = TimedIterator(self.train_loader)  # seconds blocked waiting for data
        stop_every = min(t.log_every, STOP_AGREE_EVERY)
        t_start, reason = time.perf_counter(), "max_steps"
        self._fit_start = t_start
        bar = progress_bar(t.max_steps, self.step, t.progress and self.rank == 0)
        reached = StepFile(self.run_dir if self.rank == 0 else None, t.max_steps)  # for the UI, between log rows
        reached.write(self.step)
        with StopSignals() as signals:
            try:
                while self.step < t.max_steps:
                    late = bool(t.max_minutes and time.perf_counter() - t_start > t.max_minutes * 60)
                    # agreed: a signal on any rank (or its clock) stops every rank at the same step; the ranks
                    # agree every stop_every steps only (an all-reduce read on the host: a sync), one process
                    # looks every step (no tensor)
                    stop = signals.reason is not None or late
                    if self.world_size > 1 and self.step % stop_every == 0:
                        stop = any_rank(stop, self.device, self.world_size)  # host sync: every stop_every steps
                    elif self.world_size > 1:
                        stop = False
                    if stop:
                        reason = signals.reason or ("max_minutes" if late else "a stop on another rank")
                        if reason == "a stop on another rank":
                            peer_stopped()
                        break
                    t0 = time.perf_counter()
                    micro = [next(it) for _ in range(t.grad_accum)]
                    compiled = compile_seconds() if self.compiling else 0.0
                    out = self.train_step(micro)
                    elapsed = time.perf_counter() - t0
                    # this step compiled a graph (or tried to): its time is warm-up, not the rate's
                    warm = compile_seconds() > compiled if self.compiling else self._compile_failed_at == self.step
                    if warm:
                        self.compile_warmup_seconds += elapsed
                        self.compile_steps += 1
                    self.interval.add(micro, out, it.reset(), elapsed, timed=not warm)
                    self._epoch_boundary()
                    bar.update(1)
                    reached.write(self.step)
                    if self.trained_steps == 0:  # nothing trained yet (all left out): no rows, evals or checkpoints
                        continue
                    if self.step % t.log_every == 0 or self.step == t.max_steps:
                        row = self._log_row(self.interval)
                        aps = f"{row['audio_seconds_per_second']:.1f}"
                        bar.set_postfix(loss=f"{row.get('loss', math.nan):.3f}", aps=aps, mem=row["mem"])
                        self.interval = Interval()
                    heard = t.max_audio_seconds is not None and self.audio_seconds_seen >= t.max_audio_seconds
                    heard = any_rank(heard, self.device, self.world_size) if t.max_audio_seconds else False
                    eval_now = self.step % t.eval_every == 0 or self.step == t.max_steps or heard
                    best = self._maybe_eval() if eval_now else False
                    best = any_rank(best, self.device, self.world_size) if eval_now else False  # rank 0 evaluates
                    stale = eval_now and self._patience_spent()
                    if self.step % t.save_every == 0 or self.step == t.max_steps or best or stale or heard:
                        self.save_checkpoint(best=best)
                    if heard and self.step < t.max_steps:
                        reason = "max_audio_seconds"
                        break
                    if stale:
                        reason = "early_stop"
                        log.info(
                            f"early stop at step {self.step}: {self.best_metric.name} has not improved for "
                            f"{self.evals_since_best} evaluations (train.early_stop_patience={t.early_stop_patience});"
                            f" best {self.best_metric.name}={self.best_eval}"
                        )
                        break
                # still under the handlers: a second signal cannot cut this save short
                if reason not in ("max_steps", "early_stop", "max_audio_seconds"):
                    bar.close()
                    path = self.save_checkpoint() if self.trained_steps else None  # (nothing trained: nothing to keep)
                    log.info(f"stopped ({reason}) at step {self.step}; checkpoint {path}")
                    if signals.count > 1:
                        log.info(
                            f"({signals.count - 1} more signal(s) came during the stop checkpoint: held until it "
                            "was written)"
                        )
            except RuntimeError as exc:
                if self.world_size > 1 and is_peer_failure(exc):
                    raise peer_failure_error(exc, self.rank, self.step + 1, self.run_dir) from None
                unused = unused_parameters_error(exc)
                if unused is not None:
                    raise unused from None
                raise
            finally:
                bar.close()
                reached.close()
        self.metrics.close()
        if self.step > 0 and self.trained_steps == 0:  # the whole run (shorter than an epoch) trained nothing
            raise self._nothing_trained()
        oom = self._rank_oom(take_events=False)
        return {
            "steps": self.step,
            "stopped": reason,
            "oom_recoveries": oom["oom_recoveries"],  # every rank's
            "oom_skipped": len(oom["oom_skipped"]),
            "nonfinite_steps": self.numerics.nonfinite_steps,
            "precision": self.precision.name,
            "precision_fallbacks": self.numerics.fallbacks,
            "best_eval": self.best_eval,
            "compile_warmup_seconds": self.compile_warmup_seconds,
            "compile": compile_record.detail if (compile_record := self.accel.record("compile")) else None,
            "best_metric": self.best_metric.name,
        }

    def _rank_oom(self, take_events: bool) -> dict[str, Any]:
        """The OOM state of every rank, merged (:func:`~speechtrain.train.oom_guard.merge_rank_states`: the
        smallest caps, the recoveries summed, every skip and, with ``take_events``, every rank's new events).
        Every rank calls it at the same point (one gather under a process group)."""
        mine = self.oom.state_dict()
        if take_events:
            self.oom.take_events()
        else:
            mine["oom_events"] = []
        return merge_rank_states(gather(mine, self.world_size) if self.world_size > 1 else [mine])

    def _epoch_boundary(self) -> None:
        epoch = self.train_loader.epoch if self.train_loader is not None else self.last_epoch
        if epoch != self.last_epoch:
            self.last_epoch = epoch
            if self.optim.scheduler_interval == "epoch":
                for s in self.schedulers.values():
                    s.step()

    def _patience_spent(self) -> bool:
        """Whether ``train.early_stop_patience`` evaluations in a row brought no better best_metric (every rank
        agrees: rank 0 evaluates)."""
        patience = self.train.early_stop_patience
        spent = patience is not None and self.evals_since_best >= patience
        return any_rank(spent, self.device, self.world_size) if patience is not None else False

    def _maybe_eval(self) -> bool:
        """Evaluate and write the eval row; True when its ``best_metric`` is the best so far (after best_after)."""
        if self.evaluator is None:
            return False
        t0 = time.perf_counter()
        summary = self.evaluator.run(self.step, lambda b: self.to_device(b, training=False), self.precision.autocast)
        self._eval_seconds += time.perf_counter() - t0
        if summary is None:
            return False
        summary["audio_seconds_seen"] = self.audio_seconds_seen
        if self._fit_start is not None:  # wall time training, evaluations left out: what a time-to-quality counts
            summary["train_seconds"] = round(time.perf_counter() - self._fit_start - self._eval_seconds, 3)
        if self.evaluator.quality is not None and self._fit_start is not None:
            elapsed = time.perf_counter() - self._fit_start
            summary["quality_share"] = round(self.evaluator.quality_seconds / elapsed, 4) if elapsed > 0 else 0.0
        self.metrics.write({"split": "eval", "step": self.step, **summary})
        log.info(f"[eval] step {self.step}: " + ", ".join(f"{k}={v:.4g}" for k, v in summary.items() if _num(v)))
        return self._track_best(summary)

    def _track_best(self, summary: dict[str, Any]) -> bool:
        """Whether this evaluation's ``best_metric`` beats the best so far (counted for early stopping after
        ``train.best_after``); a UserError when the eval row lacks a key of the user's own naming."""
        name = self.best_metric.name
        if name not in summary and name not in METRICS:  # a metric of the catalogue may be absent (no item left)
            bookkeeping = ("audio_seconds_seen", "train_seconds")
            numeric = sorted(
                k for k, v in summary.items() if _num(v) and not k.startswith("quality_") and k not in bookkeeping
            )
            raise UserError(
                f"train.best_metric={name}: the eval row has no '{name}' (it has {', '.join(numeric)}); set "
                f"train.best_metric to one of them"
            )
        if self.step < self.train.best_after:
            return False
        value = float(summary[name]) if _num(summary.get(name)) else math.nan
        if math.isfinite(value) and self.best_metric.better(value, self.best_eval):
            self.best_eval, self.evals_since_best = value, 0
            return True
        self.evals_since_best += 1
        return False

    def _log_row(self, interval: Interval) -> dict[str, Any]:
        row: dict[str, Any] = {"split": "train", "step": self.step, "epoch": self.last_epoch}
        row.update(interval.means())  # host sync: .item() of the accumulated losses, once per log interval
        for name, opt in self.optimizers.items():
            row[f"lr_{name}"] = opt.param_groups[0]["lr"]
        row["lr"] = self.optimizers[self.specs[-1].name].param_groups[0]["lr"]
        row.update(samples_seen=self.samples_seen, audio_seconds_seen=self.audio_seconds_seen)
        oom = self._rank_oom(take_events=True)  # every rank's, not rank 0's alone
        row.update(oom_recoveries=oom["oom_recoveries"], nonfinite_steps=self.numerics.nonfinite_steps)
        if oom["oom_skipped"]:
            row["oom_skipped"] = len(oom["oom_skipped"])
        row["precision"] = self.precision.name
        if oom["bucket_caps"]:
            row["bucket_max_items"] = oom["bucket_caps"]
        stats = self.accel.compile_stats()
        self.resources.add_to(row, stats)
        if stats is not None or self._compile_events:
            row["compile_warmup_seconds"] = round(self.compile_warmup_seconds, 3)
            row["compile_steps"] = self.compile_steps
            record = self.accel.record("compile")
            if record is not None and stats is not None:
                record.info.update(warmup_seconds=row["compile_warmup_seconds"], recompiles=stats["recompiles"])
        events = sorted(oom["oom_events"], key=lambda e: e.get("step", 0)) + self.numerics.take_events()
        events += self._compile_events
        self._compile_events = []
        if events:
            row["events"] = events
        self.metrics.write(row)
        return row


class IdleSteps:
    """Steps in a row in which one rank trained nothing (every utterance of its micro-batches left out by the
    OOM guard); ``starved`` once a whole epoch of its share went by so."""

    def __init__(self) -> None:
        self.steps = 0
        self.since_epoch: int | None = None
        self.starved = False

    def update(self, trained: bool, epoch: int) -> None:
        if trained:
            self.steps, self.since_epoch, self.starved = 0, None, False
            return
        self.since_epoch = epoch if self.since_epoch is None else self.since_epoch
        self.steps += 1
        self.starved = epoch >= self.since_epoch + 2  # a full epoch went by without an update


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
