"""The Task: the only thing a model author writes.

A Task owns the model's modules and says how a batch becomes losses. The Trainer does the rest
(accumulation, clipping, schedules, precision, OOM splitting, checkpoints, logging). For a GAN a
Task names several optimizer *stages*; the Trainer runs them in order for every optimizer step:
all micro-batches of stage 1 (e.g. the discriminator on the detached generator output), its
optimizer step, then all micro-batches of stage 2 (the generator), its optimizer step.

``training_step(batch, stage, cache)`` may keep tensors in ``cache`` (one dict per micro-batch,
shared by its stages, e.g. the generator output) but must also work with an empty cache: after an
OOM split the Trainer calls it on halves with fresh caches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from speechtrain.data.batch import Batch


@dataclass
class OptimizerSpec:
    """One optimizer stage: a name and the task modules whose parameters it updates."""

    name: str
    modules: list[str]
    lr_multiplier: float = 1.0
    grad_clip: float | None = field(default=None)  # None: optim.grad_clip
    #: parameters that take no weight decay, named ``module.parameter`` as ``modules()[module]`` names them
    #: (XTTS: Coqui's biases, norms and embeddings); the rest take ``optim.weight_decay``
    no_weight_decay: frozenset[str] = field(default_factory=frozenset)


@dataclass
class Needs:
    """What a task needs from the data pipeline."""

    text: bool = False
    audio: bool = False
    mel: bool = True
    labels: bool = False
    speakers: bool = False
    f0: bool = False  # f0 per mel frame (B, T_frames), cached by prepare with data.f0_method
    #: derived features (speechtrain.data.derived) the task reads when the feature cache has them, e.g.
    #: XTTS's ("codes",); the task must compute them itself when a batch lacks them
    derived: tuple[str, ...] = ()


class Task:
    """Base class for tasks. Subclass it, or write a class with the same methods."""

    #: metrics.jsonl key that says whether the model learns; ``headline_mode`` says which way is better
    headline_metric: str = "loss"
    headline_mode: str = "min"
    #: the task writes audio at evaluation (``eval_audio``)
    produces_audio: bool = False
    #: which quality metrics its evaluations get (a kind of :data:`speechtrain.quality.catalog.KINDS`: vocoder,
    #: pitch_vocoder, tts, speaker_tts, classifier; "" none); a family declares the same in its registry entry
    quality_kind: str = ""
    #: some parameters of a stage get no gradient in some steps (a branch skipped): under DDP they must be looked
    #: for after every forward (``train.ddp_find_unused_parameters=auto`` asks this)
    ddp_find_unused_parameters: bool = False

    def needs(self) -> Needs:
        """What the data pipeline must provide."""
        return Needs()

    def modules(self) -> dict[str, nn.Module]:
        """All trainable modules by name (saved in checkpoints, moved to the device)."""
        raise NotImplementedError

    def setup(self, train_dataset: Any) -> None:
        """Called once before the first step of a fresh run (not on resume) with the training
        SpeechDataset: fit data-dependent parts here (codebooks, normalisation), stored in modules
        so that checkpoints carry them."""

    def optimizer_specs(self) -> list[OptimizerSpec]:
        """Optimizer stages in the order they run. Default: one optimizer over every module."""
        return [OptimizerSpec("main", list(self.modules()))]

    def batch_weight(self, batch: Batch) -> float:
        """Weight of a micro-batch in the step's average (items by default; frames for per-frame means).

        The Trainer scales each micro-batch's loss by weight / total weight of the step, so that
        accumulated or OOM-split micro-batches give the gradient of one large batch.
        """
        return float(batch.size)

    def training_step(self, batch: Batch, stage: str, cache: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Losses of ``stage`` for one micro-batch: ``{"loss": scalar to backprop, **components}``."""
        raise NotImplementedError

    @torch.no_grad()
    def eval_step(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Evaluation metrics of one batch (means over the batch); must include ``loss``."""
        return {k: v.detach() for k, v in self.training_step(batch, self.optimizer_specs()[-1].name, {}).items()}

    def eval_summary(self, outputs: list[tuple[float, dict[str, float]]]) -> dict[str, Any]:
        """Combine per-batch ``(weight, metrics)`` into the eval report. Default: weighted means."""
        total = sum(w for w, _ in outputs) or 1.0
        keys = outputs[0][1].keys() if outputs else []
        return {k: sum(w * m[k] for w, m in outputs) / total for k in keys}

    @torch.no_grad()
    def eval_audio(self, batch: Batch, max_items: int) -> list[Any]:
        """Audio produced for up to ``max_items`` items of an eval batch (1-D numpy arrays)."""
        return []

    @torch.no_grad()
    def quality_audio(self, batch: Batch, max_items: int) -> list[Any]:
        """The audio of up to ``max_items`` of the batch's own items (1-D numpy at ``batch.sample_rate``, in item
        order), scored against their recordings by the quality metrics. Default: :meth:`eval_audio` (a task
        whose samples are of other texts, VITS's ``model.eval_texts``, generates the batch's own here)."""
        return self.eval_audio(batch, max_items)

    @property
    def samples_are_quality_audio(self) -> bool:
        """Whether :meth:`eval_audio` makes the same audio as :meth:`quality_audio` (the evaluation then writes
        the audio it scored as its samples instead of generating twice)."""
        return type(self).quality_audio is Task.quality_audio

    def flop_count_inputs(self) -> None:  # pragma: no cover - optional hook for benchmarks
        return None
