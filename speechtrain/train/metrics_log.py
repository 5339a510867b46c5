"""The metrics log of a run: the train rows of ``metrics.jsonl`` (and TensorBoard) at each log interval.

:class:`MetricsLog` owns the :class:`~speechtrain.train.metrics.MetricsWriter` (rank 0 writes; the other ranks
hold one that writes nothing), the resource fields (:class:`~speechtrain.train.metrics.ResourceFields`: memory,
recompiles) and the making of a train row from the interval's sums, the learning rates, the guards' counters
and events (every rank's OOM state, gathered) and the compile bookkeeping. Every rank makes each row (the
gather is a collective); the eval rows are the :class:`~speechtrain.train.eval_schedule.EvalSchedule`'s.
"""

from __future__ import annotations

from typing import Any

from speechtrain.train.compiling import CompileWatch
from speechtrain.train.distributed import gather
from speechtrain.train.metrics import Interval, MetricsWriter, ResourceFields
from speechtrain.train.numerics import NumericsGuard
from speechtrain.train.oom_guard import OOMGuard, merge_rank_states
from speechtrain.train.optimizers import StageOptimizers
from speechtrain.train.state import RunState
from speechtrain.train.wrapping import StageWrapping


class MetricsLog:
    """Writes a run's train rows (``writer``) from the parts it reads."""

    def __init__(
        self,
        writer: MetricsWriter,
        resources: ResourceFields,
        state: RunState,
        optimizers: StageOptimizers,
        oom: OOMGuard,
        numerics: NumericsGuard,
        compile_watch: CompileWatch,
        wrapping: StageWrapping,
    ) -> None:
        self.writer, self.resources, self.state, self.optimizers = writer, resources, state, optimizers
        self.oom, self.numerics, self.compile, self.wrapping = oom, numerics, compile_watch, wrapping

    def rank_oom(self, take_events: bool) -> dict[str, Any]:
        """The OOM state of every rank, merged (:func:`~speechtrain.train.oom_guard.merge_rank_states`: the
        smallest caps, the recoveries summed, every skip and, with ``take_events``, every rank's new events).
        Every rank calls it at the same point (one gather under a process group)."""
        mine = self.oom.state_dict()
        if take_events:
            self.oom.take_events()
        else:
            mine["oom_events"] = []
        world_size = self.wrapping.world_size
        return merge_rank_states(gather(mine, world_size) if world_size > 1 else [mine])

    def train_row(self, interval: Interval, last_stage: str) -> dict[str, Any]:
        """Write the train row of the steps of ``interval`` (the learning rate of ``last_stage`` is its ``lr``)."""
        s, opts = self.state, self.optimizers
        row: dict[str, Any] = {"split": "train", "step": s.step, "epoch": s.last_epoch}
        row.update(interval.means())  # host sync: .item() of the accumulated losses, once per log interval
        for name, opt in opts.optimizers.items():
            row[f"lr_{name}"] = opt.param_groups[0]["lr"]
        row["lr"] = opts.optimizers[last_stage].param_groups[0]["lr"]
        row.update(samples_seen=s.samples_seen, audio_seconds_seen=s.audio_seconds_seen)
        oom = self.rank_oom(take_events=True)  # every rank's, not rank 0's alone
        row.update(oom_recoveries=oom["oom_recoveries"], nonfinite_steps=self.numerics.nonfinite_steps)
        if oom["oom_skipped"]:
            row["oom_skipped"] = len(oom["oom_skipped"])
        row["precision"] = opts.precision.name
        if oom["bucket_caps"]:
            row["bucket_max_items"] = oom["bucket_caps"]
        compile_watch = self.compile
        stats = compile_watch.accel.compile_stats()
        self.resources.add_to(row, stats)
        if stats is not None or compile_watch.events:
            row["compile_warmup_seconds"] = round(compile_watch.warmup_seconds, 3)
            row["compile_steps"] = compile_watch.steps
            record = compile_watch.accel.record("compile")
            if record is not None and stats is not None:
                record.info.update(warmup_seconds=row["compile_warmup_seconds"], recompiles=stats["recompiles"])
        events = sorted(oom["oom_events"], key=lambda e: e.get("step", 0)) + self.numerics.take_events()
        events += compile_watch.take_events()
        if events:
            row["events"] = events
        self.writer.write(row)
        return row
