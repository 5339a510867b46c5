"""The training loop: :meth:`Trainer.fit` and :meth:`Trainer.train_step` over parts it is given.

One optimizer step = for each stage of the task (one for most models; ``disc`` then ``gen`` for
GANs): forward/backward every micro-batch, each loss scaled by its share of the step's weight,
then sync, unscale, clip, check finite, step. No model code lives here, nothing is built here, and no
process-wide setting is changed here: the recipe layer (:func:`speechtrain.recipes.loop.build_trainer`, what
every door calls) builds each part from the config and hands them over. The parts, each in its own module:

- :class:`~speechtrain.train.state.RunState`: the run's counters (step, what was seen, the best metric);
- :class:`~speechtrain.train.wrapping.StageWrapping`: the strategy and each stage's gradient sync;
- :class:`~speechtrain.train.optimizers.StageOptimizers`: optimizers, schedulers, grad scalers, precision;
- :class:`~speechtrain.train.step.StepRunner`: a step's forward/backward with the OOM guard and its rank vote,
  and the numerics guard's skippable optimizer step;
- :class:`~speechtrain.train.checkpointer.Checkpointer`: state out and in, the files, resume, ``best.pt``;
- :class:`~speechtrain.train.eval_schedule.EvalSchedule`: when to evaluate, the best metric, patience;
- :class:`~speechtrain.train.metrics_log.MetricsLog`: the train rows;
- :class:`~speechtrain.train.compiling.CompileWatch`: the compile warm-up and a failed compile.

What stays here is the order of things: a step, its counters, the numerics guard's verdict at the host reads,
the log row, the evaluation, the checkpoint, and the stops (signals, ``train.max_minutes``, early stop).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from speechtrain.config import TrainConfig
from speechtrain.data.batch import Batch
from speechtrain.data.loader import TimedIterator, TrainBatches
from speechtrain.errors import UserError
from speechtrain.logs import get_logger
from speechtrain.train.checkpointer import Checkpointer
from speechtrain.train.compiling import CompileWatch
from speechtrain.train.distributed import any_rank, is_peer_failure, peer_failure_error, unused_parameters_error
from speechtrain.train.eval_schedule import EvalSchedule
from speechtrain.train.metrics import Interval, StepFile, progress_bar
from speechtrain.train.metrics_log import MetricsLog
from speechtrain.train.numerics import Diverged
from speechtrain.train.optimizers import StageOptimizers
from speechtrain.train.rundir import RunDir
from speechtrain.train.signals import StopSignals, peer_stopped
from speechtrain.train.state import RunState
from speechtrain.train.step import BatchTransform, IdleSteps, StepRunner
from speechtrain.train.wrapping import StageWrapping

__all__ = ["STOP_AGREE_EVERY", "BatchTransform", "IdleSteps", "Trainer"]

log = get_logger(__name__)

#: under a process group the ranks agree on a stop (a signal, train.max_minutes) every this many steps at most (or
#: every log interval when shorter): the agreement is an all-reduce read on the host, a sync the GPU drains for
STOP_AGREE_EVERY = 10


class Trainer:
    """Runs the steps of ``runner`` (whose task's modules are placed, accelerated and wrapped) under the
    schedule of ``train`` (the typed config section), with the parts it is given; builds nothing.
    :func:`speechtrain.recipes.loop.build_trainer` (and ``TrainRecipe.build_trainer``) makes one from a config.
    """

    def __init__(
        self,
        *,
        train: TrainConfig,
        state: RunState,
        wrapping: StageWrapping,
        optimizers: StageOptimizers,
        runner: StepRunner,
        checkpointer: Checkpointer,
        evals: EvalSchedule,
        log_rows: MetricsLog,
        compile_watch: CompileWatch,
        train_loader: TrainBatches | None = None,
    ) -> None:
        self.train, self.state, self.wrapping, self.stage_optimizers = train, state, wrapping, optimizers
        self.runner, self.checkpointer, self.evals, self.log_rows = runner, checkpointer, evals, log_rows
        self.compile_watch, self.train_loader = compile_watch, train_loader
        self.task, self.device = runner.task, runner.device

    # the parts as a user's loop and the recipe read them (the names of the Trainer before the parts left it)
    step = property(lambda self: self.state.step)
    samples_seen = property(lambda self: self.state.samples_seen)
    audio_seconds_seen = property(lambda self: self.state.audio_seconds_seen)
    best_eval = property(lambda self: self.state.best_eval)
    modules = property(lambda self: self.runner.modules)
    specs = property(lambda self: self.runner.specs)
    oom = property(lambda self: self.runner.oom)
    numerics = property(lambda self: self.runner.numerics)
    optimizers = property(lambda self: self.stage_optimizers.optimizers)
    optimizer_records = property(lambda self: self.stage_optimizers.records)
    schedulers = property(lambda self: self.stage_optimizers.schedulers)
    scalers = property(lambda self: self.stage_optimizers.scalers)
    precision = property(lambda self: self.stage_optimizers.precision)
    accel = property(lambda self: self.compile_watch.accel)
    metrics = property(lambda self: self.log_rows.writer)
    evaluator = property(lambda self: self.evals.evaluator)
    best_metric = property(lambda self: self.evals.best_metric)
    rank = property(lambda self: self.wrapping.rank)
    strategy = property(lambda self: self.wrapping.strategy)
    sharded = property(lambda self: self.wrapping.sharded)
    sharded_units = property(lambda self: self.wrapping.sharded_units)
    fsdp_mixed_precision = property(lambda self: self.wrapping.fsdp_mixed_precision)
    ddp_options = property(lambda self: self.wrapping.ddp_options)
    oom_recoveries = property(lambda self: self.oom.recoveries)
    bucket_caps = property(lambda self: self.oom.caps)
    nonfinite_steps = property(lambda self: self.numerics.nonfinite_steps)
    precision_fallbacks = property(lambda self: self.numerics.fallbacks)

    @property
    def world_size(self) -> int:
        return self.wrapping.world_size

    @world_size.setter
    def world_size(self, value: int) -> None:  # the parts share the wrapping: every one sees the change
        self.wrapping.world_size = value

    @property
    def sync(self) -> dict[str, Any]:
        return self.wrapping.sync

    @sync.setter
    def sync(self, value: dict[str, Any]) -> None:
        self.wrapping.sync = value

    @property
    def run_dir(self) -> RunDir | None:
        """The run directory the checkpoints go to (None: none are written)."""
        return self.checkpointer.run_dir

    @run_dir.setter
    def run_dir(self, value: str | Path | RunDir | None) -> None:
        self.checkpointer.run_dir = self.compile_watch.run_dir = RunDir(value) if value else None

    def to_device(self, batch: Batch, training: bool = True) -> Batch:
        return self.runner.to_device(batch, training)

    def state_dict(self) -> dict[str, Any]:
        return self.checkpointer.state_dict()

    def load_state_dict(self, state: dict[str, Any], restore_loader: bool = True) -> None:
        self.checkpointer.load_state_dict(state, restore_loader)

    def save_checkpoint(self, best: bool = False) -> Path | None:
        return self.checkpointer.save(best)

    def resume(self, found: tuple[Path, dict[str, Any]] | None = None) -> bool:
        return self.checkpointer.resume(found)

    # ------------------------------------------------------------------ one optimizer step
    def train_step(self, micro_batches: list[Batch]) -> dict[str, Any]:
        """One optimizer step over ``micro_batches`` (host or device batches) for every stage (see
        :meth:`StepRunner.run <speechtrain.train.step.StepRunner.run>`), then the run's counters, the LR schedule
        and, at the host reads, the numerics guard's verdict."""
        s = self.state
        done = self.runner.run(micro_batches, s.step, self._epoch())
        s.step += 1
        s.samples_seen += int(done.items)
        for seconds in done.audio_seconds:
            s.audio_seconds_seen += seconds
        self.stage_optimizers.step_schedulers("step")
        if done.bad is not None:
            self.numerics.observe(done.bad)
        if self._host_reads_now():
            self._check_numerics()
        self._check_trained(done.trained)
        done.out["finite"] = True if done.bad is None else ~done.bad  # a device bool (reading it is a host sync)
        return done.out

    def _host_reads_now(self) -> bool:
        """The steps at which the host reads device values on purpose: the log interval, a checkpoint, the
        last step."""
        t, step = self.train, self.state.step
        return step % t.log_every == 0 or step % t.save_every == 0 or step == t.max_steps

    def _epoch(self) -> int:
        return self.train_loader.epoch if self.train_loader is not None else self.state.last_epoch

    def _check_trained(self, trained: bool) -> None:
        """A whole epoch of steps in which every utterance was left out (each ran out of memory on its own) is
        a run that trains nothing: an error with the fix, not a run that "finishes" with ``loss: null`` rows."""
        s = self.state
        if trained:
            s.idle_steps, s.idle_since_epoch = 0, None
            s.trained_steps += 1
            return
        epoch = self._epoch()
        if s.idle_since_epoch is None:
            s.idle_since_epoch = epoch
        s.idle_steps += 1
        if epoch >= s.idle_since_epoch + 2:  # a full epoch went by without an update
            raise self.runner.nothing_trained(s.idle_steps)

    def _check_numerics(self) -> None:
        opts = self.stage_optimizers
        try:
            fallback = self.numerics.settle(self.state.step, opts.precision)  # host sync: the guard's device counts
        except Diverged as exc:  # the checkpoint to go back to, in the one line the user reads
            last = self.checkpointer.last_written()
            where = (
                f"the last finite checkpoint is {last}: resume from it with a lower optim.lr (speechtrain train "
                "--resume RUN_DIR optim.lr=...) or start again"
                if last is not None
                else "no checkpoint was written before: start again with a lower optim.lr"
            )
            raise Diverged(f"{exc}; {where}") from None
        if fallback is None:
            return
        old = opts.precision.name
        state = self.checkpointer.last_good()  # the newest checkpoint, else the start
        if state is not None:
            self.checkpointer.load_state_dict(state, restore_loader=False)
        opts.set_precision(fallback)
        self.numerics.fell_back(old, fallback, self.state.step)

    # ------------------------------------------------------------------ the loop
    def fit(self) -> dict[str, Any]:
        """Train until ``train.max_steps`` (or max_minutes, or a signal). Returns a summary."""
        t, s, world_size = self.train, self.state, self.wrapping.world_size
        if self.train_loader is None:
            raise UserError("Trainer.fit needs a train_loader")
        if self.run_dir is not None:
            self.run_dir.mkdir()
        self.checkpointer.keep_start()
        it = TimedIterator(self.train_loader)  # seconds blocked waiting for data
        stop_every = min(t.log_every, STOP_AGREE_EVERY)
        t_start, reason = time.perf_counter(), "max_steps"
        self.evals.fit_start = t_start
        bar = progress_bar(t.max_steps, s.step, t.progress and self.rank == 0)
        reached = StepFile(self.run_dir if self.rank == 0 else None, t.max_steps)  # for the UI, between log rows
        reached.write(s.step)
        with StopSignals() as signals:
            try:
                while s.step < t.max_steps:
                    late = bool(t.max_minutes and time.perf_counter() - t_start > t.max_minutes * 60)
                    # agreed: a signal on any rank (or its clock) stops every rank at the same step; the ranks
                    # agree every stop_every steps only (an all-reduce read on the host: a sync), one process
                    # looks every step (no tensor)
                    stop = signals.reason is not None or late
                    if world_size > 1 and s.step % stop_every == 0:
                        stop = any_rank(stop, self.device, world_size)  # host sync: every stop_every steps
                    elif world_size > 1:
                        stop = False
                    if stop:
                        reason = signals.reason or ("max_minutes" if late else "a stop on another rank")
                        if reason == "a stop on another rank":
                            peer_stopped()
                        break
                    t0 = time.perf_counter()
                    micro = [next(it) for _ in range(t.grad_accum)]
                    compiled = self.compile_watch.mark()
                    out = self.train_step(micro)
                    elapsed = time.perf_counter() - t0
                    # this step compiled a graph (or tried to): its time is warm-up, not the rate's
                    warm = self.compile_watch.count(compiled, s.step, elapsed)
                    s.interval.add(micro, out, it.reset(), elapsed, timed=not warm)
                    self._epoch_boundary()
                    bar.update(1)
                    reached.write(s.step)
                    if s.trained_steps == 0:  # nothing trained yet (all left out): no rows, evals or checkpoints
                        continue
                    if s.step % t.log_every == 0 or s.step == t.max_steps:
                        row = self.log_rows.train_row(s.interval, self.specs[-1].name)
                        aps = f"{row['audio_seconds_per_second']:.1f}"
                        bar.set_postfix(loss=f"{row.get('loss', math.nan):.3f}", aps=aps, mem=row["mem"])
                        s.interval = Interval()
                    heard = t.max_audio_seconds is not None and s.audio_seconds_seen >= t.max_audio_seconds
                    heard = any_rank(heard, self.device, world_size) if t.max_audio_seconds else False
                    best = stale = False
                    if self.evals.due(s.step, heard):
                        best, stale = self.evals.run(self._eval_batch, self.precision.autocast)
                    if self.checkpointer.due(best, stale, heard):
                        self.save_checkpoint(best=best)
                    if heard and s.step < t.max_steps:
                        reason = "max_audio_seconds"
                        break
                    if stale:
                        reason = "early_stop"
                        log.info(self.evals.stop_note())
                        break
                # still under the handlers: a second signal cannot cut this save short
                if reason not in ("max_steps", "early_stop", "max_audio_seconds"):
                    bar.close()
                    path = self.save_checkpoint() if s.trained_steps else None  # (nothing trained: nothing to keep)
                    log.info(f"stopped ({reason}) at step {s.step}; checkpoint {path}")
                    if signals.count > 1:
                        log.info(
                            f"({signals.count - 1} more signal(s) came during the stop checkpoint: held until it "
                            "was written)"
                        )
            except RuntimeError as exc:
                if world_size > 1 and is_peer_failure(exc):
                    raise peer_failure_error(exc, self.rank, s.step + 1, self.run_dir) from None
                unused = unused_parameters_error(exc)
                if unused is not None:
                    raise unused from None
                raise
            finally:
                bar.close()
                reached.close()
        self.metrics.close()
        if s.step > 0 and s.trained_steps == 0:  # the whole run (shorter than an epoch) trained nothing
            raise self.runner.nothing_trained(s.idle_steps)
        return self._summary(reason)

    def _eval_batch(self, batch: Batch) -> Batch:
        return self.runner.to_device(batch, training=False)

    def _summary(self, reason: str) -> dict[str, Any]:
        oom = self.log_rows.rank_oom(take_events=False)
        compile_record = self.accel.record("compile")
        return {
            "steps": self.state.step,
            "stopped": reason,
            "oom_recoveries": oom["oom_recoveries"],  # every rank's
            "oom_skipped": len(oom["oom_skipped"]),
            "nonfinite_steps": self.numerics.nonfinite_steps,
            "precision": self.precision.name,
            "precision_fallbacks": self.numerics.fallbacks,
            "best_eval": self.state.best_eval,
            "compile_warmup_seconds": self.compile_watch.warmup_seconds,
            "compile": compile_record.detail if compile_record else None,
            "best_metric": self.best_metric.name,
        }

    def _epoch_boundary(self) -> None:
        epoch = self._epoch()
        if epoch != self.state.last_epoch:
            self.state.last_epoch = epoch
            self.stage_optimizers.step_schedulers("epoch")
