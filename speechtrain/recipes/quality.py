"""The quality scorer of a run (:class:`~speechtrain.quality.score.QualityScorer`): its family's metrics, with the
run's own log-mel, its f0 extractor (NSF) and its speaker encoder (XTTS). What training's evaluations, ``speechtrain
eval`` and the bench's time-to-quality score with."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from speechtrain.capabilities import PitchVocoder, SpeakerEmbedder
from speechtrain.config import DataConfig
from speechtrain.errors import UserError
from speechtrain.logs import get_logger
from speechtrain.quality.asr import Transcriber
from speechtrain.quality.catalog import ASR_KINDS, METRICS
from speechtrain.quality.judge import JUDGE, Judge
from speechtrain.quality.pocketsphinx_asr import POCKETSPHINX, PocketsphinxTranscriber
from speechtrain.quality.score import QualityScorer, TranscribeFn
from speechtrain.train.task import Task

log = get_logger(__name__)


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
    transcribe = transcriber_of(task.quality_kind, data, asr)
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
    """The ASR model for ``cer``: ``judge`` (the corpus's intelligibility judge) or the ``folder`` of the user's
    (``train.quality_asr``, ``speechtrain eval --asr``), Whisper's
    ``language``, the ``device`` it runs on, whether to ``load`` it at once (the process that evaluates) and the
    name the user gave it by (in the errors)."""

    folder: str | None
    language: str | None = None
    device: str = "cpu"
    load: bool = True
    key: str = "train.quality_asr"


def transcriber_of(kind: str, data: DataConfig, asr: AsrSettings | None) -> TranscribeFn | None:
    """The ASR of ``asr`` for ``cer``: the corpus's judge (``judge``), pocketsphinx (``pocketsphinx``), the user's
    model folder, or None (no cer)."""
    if asr is None or not asr.folder:
        return None
    if asr.folder == JUDGE:
        return corpus_asr_judge(kind, data, asr)
    if asr.folder == POCKETSPHINX:
        _refuse_kind(kind, asr.key)
        return PocketsphinxTranscriber(asr.key)
    return asr_transcriber(kind, asr)


def _refuse_kind(kind: str, key: str) -> None:
    """A UserError when a model of quality ``kind`` makes no speech from text (nothing for an ASR to read)."""
    if kind not in ASR_KINDS:
        raise UserError(
            f"{key}: the ASR character error rate scores speech synthesised from text (TTS), and this model is "
            f"a {kind} model: leave it unset"
        )


def corpus_asr_judge(kind: str, data: DataConfig, asr: AsrSettings) -> Judge:
    """The intelligibility judge of the run's corpus (``train.quality_asr: judge``, ``--asr judge``): cached by the
    corpus's content, else trained on its recordings now; refused (a UserError) when its ceiling is above its
    bound."""
    from speechtrain.recipes.judge import corpus_judge

    _refuse_kind(kind, asr.key)
    if asr.language:
        log.warning(f"{asr.key}_language={asr.language} is not used: the judge reads the corpus's own language")
    if not data.manifest:
        raise UserError(f"{asr.key}=judge trains on the corpus's recordings: set data.manifest")
    held = 0 if data.eval_manifest else data.eval_utterances  # an eval manifest's items are not in data.manifest
    return corpus_judge(data.manifest, data.format, language=data.language, eval_utterances=held)


def asr_transcriber(kind: str, asr: AsrSettings) -> Transcriber:
    """The :class:`~speechtrain.quality.asr.Transcriber` of ``asr`` for a model of quality ``kind``: a UserError
    when the kind makes no speech from text, or the folder is not an ASR model's (loaded at once when transformers
    is installed and ``asr.load``; without transformers ``cer`` is named with its install hint in each report)."""
    _refuse_kind(kind, asr.key)
    transcriber = Transcriber(str(asr.folder), asr.language, asr.device, asr.key)
    if asr.load and METRICS["cer"].available():
        transcriber.load()
    return transcriber


def require_best_metric(value: str | None) -> None:
    """A UserError before any training when ``train.best_metric`` needs a package that is not installed."""
    spec = METRICS.get((value or "").partition(":")[0])
    if spec is not None and not spec.available():
        raise UserError(f"train.best_metric={value} needs a package that is not installed: {spec.hint()}")
