"""CNN-LSTM classifier as a Task: cross-entropy on labelled clips, eval accuracy and confusion table.

Noise and SpecAugment masks come from the data pipeline (``data.noise_snr_db``, ``data.time_masks``,
``data.freq_masks``; applied on the device in training only), not from this task.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from speechtrain.config import ConfigError
from speechtrain.data.batch import Batch
from speechtrain.data.features import LogMel
from speechtrain.errors import DataError, UserError
from speechtrain.models.cnn_lstm.model import CNNLSTM
from speechtrain.quality.metrics import classification_scores
from speechtrain.train.task import Needs, Task

if TYPE_CHECKING:
    from speechtrain.config import DataConfig
    from speechtrain.models.cnn_lstm.config import CNNLSTMConfig


class CNNLSTMTask(Task):
    """Audio classification. Headline: eval ``accuracy`` (higher is better)."""

    headline_metric = "accuracy"
    headline_mode = "max"
    quality_kind = "classifier"

    def __init__(self, model_cfg: CNNLSTMConfig, data_cfg: DataConfig) -> None:
        m = model_cfg
        if not m.labels:
            raise ConfigError("model.labels is empty: list the class names or point data.manifest at ROOT/<label>/")
        self.labels = list(m.labels)
        self.label_smoothing = m.label_smoothing
        self.data_cfg = data_cfg
        self.model = CNNLSTM(
            data_cfg.n_mels,
            len(self.labels),
            m.conv_channels,
            m.kernel_size,
            m.pool_time,
            m.lstm_hidden,
            m.lstm_layers,
            m.bidirectional,
            m.pooling,
            m.dropout,
        )
        self._mel_fn: LogMel | None = None

    # --- Task protocol -------------------------------------------------------------------------
    def needs(self) -> Needs:
        return Needs(mel=True, labels=True)

    def modules(self) -> dict[str, nn.Module]:
        return {"model": self.model}

    def setup(self, train_dataset: Any) -> None:
        """A prepared SpeechDataset must name the same classes in the same order as ``model.labels`` (its
        label ids index the head); any other dataset (synthetic ones for estimates and benchmarks) must
        only fit the head."""
        from speechtrain.data.dataset import SpeechDataset

        names = list(getattr(train_dataset, "labels", []) or [])
        if isinstance(train_dataset, SpeechDataset) and names and names != self.labels:
            raise DataError(
                f"the training data's labels {names} differ from model.labels {self.labels}: "
                "remove model.labels from the config to take them from the data, or fix the folders"
            )
        if len(names) > len(self.labels):
            raise DataError(f"the training data has {len(names)} labels but the model {len(self.labels)} classes")

    def _logits(self, batch: Batch) -> torch.Tensor:
        lengths = batch["mel_lengths"]
        return self.model(batch["mel"], lengths, batch.host_lengths.get("mel_lengths"))  # (B, classes)

    def training_step(self, batch: Batch, stage: str, cache: dict[str, Any]) -> dict[str, torch.Tensor]:
        logits = self._logits(batch)
        labels = batch["labels"]  # (B,), -1 = no label
        loss = F.cross_entropy(logits.float(), labels, ignore_index=-1, label_smoothing=self.label_smoothing)
        valid = labels >= 0
        acc = ((logits.argmax(-1) == labels) & valid).sum() / valid.sum().clamp(min=1)
        return {"loss": loss, "accuracy": acc.detach().float()}

    @torch.no_grad()
    def eval_step(self, batch: Batch) -> dict[str, torch.Tensor]:
        logits = self._logits(batch)
        labels = batch["labels"]
        loss = F.cross_entropy(logits.float(), labels, ignore_index=-1)
        pred = logits.argmax(-1).cpu().numpy()  # host-device sync: once per eval batch, for the confusion table
        true = labels.cpu().numpy()
        keep = true >= 0
        n = len(self.labels)
        counts = np.bincount(true[keep] * n + pred[keep], minlength=n * n).reshape(n, n)  # (true, predicted)
        out = {"loss": loss.detach().cpu(), "accuracy": torch.tensor(float(np.trace(counts)) / max(1, counts.sum()))}
        for i in range(n):
            for j in range(n):
                out[f"confusion_{i}_{j}"] = torch.tensor(float(counts[i, j]))
        return out

    def eval_summary(self, outputs: list[tuple[float, dict[str, float]]]) -> dict[str, Any]:
        n = len(self.labels)
        total_w = sum(w for w, _ in outputs) or 1.0
        confusion = [[0] * n for _ in range(n)]  # rows: true label, columns: predicted
        for _, m in outputs:
            for i in range(n):
                for j in range(n):
                    confusion[i][j] += int(round(m.get(f"confusion_{i}_{j}", 0.0)))
        seen = sum(map(sum, confusion))
        correct = sum(confusion[i][i] for i in range(n))
        return {
            "loss": sum(w * m["loss"] for w, m in outputs) / total_w,
            "accuracy": correct / seen if seen else 0.0,
            "macro_f1": classification_scores(confusion)["macro_f1"] if seen else 0.0,
            "items": seen,
            "confusion": confusion,
            "labels": list(self.labels),
        }

    # --- inference -----------------------------------------------------------------------------
    def inference_graph(self) -> nn.Module:
        """``classify``'s maths on a log-mel as a traceable module: mel (B, n_mels, n_frames) -> (logits, probs)
        (:class:`speechtrain.models.cnn_lstm.graph.CNNLSTMGraph`)."""
        from speechtrain.models.cnn_lstm.graph import CNNLSTMGraph

        return CNNLSTMGraph(self.model)

    @torch.no_grad()
    def classify(
        self, audio: np.ndarray | torch.Tensor | str | os.PathLike[str], sample_rate: int | None = None
    ) -> tuple[str, dict[str, float]]:
        """Label and class probabilities of one clip: a path, or mono samples (at ``sample_rate``,
        default the run's ``data.sample_rate``)."""
        d = self.data_cfg
        if isinstance(audio, (str, os.PathLike)):
            from speechtrain.data.audio import AudioProblem, load_audio

            try:
                wav, _ = load_audio(audio, d.sample_rate)
            except (AudioProblem, OSError) as exc:
                raise DataError(f"{audio}: cannot read audio: {exc}") from None
        else:
            wav = np.asarray(audio.detach().cpu() if isinstance(audio, torch.Tensor) else audio, dtype=np.float32)
            if wav.ndim != 1:
                raise UserError(f"classify: expected mono 1-D samples, got shape {wav.shape}")
            if sample_rate is not None and sample_rate != d.sample_rate:
                import soxr

                wav = np.asarray(soxr.resample(wav, sample_rate, d.sample_rate, quality="HQ"), dtype=np.float32)
        if wav.shape[0] < d.hop_length:
            raise DataError(f"{audio if isinstance(audio, (str, Path)) else 'clip'}: shorter than one frame")
        device = next(self.model.parameters()).device
        if self._mel_fn is None:
            self._mel_fn = LogMel.from_config(d)
        self._mel_fn.to(device)
        mel = self._mel_fn(torch.from_numpy(wav).to(device)[None])  # (1, n_mels, T_frames)
        frames = mel.shape[-1]
        was_training = self.model.training
        self.model.eval()
        try:
            logits = self.model(mel, torch.tensor([frames], device=device), [frames])
        finally:
            self.model.train(was_training)
        probs = torch.softmax(logits.float(), -1)[0].cpu().numpy()  # host copy
        best = int(np.argmax(probs))
        return self.labels[best], {name: float(p) for name, p in zip(self.labels, probs)}


def labels_from_manifest(data_cfg: DataConfig) -> list[str]:
    """Sorted label names of a labelled manifest (the ids the dataset will use)."""
    from speechtrain.data.manifest import read_manifest

    if not data_cfg.manifest:
        raise ConfigError("cnn_lstm needs class names: set data.manifest (ROOT/<label>/*.wav) or model.labels")
    entries, _ = read_manifest(data_cfg.manifest, data_cfg.format)
    names = sorted({e.label for e in entries if e.label is not None})
    if len(names) < 2:
        raise DataError(
            f"{data_cfg.manifest}: found {len(names)} label(s) {names}; a classifier needs at least two "
            "(use a folder ROOT/<label>/*.wav or a JSONL manifest with a 'label' field)"
        )
    return names


def build_task(model: CNNLSTMConfig, data: DataConfig) -> CNNLSTMTask:
    """Build the classifier; without ``model.labels`` the names come from ``data.manifest`` and are written
    into ``model.labels`` (the section the run's saved config is made of, so it carries them)."""
    if model.labels is None:
        model.labels = labels_from_manifest(data)
    return CNNLSTMTask(model, data)
