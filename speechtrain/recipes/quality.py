"""The quality scorer of a run (:class:`~speechtrain.quality.score.QualityScorer`): its family's metrics, with the
run's own log-mel, its f0 extractor (NSF) and its speaker encoder (XTTS). What training's evaluations, ``speechtrain
eval`` and the bench's time-to-quality score with."""

from __future__ import annotations

import functools

from speechtrain.capabilities import PitchVocoder, SpeakerEmbedder
from speechtrain.config import DataConfig
from speechtrain.errors import UserError
from speechtrain.quality.catalog import METRICS
from speechtrain.quality.score import QualityScorer
from speechtrain.train.task import Task


def quality_scorer(task: Task, data: DataConfig, items: int) -> QualityScorer | None:
    """The scorer of ``task``'s quality kind at the data's sample rate; None when it has no audio metrics or
    ``items`` (``train.quality_items``) is 0."""
    if not task.quality_kind or not task.produces_audio or items <= 0:
        return None
    from speechtrain.data.features import log_mel_numpy

    mel_fn = functools.partial(log_mel_numpy, settings=data)
    f0_fn = task.f0_from_audio if isinstance(task, PitchVocoder) else None
    embed_fn = task.speaker_embedding if isinstance(task, SpeakerEmbedder) else None
    return QualityScorer(task.quality_kind, int(data.sample_rate), mel_fn, f0_fn, embed_fn)


def require_best_metric(value: str | None) -> None:
    """A UserError before any training when ``train.best_metric`` needs a package that is not installed."""
    spec = METRICS.get((value or "").partition(":")[0])
    if spec is not None and not spec.available():
        raise UserError(f"train.best_metric={value} needs a package that is not installed: {spec.hint()}")
