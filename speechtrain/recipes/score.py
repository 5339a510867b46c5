"""``speechtrain score``: a folder (or list) of generated audio scored against its reference recordings (and their
texts) with the scorer training uses (:class:`~speechtrain.quality.score.QualityScorer`), every metric beside its
ceiling: the same metric on the recordings themselves (for an intrusive metric, a recording against itself; for
DNSMOS and CER, the recordings' own score). The peers' bench and the time-to-quality runs call
:func:`score_audio` for both sides, so that two systems are read on one measure.
"""

from __future__ import annotations

import functools
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from speechtrain.config import DataConfig
from speechtrain.data.audio import AudioProblem, load_audio, probe_audio
from speechtrain.data.features import log_mel_numpy
from speechtrain.data.manifest import read_manifest
from speechtrain.errors import DataError, UserError
from speechtrain.quality.catalog import KINDS, METRICS
from speechtrain.quality.score import QualityItem, QualityReport, QualityScorer
from speechtrain.recipes.quality import AsrSettings, spoken_text, transcriber_of

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3")


@dataclass
class ScoreRow:
    """One metric: the generated audio's mean (``model``) beside the recordings' own (``recordings``, the
    ceiling), its unit and which way is better."""

    metric: str
    model: float | None
    recordings: float | None
    unit: str
    better: str


@dataclass
class ScoreResult:
    """What ``speechtrain score`` reports: the folders, the quality kind, the items scored, the reference ids with
    no generated file (not scored, listed), the rows, the items without a value per metric and the metrics left
    out for a missing package (their install hints)."""

    generated: str
    references: str
    kind: str
    rate: int
    items: int
    missing_files: list[str] = field(default_factory=list)
    rows: list[ScoreRow] = field(default_factory=list)
    failed: dict[str, int] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def table(self) -> str:
        """Metric, model, recordings (the ceiling), unit, which way is better."""
        lines = [f"{self.generated} against {self.references} ({self.kind}, {self.items} items at {self.rate} Hz)"]
        lines.append(f"{'metric':<14} {'model':>10} {'recordings':>11}  {'unit':<8} better")
        show = lambda v: f"{v:>10.4f}" if v is not None else f"{'-':>10}"  # noqa: E731
        for r in self.rows:
            lines.append(f"{r.metric:<14} {show(r.model)}  {show(r.recordings)}  {r.unit:<8} {r.better}")
        if self.missing_files:
            lines.append(
                f"no generated file for {len(self.missing_files)} references: {', '.join(self.missing_files[:5])}"
            )
        for name, count in self.failed.items():
            lines.append(f"{name}: {count} items gave no value")
        for hint in self.missing:
            lines.append(f"not scored, package missing: {hint}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Reference:
    """One reference recording: its id, audio file and text ('' when the references carry none)."""

    item_id: str
    audio_path: str
    text: str = ""


def score_audio(
    generated: str | os.PathLike[str],
    references: str | os.PathLike[str],
    kind: str = "tts",
    asr: str | None = None,
    asr_language: str | None = None,
    fmt: str = "auto",
    language: str = "und",
) -> ScoreResult:
    """Scores ``generated`` (a folder of ``<id>.wav``, or a list file: one ``path`` or ``id|path`` a line) against
    ``references`` (a corpus in any layout, whose ids and texts are used, or a plain folder of recordings) with the
    metrics of quality ``kind``; ``asr``: ``judge`` (trained on the references' corpus) or an ASR model folder for
    ``cer`` (TTS kinds), which folds case and reads numbers by ``language`` (data.language) on both texts.
    Generated audio at another rate is resampled to the references' rate."""
    if kind not in KINDS or kind == "classifier":
        raise UserError(f"--kind {kind}: one of {', '.join(k for k in KINDS if k != 'classifier')}")
    refs = _references(Path(references), fmt)
    rate = probe_audio(refs[0].audio_path).sample_rate
    files = _generated(Path(generated))
    if not files.keys() & ({r.item_id for r in refs} | {Path(r.audio_path).stem for r in refs}):
        raise UserError(f"{generated}: no generated file matches a reference id of {references} (name them <id>.wav)")
    data = DataConfig(manifest=str(references), format=fmt).model_copy(update={"sample_rate": rate})
    data = data.model_copy(update={"text": data.text.model_copy(update={"language": language})})
    transcribe = _asr(kind, data, asr, asr_language)
    numbers = functools.partial(spoken_text, language=language) if transcribe is not None else None
    mel_fn = functools.partial(log_mel_numpy, settings=data)
    scorer = QualityScorer(kind, rate, mel_fn, transcribe=transcribe, language=language, text_numbers=numbers)
    items, ceiling_items, absent = [], [], []
    for ref in refs:
        path = files.get(ref.item_id) or files.get(Path(ref.audio_path).stem)
        if path is None:  # listed in missing_files (and the table), not scored: no value to average
            absent.append(ref.item_id)
            continue
        recording = _read(ref.audio_path, rate)
        items.append(QualityItem(ref.item_id, _read(str(path), rate), reference=recording, text=ref.text or None))
        ceiling_items.append(QualityItem(ref.item_id, recording, reference=recording, text=ref.text or None))
    model, ceiling = scorer.score(items), scorer.score(ceiling_items)
    result = ScoreResult(str(generated), str(references), kind, rate, len(items), absent, _rows(model, ceiling))
    result.failed, result.missing = dict(model.failed), list(model.missing)
    return result


def _rows(model: QualityReport, ceiling: QualityReport) -> list[ScoreRow]:
    """One row per metric in the kind's order; cer's ceiling is ``cer_recordings`` (the ASR on the recordings)."""
    rows = []
    for name, value in model.scores.items():
        if name == "cer_recordings":
            continue
        spec = METRICS[name]
        own = model.scores.get("cer_recordings") if name == "cer" else ceiling.scores.get(name)
        rows.append(ScoreRow(name, value, own, spec.unit, "higher" if spec.mode == "max" else "lower"))
    return rows


def _asr(kind: str, data: DataConfig, asr: str | None, language: str | None) -> Any:
    """The transcriber of ``--asr`` (None: no cer)."""
    if asr is None or asr == "none":
        return None
    return transcriber_of(kind, data, AsrSettings(asr, language, "cpu", key="--asr"))


def _references(path: Path, fmt: str) -> list[Reference]:
    """The references: a corpus's entries (ids, texts), else the audio files of a plain folder (no texts)."""
    try:
        entries, _problems = read_manifest(path, fmt)
        refs = [Reference(e.id, e.audio_path, e.text) for e in entries]
    except DataError:
        if not path.is_dir():
            raise
        refs = [Reference(p.stem, str(p)) for p in sorted(path.iterdir()) if p.suffix.lower() in AUDIO_SUFFIXES]
    if not refs:
        raise UserError(f"--references {path}: no recordings found (give a corpus folder or a folder of .wav files)")
    return refs


def _generated(path: Path) -> dict[str, Path]:
    """id -> generated file: a folder's audio files by stem, or a list file's lines (``path`` or ``id|path``;
    a relative path is taken from the list's folder)."""
    if path.is_dir():
        return {p.stem: p for p in sorted(path.iterdir()) if p.suffix.lower() in AUDIO_SUFFIXES}
    if not path.is_file():
        raise UserError(f"{path}: no such folder or list file (give a folder of <id>.wav, or a list of paths)")
    out = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        item_id, _, file = line.rpartition("|") if "|" in line else ("", "", line)
        audio = (path.parent / file.strip()).resolve()
        if not audio.is_file():
            raise UserError(f"{path}:{n}: {file.strip()} not found")
        out[item_id.strip() or audio.stem] = audio
    return out


def _read(path: str, rate: int) -> np.ndarray:
    """Mono float32 at ``rate``; an unreadable file as no audio (its item gives no value, counted)."""
    try:
        return load_audio(path, rate)[0]
    except AudioProblem:
        return np.zeros(0, dtype=np.float32)
