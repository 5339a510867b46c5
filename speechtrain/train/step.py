"""The step runner: one optimizer step of every stage of a task, without a host sync in steady state.

:class:`StepRunner` owns what happens between "here are the step's micro-batches" and "every stage stepped":
the copy of the batches to the device (a side stream on CUDA), each stage's forward/backward under the
:class:`~speechtrain.train.oom_guard.OOMGuard` (a stage redone in pieces after an out-of-memory error, with the
ranks' vote before the syncing backward), the unscale/clip and the numerics guard's skippable optimizer step
(:class:`~speechtrain.train.numerics.SkippableStep`, decided on the device), the eager retry of a stage that
failed to compile, and the ranks' check that none trained nothing for a whole epoch. It moves no counter of the
run: the Trainer does that with the :class:`StepResult` it returns. A user's own loop can call :meth:`StepRunner.run`
for its steps (see ``examples/own_loop.py``).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from speechtrain.data.batch import Batch
from speechtrain.errors import UserError
from speechtrain.memory.oom import maybe_inject_oom
from speechtrain.train.compiling import CompileWatch
from speechtrain.train.distributed import StageSync, all_sum, any_ranks, gather, mean_over_ranks
from speechtrain.train.numerics import NumericsGuard, SkippableStep, nonfinite
from speechtrain.train.oom_guard import OOMGuard, StageRun, StageVote
from speechtrain.train.optimizers import StageOptimizers
from speechtrain.train.task import Task
from speechtrain.train.wrapping import StageWrapping, stage_params

#: on-device features/augmentation applied to a batch after the copy: ``transform(batch, training)``
BatchTransform = Callable[[Batch, bool], Batch]


@dataclass
class StepResult:
    """What one step did: its outputs (device tensors: loss terms, grad norms), whether a stage was skipped as
    non-finite (``bad``, a device bool; None when no stage stepped), whether some rank and this rank trained,
    and the global batch's items (summed over the ranks) and audio seconds (to add to the run's count in order)."""

    out: dict[str, Any]
    bad: torch.Tensor | None
    trained: bool
    trained_here: bool
    items: float
    audio_seconds: list[float]


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


class StepRunner:
    """Runs the optimizer steps of ``task`` (modules already placed on ``device``) with the parts it is given."""

    def __init__(
        self,
        task: Task,
        device: torch.device,
        wrapping: StageWrapping,
        optimizers: StageOptimizers,
        oom: OOMGuard,
        numerics: NumericsGuard,
        compile_watch: CompileWatch,
        grad_clip: float | None = None,
        batch_transform: BatchTransform | None = None,
    ) -> None:
        self.task, self.device, self.wrapping, self.optimizers = task, device, wrapping, optimizers
        self.oom, self.numerics, self.compile, self.grad_clip = oom, numerics, compile_watch, grad_clip
        self.batch_transform = batch_transform
        self.modules: dict[str, nn.Module] = task.modules()
        self.specs = task.optimizer_specs()
        self.idle = IdleSteps()  # this rank's own (under a process group: the others may train)
        self._params: dict[str, list[nn.Parameter]] = {}  # each stage's trainable parameters, listed once
        self._steppers: dict[str, SkippableStep] = {}  # each stage's optimizer step, skipped on the device
        self._copy_stream: Any = None  # CUDA: the side stream of the batches' copies (see copy_ahead)

    @property
    def world_size(self) -> int:
        return self.wrapping.world_size

    def to_device(self, batch: Batch, training: bool = True) -> Batch:
        """Host batch -> device (non-blocking), then the on-device features/augmentation."""
        out = batch.to(self.device, non_blocking=True)  # no-op for tensors already there
        return self.batch_transform(out, training) if self.batch_transform is not None else out

    def copy_ahead(self, micro: list[Batch]) -> list[Batch]:
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
        return stage_params(self.specs, self.modules, stage)

    def run(self, micro_batches: list[Batch], step: int, epoch: int) -> StepResult:
        """Optimizer step ``step + 1`` over ``micro_batches`` (host or device batches) for every stage, in epoch
        ``epoch``; utterances the OOM guard left out (too long to fit alone) are taken out first."""
        if self.oom.skipped:
            micro_batches = [p for mb in micro_batches for p in [self.oom.without_skipped(mb)] if p is not None]
        micro_batches = self.copy_ahead(micro_batches)
        weights = [self.task.batch_weight(mb) for mb in micro_batches]
        # the global batch: its weight (for each piece's share), items and audio seconds, summed over the ranks
        items = sum(mb.size for mb in micro_batches)
        seconds = sum(mb.audio_seconds for mb in micro_batches)
        # (and how many ranks trained nothing for a whole epoch while others did: agreed here, with no collective
        # of its own); under a process group a host sync (all_sum reads the all-reduce): the share of each piece
        # is a host number
        starved = float(self.idle.starved)
        total, size, seconds, starved = all_sum([sum(weights), items, seconds, starved], self.device, self.world_size)
        if starved:
            raise self.rank_trained_nothing()
        total = total or 1.0
        caches: list[dict[str, Any]] = [{} for _ in micro_batches]  # per micro-batch, shared by its stages
        out: dict[str, Any] = {}
        bad: torch.Tensor | None = None  # on the device: some stage's step was skipped as non-finite
        trained = trained_here = False
        opts = self.optimizers.optimizers
        for spec in self.specs:
            last = spec is self.specs[-1]
            opts[spec.name].zero_grad(set_to_none=True)  # each stage starts from clean gradients
            try:
                sums, run, total = self.run_stage(spec.name, micro_batches, weights, total, caches, step)
            except Exception as exc:
                if not self.compile.is_failure(exc):
                    raise
                self.compile.failed(exc, step + 1)  # the stage again, in eager
                del exc
                for c in caches:
                    c.clear()
                opts[spec.name].zero_grad(set_to_none=True)
                sums, run, total = self.run_stage(spec.name, micro_batches, weights, total, caches, step)
            trained_here |= run.here
            if not run.anywhere:  # every utterance of every rank left out (each runs out of memory alone)
                opts[spec.name].zero_grad(set_to_none=True)  # no update on any rank this stage
                out[f"grad_norm_{spec.name}"] = torch.tensor(float("nan"))
                continue
            trained = True
            grad_norm, counted = self.optimizer_step(spec.name, sums["loss"])  # the same on every rank
            bad = counted if bad is None else bad | counted
            for k, v in sums.items():  # an earlier stage's loss is "<stage>_loss"; its components keep their names
                out[k if (k != "loss" or last) else f"{spec.name}_loss"] = v
            out[f"grad_norm_{spec.name}"] = grad_norm
            if last:
                out["grad_norm"] = grad_norm
            sync = self.wrapping.sync.get(spec.name)
            if isinstance(sync, StageSync):
                sync.settle()  # every rank is here: DDP's one bucket rebuild happens now, not inside a forward
        del caches
        self.optimizers.zero_grad()  # free stray gradients between steps
        if self.world_size > 1:
            self.idle.update(trained_here, epoch)
        # one process: each micro-batch's seconds, added one by one to the run's count (the same float sums as
        # before process groups existed); under a process group the global sum
        heard = [mb.audio_seconds for mb in micro_batches] if self.world_size == 1 else [seconds]
        return StepResult(out, bad, trained, trained_here, size, heard)

    def run_stage(
        self,
        stage: str,
        micro: list[Batch],
        weights: list[float],
        total: float,
        caches: list[dict[str, Any]],
        step: int,
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
        sync = self.wrapping.sync.get(stage)
        world_size, precision = self.world_size, self.optimizers.precision

        def run_piece(i: int, piece: Batch, split: bool, agree: Callable[[], None] | None) -> None:
            maybe_inject_oom(piece)
            share = (self.task.batch_weight(piece) if split else weights[i]) / total * world_size
            dev_piece = self.to_device(piece)

            def forward() -> dict[str, torch.Tensor]:
                with precision.autocast():
                    out = self.task.training_step(dev_piece, stage, {} if split else caches[i])
                if agree is not None and world_size > 1:
                    agree()  # every rank got here without running out of memory: the syncing backward may start
                return out

            out = forward() if sync is None else sync.run(forward, sync=agree is not None)
            self.optimizers.scalers[stage].scale(out["loss"].float() * share).backward()
            for k, v in out.items():
                v = v.detach().float()
                sums[k] = sums[k] + v * share if k in sums else v * share

        def reset() -> None:  # drop every reference to the failed attempt; weigh what the next one trains
            nonlocal total
            sums.clear()
            for c in caches:
                c.clear()
            self.optimizers.optimizers[stage].zero_grad(set_to_none=True)
            gc.collect()
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            left = [p for mb in micro for p in [self.oom.without_skipped(mb)] if p is not None]
            total = all_sum([sum(self.task.batch_weight(p) for p in left)], self.device, world_size)[0] or 1.0

        # under a process group: one all-reduce read on the host per attempt (a sync), between the last piece's
        # forward and its gradient-syncing backward: a rank out of memory (or left with nothing) must not leave the
        # others in DDP's all-reduce. Without the guard (FSDP, oom_guard off) an OOM stops the run anyway and no
        # utterance is ever left out: no agreement, no sync.
        def vote(mine: StageVote) -> StageVote:
            if not self.oom.enabled:
                return mine
            return StageVote(*any_ranks([mine.failed, mine.empty, mine.trained], self.device, world_size))

        run = self.oom.run_stage(micro, run_piece, reset, stage=stage, step=step + 1, vote=vote)
        if run.anywhere and not run.here and isinstance(sync, StageSync):
            sync.contribute_nothing()  # the other ranks' gradient all-reduce needs this rank's (zero) part
        if run.anywhere and run.empty_somewhere and world_size > 1:  # the same terms, in the same order
            names: list[str] = next((n for n in gather(list(sums), world_size) if n), [])
            sums = {k: sums[k] if k in sums else torch.zeros((), device=self.device) for k in names}
        return mean_over_ranks(sums, world_size), run, total

    def _stage_params(self, stage: str) -> list[nn.Parameter]:
        """``params_of(stage)``, listed once (a Python walk over every module's parameters each step is host
        time the GPU waits for)."""
        if stage not in self._params:
            self._params[stage] = self.params_of(stage)
        return self._params[stage]

    def optimizer_step(self, stage: str, loss: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Unscale, clip and step ``stage``, the step skipped on the device when the loss or the gradient norm
        is not finite. Returns the gradient norm and a 0-dim bool tensor: the step counts as non-finite (an
        fp16 overflow that the scaler absorbs by backing off does not). No host sync (see
        :class:`~speechtrain.train.numerics.SkippableStep` for its first update)."""
        opt, scaler = self.optimizers.optimizers[stage], self.optimizers.scalers[stage]
        params = self._stage_params(stage)  # gradients already averaged over the ranks by the stage's DDP
        scaler.unscale_(opt)  # fp16: records the scaler's found-inf on the device
        spec = next(s for s in self.specs if s.name == stage)
        clip = spec.grad_clip if spec.grad_clip is not None else self.grad_clip
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

    def rank_trained_nothing(self) -> UserError:
        """Every rank's error when some rank trained nothing for a whole epoch while the others trained (every
        rank calls it: one gather of who and what)."""
        ranks = gather((self.idle.starved, self.idle.steps, dict(self.oom.skipped)), self.world_size)
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

    def nothing_trained(self, idle_steps: int) -> UserError:
        """The error of a run whose every utterance was left out for ``idle_steps`` steps in a row."""
        skipped = self.oom.skipped
        some = ", ".join(f"{uid} ({frames} frames)" for uid, frames in list(skipped.items())[:5])
        return UserError(
            f"nothing trained: in {idle_steps} step(s) in a row every utterance ran out of "
            f"memory on its own and was left out ({len(skipped)} utterance(s) so far, e.g. {some or 'none'}); set "
            "data.max_frames / data.max_duration below their lengths (data.oversize=skip), data.crop_frames, "
            "accel.activation_checkpointing or bf16, or use a larger GPU"
        )
