"""The quality scorer of a run (:class:`~speechtrain.quality.score.QualityScorer`): its family's metrics, with the
run's own log-mel, its f0 extractor (NSF) and its speaker encoder (XTTS). What training's evaluations, ``speechtrain
eval`` and the bench's time-to-quality score with."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from speechtrain.capabilities import PitchVocoder, SpeakerEmbedder
from speechtrain.config import DataConfig
from speechtrain.errors import UserError
from speechtrain.quality.asr import Transcriber
from speechtrain.quality.catalog import ASR_KINDS, METRICS
from speechtrain.quality.score import QualityScorer
from speechtrain.train.task import Task


def quality_scorer(
    task: Task,
    data: DataConfig,
    items: int,
    asr: AsrSettings | None = None,
) -> QualityScorer | None:
    """The scorer of ``task``'s quality kind at the data's sample rate; None when it has no audio metrics or
    ``items`` (``train.quality_items``) is 0. ``asr``: the user's ASR model (TTS: adds ``cer``), its folder checked
    here and, with ``asr.load``, the model loaded here, so that a bad folder stops the job before any training."""
    if not task.quality_kind or not task.produces_audio or items <= 0:
        return None
    from speechtrain.data.features import log_mel_numpy

    mel_fn = functools.partial(log_mel_numpy, settings=data)
    f0_fn = task.f0_from_audio if isinstance(task, PitchVocoder) else None
    embed_fn = task.speaker_embedding if isinstance(task, SpeakerEmbedder) else None
    transcribe = asr_transcriber(task.quality_kind, asr) if asr is not None and asr.folder else None
    numbers = functools.partial(spoken_text, language=data.language) if transcribe is not None else None
    return QualityScorer(
        task.quality_kind, int(data.sample_rate), mel_fn, f0_fn, embed_fn, transcribe, data.language, numbers
    )


def spoken_text(text: str, language: str) -> str:
    """``text`` with its numbers and symbols written out in ``language`` (what ``cer`` compares: an ASR model
    writes "1st" where the reference says "first", or the other way round); as is without the libraries."""
    from speechtrain.data.text.spoken import spoken

    return spoken(text, language, keep=frozenset())[0]


@dataclass(frozen=True)
class AsrSettings:
    """The user's ASR model for ``cer``: its ``folder`` (``train.quality_asr``, ``speechtrain eval --asr``), Whisper's
    ``language``, the ``device`` it runs on, whether to ``load`` it at once (the process that evaluates) and the
    name the user gave it by (in the errors)."""

    folder: str | None
    language: str | None = None
    device: str = "cpu"
    load: bool = True
    key: str = "train.quality_asr"


def asr_transcriber(kind: str, asr: AsrSettings) -> Transcriber:
    """The :class:`~speechtrain.quality.asr.Transcriber` of ``asr`` for a model of quality ``kind``: a UserError
    when the kind makes no speech from text, or the folder is not an ASR model's (loaded at once when transformers
    is installed and ``asr.load``; without transformers ``cer`` is named with its install hint in each report)."""
    if kind not in ASR_KINDS:
        raise UserError(
            f"{asr.key}: the ASR character error rate scores speech synthesised from text (TTS), and this model is "
            f"a {kind} model: leave it unset"
        )
    transcriber = Transcriber(str(asr.folder), asr.language, asr.device, asr.key)
    if asr.load and METRICS["cer"].available():
        transcriber.load()
    return transcriber


def require_best_metric(value: str | None) -> None:
    """A UserError before any training when ``train.best_metric`` needs a package that is not installed."""
    spec = METRICS.get((value or "").partition(":")[0])
    if spec is not None and not spec.available():
        raise UserError(f"train.best_metric={value} needs a package that is not installed: {spec.hint()}")
