"""Evaluation: the task's metrics over the eval loader (weighted by ``Task.batch_weight``) and, for
tasks that produce audio, a few samples written to ``run_dir/samples/step_N/<id>.wav`` and TensorBoard, and the
quality metrics of the first ``train.quality_items`` eval items (:mod:`speechtrain.quality`: the same items in
the same order at every evaluation, their audio generated with fixed seeds) against their recordings."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from speechtrain.config import TrainConfig
from speechtrain.data.batch import Batch
from speechtrain.errors import free_space
from speechtrain.logs import get_logger
from speechtrain.quality.score import QualityItem, QualityScorer
from speechtrain.train.metrics import MetricsWriter
from speechtrain.train.rundir import RunDir
from speechtrain.train.task import Task

log = get_logger(__name__)


@dataclass
class _Scored:
    """The quality items of one batch, and the audio made for them that serves as the eval samples."""

    items: list[QualityItem]
    samples: list[Any] | None


class Evaluator:
    """Runs ``task.eval_step`` over ``batches`` with the modules in eval mode (``settings``:
    ``train.eval_batches`` caps the batches, ``train.eval_audio_samples`` the audio samples written,
    ``train.quality_items`` the items ``quality`` scores; ``quality`` None: no quality metrics). ``generate``: what
    makes the scored audio of a batch's first items (default ``task.quality_audio``; ``speechtrain eval --runtime
    onnx`` passes the exported graph's)."""

    def __init__(
        self,
        task: Task,
        batches: Iterable[Batch],
        settings: TrainConfig,
        run_dir: str | os.PathLike[str] | None = None,
        metrics: MetricsWriter | None = None,
        quality: QualityScorer | None = None,
        generate: Callable[[Batch, int], list[Any]] | None = None,
    ) -> None:
        self.task, self.batches = task, batches
        self.max_batches, self.audio_samples = settings.eval_batches, settings.eval_audio_samples
        self.run_dir, self.metrics = RunDir(run_dir) if run_dir else None, metrics
        self.quality = quality if task.produces_audio else None
        self.quality_items = settings.quality_items if self.quality is not None else 0
        self.generate = generate or task.quality_audio
        self.quality_seconds = 0.0  # every evaluation's synthesis and scoring for the metrics, summed
        self._generated = 0.0  # this evaluation's synthesis for the metrics (seconds)

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
        items: list[QualityItem] = []
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
                scored = self._quality_items(dev, self.quality_items - len(items), want if want > 0 else 0)
                items += scored.items
                if self.task.produces_audio and want > 0:
                    written += self._write_audio(dev, want, step, scored.samples)
        finally:
            for m in modules:
                m.train()
        if not outputs:
            return None
        summary = self.task.eval_summary(outputs)
        if self.quality is not None and items:
            report = self.quality.score(items)
            self.quality_seconds += report.seconds
            summary.update(report.row())
            summary["quality_seconds"] = round(self._generated + report.seconds, 4)  # synthesis + scoring
        self._generated = 0.0
        return summary

    def _quality_items(self, batch: Batch, n: int, samples: int) -> _Scored:
        """Up to ``n`` quality items of ``batch``: the task's audio of its first items and their references (the
        recording; its log-mel when the batch carries no audio). The audio doubles as the eval samples when the
        task generates its samples the same way (``samples`` of them)."""
        if self.quality is None or n <= 0:
            return _Scored([], None)
        same = self.task.samples_are_quality_audio and self.generate == self.task.quality_audio
        t0 = time.perf_counter()
        wavs = self.generate(batch, max(n, samples) if same else n)
        spent = time.perf_counter() - t0  # the samples' share of it would be spent without the metrics too
        spent *= n / max(n, samples) if same else 1.0
        self._generated += spent
        self.quality_seconds += spent
        items = []
        for i, wav in enumerate(wavs[:n]):
            reference = reference_mel = None
            if "audio" in batch:
                length = batch.host_lengths.get("audio_lengths", [batch["audio"].shape[-1]] * batch.size)[i]
                reference = batch["audio"][i].reshape(-1)[:length].float().cpu().numpy()  # host copy, eval only
            elif "mel" in batch:
                reference_mel = batch["mel"][i, :, : batch.frame_lengths[i]].float().cpu().numpy()  # host copy
            text = batch.texts[i] if i < len(batch.texts) else None  # the sentence spoken (TTS), for the ASR's CER
            wav = np.asarray(wav, dtype=np.float32)
            items.append(QualityItem(str(batch.ids[i]), wav, reference, reference_mel, text))
        return _Scored(items, wavs[:samples] if same and samples else None)

    def _write_audio(self, batch: Batch, n: int, step: int, made: list[Any] | None = None) -> int:
        import soundfile as sf

        wavs = made if made is not None else self.task.eval_audio(batch, n)
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
