"""Evaluation: the task's metrics over the eval loader (weighted by ``Task.batch_weight``) and, for
tasks that produce audio, a few samples written to ``run_dir/samples/step_N/<id>.wav`` and TensorBoard."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from speechtrain.config import TrainConfig
from speechtrain.data.batch import Batch
from speechtrain.errors import free_space
from speechtrain.logs import get_logger
from speechtrain.train.metrics import MetricsWriter
from speechtrain.train.rundir import RunDir
from speechtrain.train.task import Task

log = get_logger(__name__)


class Evaluator:
    """Runs ``task.eval_step`` over ``batches`` with the modules in eval mode (``settings``:
    ``train.eval_batches`` caps the batches, ``train.eval_audio_samples`` the audio samples written)."""

    def __init__(
        self,
        task: Task,
        batches: Iterable[Batch],
        settings: TrainConfig,
        run_dir: str | os.PathLike[str] | None = None,
        metrics: MetricsWriter | None = None,
    ) -> None:
        self.task, self.batches = task, batches
        self.max_batches, self.audio_samples = settings.eval_batches, settings.eval_audio_samples
        self.run_dir, self.metrics = RunDir(run_dir) if run_dir else None, metrics

    @torch.no_grad()
    def run(
        self,
        step: int,
        prepare: Callable[[Batch], Batch],
        autocast: Callable[[], contextlib.AbstractContextManager[Any]],
    ) -> dict[str, Any] | None:
        """The task's eval summary at ``step`` (None when there was no batch). ``prepare`` moves a batch
        to the device (eval-mode features); ``autocast`` is the run's precision context."""
        modules = self.task.modules().values()
        for m in modules:
            m.eval()
        outputs: list[tuple[float, dict[str, float]]] = []
        written = 0
        try:
            for i, batch in enumerate(self.batches):
                if self.max_batches is not None and i >= self.max_batches:
                    break
                dev = prepare(batch)
                with autocast():
                    metrics = self.task.eval_step(dev)
                outputs.append((self.task.batch_weight(batch), {k: float(v) for k, v in metrics.items()}))
                want = self.audio_samples - written
                if self.task.produces_audio and want > 0:
                    written += self._write_audio(dev, want, step)
        finally:
            for m in modules:
                m.train()
        return self.task.eval_summary(outputs) if outputs else None

    def _write_audio(self, batch: Batch, n: int, step: int) -> int:
        import soundfile as sf

        wavs = self.task.eval_audio(batch, n)
        folder = self.run_dir.samples(step) if self.run_dir else None
        for item_id, wav in zip(batch.ids, wavs):
            wav = np.asarray(wav, dtype=np.float32).reshape(-1)
            if folder is not None:
                path = folder / f"{item_id}.wav"  # ids of folder datasets hold '/': their sub-folders are made
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    sf.write(path, np.clip(wav, -1, 1), batch.sample_rate)
                except (OSError, RuntimeError) as exc:  # a full disk: the samples are given up, not the run
                    why = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
                    log.warning(
                        f"warning: could not write the eval sample {path} ({why.strip()}; {free_space(folder)} free); "
                        f"no more samples at step {step}"
                    )
                    folder = None
            if self.metrics is not None:
                self.metrics.audio(f"eval/{item_id}", wav, step, batch.sample_rate)
        return len(wavs)
