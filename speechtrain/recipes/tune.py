"""``speechtrain tune``: the batch-size tuning recipe.

:class:`TuneRecipe` builds what the search of :mod:`speechtrain.memory.tune` runs on: the task
(set up on the training set, as a fresh run does), one training step of a Trainer without its
OOM guard, the batches of the training set's longest utterances per bucket, the memory
estimate; then it writes the tuner's values into a tuned Config.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from speechtrain.config import Config, build_config
from speechtrain.data.batch import Batch
from speechtrain.device import resolve_device
from speechtrain.memory import tune as search
from speechtrain.memory.stats import format_bytes
from speechtrain.memory.tune import TuneReport
from speechtrain.progress import Progress
from speechtrain.recipes.common import build_task, place, set_up
from speechtrain.recipes.data import DataRecipe
from speechtrain.recipes.estimate import EstimateRecipe
from speechtrain.recipes.train import TrainRecipe
from speechtrain.train.distributed import barrier, gather, init_from_env, shutdown, world
from speechtrain.train.task import Task


@dataclass(kw_only=True)
class TunedConfig(TuneReport):
    """A tune report with the tuned Config (write it with :func:`write_tuned_config`)."""

    config: Config

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out.pop("config", None)
        return out


class TuneRecipe:
    """Tune the per-bucket batch sizes of ``cfg``; ``quiet`` leaves the trials out of the log."""

    def __init__(self, cfg: Config, quiet: bool = False) -> None:
        self.cfg = cfg
        # the config as given: the tuned one is this plus the batch sizes, never what building the run resolved
        # (the symbols learned from the corpus would pin them for a run that reads the text another way)
        self.given = cfg.to_dict()
        self.tune, self.data, self.train = cfg.tune, cfg.data, cfg.train
        self.data_recipe = DataRecipe(cfg)
        self.quiet = quiet
        self.progress = Progress("tune")  # a line as each stage and bucket begins (the search takes minutes)

    def run(
        self,
        task: Task | None = None,
        dataset: Any = None,
        step_fn: Callable[[Batch], Any] | None = None,
        with_estimate: bool = True,
    ) -> TunedConfig:
        """Tune; ``task`` defaults to the config's model (set up on ``dataset``; a task you pass must be
        set up already), ``dataset`` to the prepared training set (prepared when missing or stale),
        ``step_fn(batch)`` to one step of a Trainer built without its OOM guard (pass your own to tune
        a training loop of your own).

        Under torchrun rank 0 prepares the feature cache while the others wait; then every rank sets its task
        up at the same point (a set-up may agree across ranks, :class:`~speechtrain.capabilities.SharedSetup`:
        GPT-TTS's codebook); then every rank tunes its own device alone (the trials differ from rank to rank,
        so they cannot be collectives) and the ranks agree on the smallest batch per bucket
        (:func:`speechtrain.memory.tune.merge_ranks`); every rank returns the same result.
        """
        started = init_from_env(resolve_device(self.train.device), self.train.dist_timeout_minutes)
        try:
            rank, size = world()
            own_task = task is None
            if rank != 0:
                barrier()  # rank 0 prepares the feature cache while the others wait
            try:
                if task is None:
                    self.progress.stage(f"building the model ({self.cfg.model.name})")
                    self.data_recipe.resolve_symbols()
                    task = build_task(self.cfg)
                if dataset is None:
                    self.progress.stage("checking the feature cache (prepare when stale)")
                    self.data_recipe.ensure_prepared(require_text=task.needs().text)
                    dataset = self.data_recipe.dataset("train", self.data_recipe.fields(task.needs()))
            finally:
                if rank == 0:
                    barrier()
            if own_task:  # every rank at once: the set-up may agree across ranks (SharedSetup), the search may not
                self.progress.stage("setting the model up on the training set")
                place(task, resolve_device(self.train.device))
                set_up(task, dataset)  # data-dependent parts (codebooks), as a fresh training run does
            report = self._search(task, dataset, own_task, step_fn, with_estimate, size)
            if size > 1:
                report = search.merge_ranks(gather(report, size), self.data, self.train.grad_accum)
        finally:
            shutdown(started)
        raw = copy.deepcopy(self.given)
        for key, value in report.tuned.overrides().items():
            section, name = key.split(".", 1)
            raw[section][name] = value
        fields = {k: getattr(report, k) for k in TuneReport.__dataclass_fields__}
        return TunedConfig(**fields, config=build_config(raw))

    def _search(
        self,
        task: Task,
        dataset: Any,
        own_task: bool,
        step_fn: Callable[[Batch], Any] | None,
        with_estimate: bool,
        size: int,
    ) -> TuneReport:
        """This rank's search, alone (no collective: the trials differ from rank to rank)."""
        device = resolve_device(self.train.device)
        needs = task.needs()
        frames = np.asarray(dataset.frames, dtype=np.int64)
        est = None
        if with_estimate and frames.size:
            # a task of our own is measured fresh, with the accelerations the run applies
            self.progress.stage("estimating the memory of the longest batch")
            estimator = EstimateRecipe(self.cfg)
            est = estimator.run(task=None if own_task else task, longest_frames=int(frames.max()))
        if step_fn is None:
            self.progress.stage("building the trainer")
            trainer = TrainRecipe(self.cfg).build_trainer(task, oom_guard=False, alone=True)
            device = trainer.device

            def step_fn(batch: Batch) -> Any:
                return trainer.train_step([batch])

        params = [p for m in task.modules().values() for p in m.parameters()]
        settings = self.tune
        if size > 1 and self.train.strategy != "fsdp":
            # DDP's reducer keeps its own copy of the gradients (its buckets), which a rank tuning alone
            # does not allocate: keep that much more of the device free
            grads = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
            settings = settings.model_copy(update={"margin_gib": settings.margin_gib + grads / 2**30})
        with _quiet(self.quiet, search.__name__, Progress.__module__):
            return search.tune(
                step_fn,
                frames=frames,
                bounds=self.data_recipe.bucket_bounds(frames) if frames.size else [],
                read=self.data_recipe.batch_reader(dataset, needs),
                device=device,
                settings=settings,
                data=self.data,
                grad_accum=self.train.grad_accum,
                params=params,
                estimate=est,
                memory_fraction=self.train.memory_fraction,
                progress=self.progress,
            )


@contextmanager
def _quiet(quiet: bool, *names: str) -> Iterator[None]:
    """The info lines of the loggers ``names`` (the trials of :mod:`speechtrain.memory.tune`) off while the
    block runs."""
    loggers = [logging.getLogger(name) for name in names]
    before = [logger.level for logger in loggers]
    if quiet:
        for logger in loggers:
            logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for logger, level in zip(loggers, before):
            logger.setLevel(level)


def write_tuned_config(report: TunedConfig, path: str | Path) -> Path:
    """Write the tuned config as YAML, with a header saying how it was tuned."""
    from speechtrain.paths import write_atomic

    header = [
        "# written by `speechtrain tune`: data.bucket_boundaries / data.bucket_batch_sizes (per bucket, shortest",
        f"# first) and train.grad_accum, measured on {report.device} in {report.seconds:.1f} s, objective "
        f"{report.objective},",
        f"# budget {format_bytes(report.budget_bytes)}: {report.budget_source}",
        *(f"# note: {n}" for n in report.notes),
    ]
    return write_atomic(path, "\n".join(header) + "\n" + report.config.to_yaml(), "--out")
