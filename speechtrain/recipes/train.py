"""``speechtrain train``: the training recipe (a fresh run or a resumed one).

:class:`TrainRecipe` reads the Config once and builds, in order: the seed, the task, the data
(prepared when the cache is missing or stale) and its loaders, the run directory with its
``config.yaml``, the task's data-dependent setup, the process-wide settings (accelerations,
memory fraction) and the :class:`~speechtrain.train.trainer.Trainer` (its parts built by
:func:`~speechtrain.recipes.loop.build_parts`), which it then runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speechtrain.accel.apply import AccelPlan, LoaderShapes, apply_accelerations
from speechtrain.accel.record import AccelRecord
from speechtrain.config import Config, save_config
from speechtrain.data.dataset import SpeechDataset
from speechtrain.data.loader import TrainBatches, TrainLoader
from speechtrain.device import resolve_device
from speechtrain.errors import CheckpointError, UserError
from speechtrain.logs import get_logger
from speechtrain.memory.stats import set_memory_fraction
from speechtrain.models.importing import ImportReport, import_for_init
from speechtrain.recipes.common import build_task, load_run_config, place, rank_seed, seed_everything, set_up
from speechtrain.recipes.data import DataRecipe
from speechtrain.recipes.loop import build_trainer
from speechtrain.recipes.quality import AsrSettings, quality_scorer, require_best_metric
from speechtrain.train import checkpoint as ckpt
from speechtrain.train.distributed import any_rank, barrier, init_from_env, shutdown, world
from speechtrain.train.rundir import RunDir, RunLock
from speechtrain.train.schedule import lr_scale
from speechtrain.train.task import Task
from speechtrain.train.trainer import Trainer

log = get_logger(__name__)


@dataclass
class TrainData:
    """The training set and the loaders of a run (``eval_loader`` None without an eval set)."""

    train_set: Any
    train_loader: TrainBatches
    eval_loader: Any
    eval_set: Any = None

    def release(self) -> None:
        """Give back the feature cache's reader leases now, at a point of the run's own choosing, not whenever
        the datasets are collected (a finaliser is where a late signal's KeyboardInterrupt would land)."""
        for ds in (self.train_set, self.eval_set):
            if isinstance(ds, SpeechDataset):
                ds.release()


class TrainRecipe:
    """Train ``cfg``'s model on its data; ``resume``: continue the run in that directory (an error when no
    checkpoint there loads, unless ``start_over``). With ``train.auto_resume`` a run whose ``output_dir`` holds a
    loadable checkpoint continues from it, and one without starts (what a restarted job runs: the same command).
    """

    def __init__(self, cfg: Config, resume: str | Path | None = None, start_over: bool = False) -> None:
        self.cfg = cfg
        self.start_over = start_over  # resuming and no checkpoint loads: train from step 0 instead of failing
        self.run_dir = RunDir(resume if resume else cfg.train.output_dir)  # resolved once
        self.resuming = resume is not None
        if self.resuming:
            cfg.train.output_dir = str(resume)  # the saved config names the run's own folder
        self.train, self.optim, self.accel, self.data = cfg.train, cfg.optim, cfg.accel, cfg.data
        self.data_recipe = DataRecipe(cfg)
        self.memory_record: AccelRecord | None = None
        self.lr_note = ""
        self.start_note = "a fresh run from step 0"

    @classmethod
    def from_run(cls, run_dir: str | Path, overrides: list[str] | None = None, start_over: bool = False) -> TrainRecipe:
        """Resume the run in ``run_dir`` with its own ``config.yaml`` (plus ``key=value`` overrides)."""
        return cls(load_run_config(run_dir, overrides), resume=run_dir, start_over=start_over)

    # ------------------------------------------------------------------ the pieces
    def build_task(self) -> Task:
        """The seeded, freshly initialised task (model initialisation is part of the run), with the
        run's text symbols resolved first (learned from the prepared corpus unless pinned)."""
        self.data_recipe.resolve_symbols()
        seed_everything(self.train.seed)
        return build_task(self.cfg)

    def build_data(self, task: Task) -> TrainData:
        """Prepare when needed, open the datasets, build the loaders."""
        needs = task.needs()
        train_set, eval_set = self.data_recipe.train_and_eval(needs)
        eval_loader = self.data_recipe.eval_loader(eval_set, needs) if eval_set is not None else None
        return TrainData(train_set, self.data_recipe.train_loader(train_set, needs), eval_loader, eval_set)

    def build_trainer(
        self,
        task: Task,
        train_loader: TrainBatches | None = None,
        eval_loader: Any = None,
        run_dir: str | Path | RunDir | None = None,
        oom_guard: bool = True,
        alone: bool = False,
    ) -> Trainer:
        """Apply the process-wide settings (seed, accelerations, memory fraction) and build the Trainer
        (``alone``: this rank by itself under a process group, see :class:`Trainer`)."""
        t, d = self.train, self.data
        require_best_metric(t.best_metric)
        seed_everything(rank_seed(t.seed, world()[0]))  # each rank its own streams (dropout, noise, augmentation)
        device = resolve_device(t.device)
        place(task, device)
        shapes = loader_shapes(train_loader, d.pad_multiple, d.crop_frames) if train_loader is not None else None
        accel = apply_accelerations(self.accel, task.modules(), device, self.cfg.model.avoid_bf16, shapes)
        self.memory_record = set_memory_fraction(t.memory_fraction, device)
        features = self.data_recipe.device_features(task.needs())
        mean_batch = train_loader.mean_batch_size if train_loader is not None else float(d.batch_size)
        lr_multiplier, self.lr_note = lr_scale(self.optim, mean_batch * t.grad_accum * world()[1])
        return build_trainer(
            task,
            train=t,
            optim=self.optim,
            device=device,
            accel=accel,
            train_loader=train_loader,
            eval_loader=eval_loader,
            run_dir=run_dir,
            oom_guard=oom_guard,
            batch_transform=features.to(device) if features is not None else None,
            lr_multiplier=lr_multiplier,
            recompile_limit=4 * (train_loader.num_buckets if isinstance(train_loader, TrainLoader) else 1),
            run_config=self.cfg.to_dict(),
            alone=alone,
            quality=quality_scorer(task, d, t.quality_items, self._asr(device)),
        )

    def _asr(self, device: Any) -> AsrSettings | None:
        """``train.quality_asr``'s model on the run's device, loaded at once by rank 0 (the one that evaluates;
        under FSDP every rank evaluates, and the others load it at their first evaluation)."""
        t = self.train
        if not t.quality_asr:
            return None
        return AsrSettings(t.quality_asr, t.quality_asr_language, str(device), load=world()[0] == 0)

    # ------------------------------------------------------------------ the run
    def run(self) -> tuple[Path, dict[str, Any]]:
        """Train as ``speechtrain train`` does; the run directory and the fit summary.

        Rank 0 holds the run directory's lock for the whole run (a second writer gets a clear error) and
        alone writes the run files; ``config.yaml`` is written only once the resume checks passed.

        Under ``torchrun`` every worker runs this: the process group starts from the environment (and
        ends with the run when this call started it), the run directory is shared, rank 0 prepares the
        data cache while the others wait, and rank 0 alone writes the config, metrics and checkpoints.
        """
        device = resolve_device(self.train.device)
        started = init_from_env(device, self.train.dist_timeout_minutes)
        try:
            rank, size = world()
            lock: RunLock | None = None
            error: UserError | None = None
            if rank == 0:
                try:
                    lock = self.run_dir.lock().acquire()
                except UserError as exc:
                    error = exc
            if any_rank(error is not None, device, size):  # the other ranks must not wait for rank 0
                raise error or UserError(f"rank {rank}: rank 0 could not take {self.run_dir} (see its message)")
            try:
                return self.run_dir.path, self._run()
            finally:
                if lock is not None:
                    lock.release()
        finally:
            shutdown(started)

    def _run(self) -> dict[str, Any]:
        run_dir = self.run_dir
        rank = world()[0]
        auto = self.train.auto_resume and not self.resuming
        saved = run_dir.steps()
        if not self.resuming and not auto and saved:
            raise UserError(
                f"{run_dir} already holds checkpoints: continue it with `speechtrain train --resume {run_dir}` (or "
                f"run the same command with --auto-resume, train.auto_resume=true), or choose another "
                f"train.output_dir"
            )
        # the checkpoint to continue from, read before anything is built or written
        found = run_dir.latest(quarantine=rank == 0) if self.resuming or (auto and saved) else None
        if found is None and self.resuming and not self.start_over:
            raise CheckpointError(
                f"--resume {run_dir}: no loadable checkpoint in {run_dir.checkpoints} (none was saved, or "
                f"every one is damaged: see the warnings above). Nothing was changed. To train this run again "
                f"from step 0 in the same directory: `speechtrain train --resume {run_dir} --start-over`"
            )
        task = self.build_task()
        if rank != 0:
            barrier()  # rank 0 prepares the feature cache (when missing or stale) while the others wait
        data = self.build_data(task)
        if rank == 0:
            barrier()
        run_dir.mkdir()
        place(task, resolve_device(self.train.device))  # data-dependent setup fits on the training device
        if found is None:
            if saved:
                why = "--start-over" if self.resuming else "train.auto_resume"
                log.warning(f"warning: no loadable checkpoint in {run_dir.checkpoints}: starting from step 0 ({why})")
            set_up(task, data.train_set)
            if self.train.init_from:
                init_weights(task, self.train.init_from, self.train.init_trust_pickle, run_dir)
        trainer = self.build_trainer(task, data.train_loader, data.eval_loader, run_dir)
        if found is not None:
            trainer.resume(found)  # a config that does not load (another model, another optimizer) stops here
            how = "auto-resume" if auto else "--resume"
            self.start_note = f"resumed from step {trainer.step} ({found[0]}, {how})"
        else:
            trainer.metrics.rewind(0)  # rows an earlier start wrote before its first checkpoint: not appended to
        if rank == 0:
            _run_file(run_dir.config, lambda path: save_config(self.cfg, path))
            self.report_start(trainer, data.train_loader, run_dir)
        try:
            return trainer.fit()
        finally:
            data.release()

    def report_start(self, trainer: Trainer, loader: TrainBatches, run_dir: RunDir) -> None:
        """What runs where: logged, and saved as ``accel.json``."""
        log.info(f"run: {run_dir} ({self.start_note})")
        log.info(startup_summary(trainer, trainer.accel, self.memory_record, self.lr_note, loader.notes))
        for line in export_notice(self.cfg):
            log.warning(line)
        dropped = loader.sampler.report if isinstance(loader, TrainLoader) else None
        if dropped is not None and dropped.skipped:  # data.oversize=skip, data.crop_short=skip: said, not silent
            log.warning(
                "warning: the batch planner left out "
                + ", ".join(f"{n} utterance(s) ({why})" for why, n in dropped.skipped.items())
                + ": "
                + "; ".join(line for line in dropped.lines() if "skipped" in line)
            )
        records = {
            "accelerations": trainer.accel.records_dict(),
            "optimizers": {k: r.to_dict() for k, r in trainer.optimizer_records.items()},
            "memory_fraction": self.memory_record.to_dict() if self.memory_record else None,
            "lr_scaling": self.lr_note,
            "start": self.start_note,
            "data_planner": dropped.to_dict() if dropped is not None else None,
            "precision": trainer.precision.name,
            "world_size": trainer.world_size,
            "strategy": trainer.strategy.strategy,
            "strategy_detail": {
                **trainer.strategy.to_dict(),
                "sharded_units": trainer.sharded_units,
                "fsdp_mixed_precision": trainer.fsdp_mixed_precision if trainer.sharded else None,
                "checkpoints": "sharded (step_N.dcp + step_N.pt)" if trainer.sharded else "full (step_N.pt)",
                "ddp": trainer.ddp_options or None,
            },
        }
        if world()[0] == 0:
            text = json.dumps(records, indent=2, default=str) + "\n"
            _run_file(run_dir.accel, lambda path: path.write_text(text))


def export_notice(cfg: Config) -> list[str]:
    """The export formats of the run's family that this run will not be able to make, with why (said at step 0:
    `export --format piper` refused a README VITS run only after its training)."""
    from speechtrain.export.formats import formats_out_of_reach

    return [
        f"warning: export: this run will not be exportable as {line}"
        for line in formats_out_of_reach(str(cfg.model.name), cfg.model, cfg.data)
    ]


def loader_shapes(loader: TrainBatches, pad_multiple: int, crop_frames: int | None) -> LoaderShapes:
    """The distinct (items, padded mel frames) batch shapes of this rank's current epoch plan (what
    torch.compile's ``dynamic`` follows); unknown (None) for a loader without a plan."""
    if not isinstance(loader, TrainLoader):
        return LoaderShapes(None, 1, int(getattr(loader, "num_workers", 0) or 0))
    sampler = loader.sampler
    frames = sampler.frames
    seen: set[tuple[int, int]] = set()
    for key in sampler.current_plan().for_rank(sampler.rank):
        if key.offsets is not None and crop_frames:
            longest = crop_frames
        else:
            longest = int(max(frames[i] for i in key.indices))
            longest = -(-longest // pad_multiple) * pad_multiple
        seen.add((len(key.indices), longest))
    return LoaderShapes(len(seen), loader.num_buckets, loader.num_workers)


def startup_summary(
    trainer: Trainer, accel: AccelPlan, memory_record: AccelRecord | None, lr_note: str, notes: list[str]
) -> str:
    """The lines printed when a run starts."""
    lines = [f"device: {trainer.device}  precision: {trainer.precision.name}  world size: {trainer.world_size}"]
    lines.append(f"strategy: {trainer.strategy.strategy} ({trainer.strategy.reason})")
    if trainer.world_size > 1:
        if trainer.ddp_options:
            lines.append("ddp: " + ", ".join(f"{k}={v}" for k, v in trainer.ddp_options.items()))
        if trainer.sharded:
            lines.append(
                f"fsdp: {len(trainer.sharded_units)} sharded unit(s), mixed precision "
                f"{trainer.fsdp_mixed_precision}, sharded checkpoints (step_N.dcp beside step_N.pt)"
            )
    lines.append(accel.summary())
    lines += [f"optimizer[{name}]: {rec.detail}" for name, rec in trainer.optimizer_records.items()]
    lines.append(f"lr scaling: {lr_note}")
    if memory_record is not None:
        lines.append(f"memory fraction: {memory_record.detail}")
    lines += [f"data: {note}" for note in notes or []]
    return "\n".join(lines)


def init_weights(task: Task, paths: list[str], trust_pickle: bool, run_dir: RunDir) -> ImportReport:
    """``train.init_from``: load the weights of ``paths`` into ``task`` (modules the file lacks keep their
    initialisation); the full tensor-by-tensor report goes to ``run_dir/init_report.txt``."""
    imported = import_for_init(paths, trust_pickle)
    loaded = imported.load_into(task, strict=False)
    kept = [name for name in task.modules() if name not in loaded]
    report = imported.report
    for name in kept:
        report.filled.append((name, "not in the checkpoint: fresh initialisation kept"))
    run_dir.init_report.write_text("\n".join(report.lines()) + "\n", encoding="utf-8")
    log.info(f"init_from: {report.summary()}; loaded {loaded}" + (f", kept fresh {kept}" if kept else ""))
    return report


def _run_file(path: Path, write: Any) -> None:
    """``write(path)``; a failed write (full disk, permissions) is a CheckpointError naming the file and the
    free space instead of a traceback."""
    try:
        write(path)
    except OSError as exc:
        raise ckpt.write_failed(path, exc) from None


def train_from_config(cfg: Config, resume: str | Path | None = None) -> tuple[Path, dict[str, Any]]:
    """``TrainRecipe(cfg, resume).run()``: train as ``speechtrain train`` does."""
    return TrainRecipe(cfg, resume=resume).run()
