"""Scoring a set of (generated, reference) items with the metrics of a quality kind: what an evaluation, the
bench and ``speechtrain eval`` all call, so that the three report the same figures the same way."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from speechtrain.logs import get_logger
from speechtrain.quality import metrics as qm
from speechtrain.quality.catalog import METRICS, metrics_of, missing_packages

log = get_logger(__name__)

#: audio (1-D, the run's rate) -> natural-log mel (n_mels, T_frames) with the run's data settings
MelFn = Callable[[np.ndarray], np.ndarray]
#: audio (1-D, the run's rate) -> f0 per frame (Hz, 0 = unvoiced), the run's extractor
F0Fn = Callable[[np.ndarray], np.ndarray]
#: audio (1-D) and its rate -> a speaker embedding
EmbedFn = Callable[[np.ndarray, int], np.ndarray]
#: audio (1-D) and its rate -> its transcript by the user's ASR model (:class:`speechtrain.quality.asr.Transcriber`)
TranscribeFn = Callable[[np.ndarray, int], str]


@dataclass
class QualityItem:
    """One eval item: the model's audio and what it is compared with (the recording, or its log-mel when the
    batch carries no audio, as GPT-TTS's; ``text``: the sentence spoken, which an ASR transcript is compared with)."""

    item_id: str
    generated: np.ndarray
    reference: np.ndarray | None = None
    reference_mel: np.ndarray | None = None
    text: str | None = None


@dataclass
class QualityReport:
    """Means over the items of each metric, the items that gave no value (NaN) per metric, the metrics left
    out for a missing package (their install hints) and the seconds scoring took."""

    kind: str
    scores: dict[str, float] = field(default_factory=dict)
    items: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def row(self) -> dict[str, Any]:
        """The fields an eval row gets."""
        out: dict[str, Any] = {**self.scores, "quality_items": self.items, "quality_seconds": round(self.seconds, 4)}
        if self.failed:
            out["quality_failed"] = dict(self.failed)
        if self.missing:
            out["quality_missing"] = list(self.missing)
        return out


class QualityScorer:
    """The metrics of ``kind`` (:data:`speechtrain.quality.catalog.KINDS`) at ``rate``; ``mel_fn`` the run's log-mel,
    ``f0_fn`` its f0 extractor (pitch vocoders), ``embed_fn`` the model's speaker encoder (speaker TTS),
    ``transcribe`` the user's ASR model (TTS: adds ``cer``). The metrics whose package is absent are named once in
    the log with their install hint and in every report."""

    def __init__(
        self,
        kind: str,
        rate: int,
        mel_fn: MelFn,
        f0_fn: F0Fn | None = None,
        embed_fn: EmbedFn | None = None,
        transcribe: TranscribeFn | None = None,
        language: str = "und",
        text_numbers: Callable[[str], str] | None = None,
    ) -> None:
        self.kind, self.rate, self.mel_fn, self.f0_fn, self.embed_fn = kind, int(rate), mel_fn, f0_fn, embed_fn
        self.transcribe = transcribe
        #: how ``cer`` folds case (data.language) and writes numbers (the run's front end), alike on both texts
        self.language, self.text_numbers = language, text_numbers
        wanted = metrics_of(kind, asr=transcribe is not None)
        names = [n for n in wanted if METRICS[n].package is None or METRICS[n].available()]
        if "speaker_sim" in names and embed_fn is None:
            names.remove("speaker_sim")
        if kind == "pitch_vocoder" and f0_fn is None:
            names = [n for n in names if n not in ("f0_rmse_cents", "gpe", "vde")]
        if "cer" in names:  # its ceiling: the same ASR on the recordings themselves, read beside it
            names.append("cer_recordings")
        self.names = tuple(n for n in names if n not in ("accuracy", "macro_f1"))  # a classifier's come from eval
        self._recordings_cer: dict[str, float] = {}  # item id -> the ASR's CER on its recording (transcribed once)
        self.missing = missing_packages(list(wanted))
        if self.missing:
            log.warning(f"quality metrics left out (package not installed): {'; '.join(self.missing)}")

    def score(self, items: list[QualityItem]) -> QualityReport:
        """Each metric's mean over ``items`` (NaN values, e.g. PESQ on silence, are counted in ``failed``)."""
        t0 = time.perf_counter()
        values: dict[str, list[float]] = {n: [] for n in self.names}
        for item in items:
            for name, value in self._item(item).items():
                if name in values:
                    values[name].append(value)
        report = QualityReport(self.kind, items=len(items), missing=list(self.missing))
        for name, vals in values.items():
            finite = [v for v in vals if math.isfinite(v)]
            if len(finite) < len(vals):
                report.failed[name] = len(vals) - len(finite)
            if finite:
                report.scores[name] = float(np.mean(finite))
        report.seconds = time.perf_counter() - t0
        return report

    def _recording_cer(self, item_id: str, ref: np.ndarray, text: str) -> float:
        """The ASR's CER on the recording of ``item_id`` (every evaluation scores the same items: once a run)."""
        if item_id not in self._recordings_cer:
            assert self.transcribe is not None
            said = self.transcribe(ref, self.rate)
            self._recordings_cer[item_id] = qm.cer(text, said, self.language, self.text_numbers)
        return self._recordings_cer[item_id]

    def _item(self, item: QualityItem) -> dict[str, float]:
        """Every metric of one item."""
        want, out = set(self.names), {}
        gen = np.asarray(item.generated, dtype=np.float32).reshape(-1)
        if not gen.size:
            return dict.fromkeys(self.names, math.nan)
        ref = None if item.reference is None else np.asarray(item.reference, dtype=np.float32).reshape(-1)
        gen_mel = self.mel_fn(gen)
        ref_mel = self.mel_fn(ref) if ref is not None else item.reference_mel
        if ref is not None and "pesq" in want:
            out["pesq"] = qm.pesq_wb(ref, gen, self.rate)
        if ref is not None and "stoi" in want:
            out["stoi"] = qm.stoi(ref, gen, self.rate)
        if ref is not None and "mrstft" in want:
            out["mrstft"] = qm.mrstft(ref, gen)
        if ref_mel is not None and "mcd" in want:
            out["mcd"] = qm.mcd(ref_mel, gen_mel)
        if ref_mel is not None and "mcd_dtw" in want:
            out["mcd_dtw"] = qm.mcd_dtw(ref_mel, gen_mel)
        if ref is not None and self.f0_fn is not None and "vde" in want:
            out.update(qm.f0_errors(self.f0_fn(ref), self.f0_fn(gen)))
        if "dnsmos_ovrl" in want:
            out.update(qm.dnsmos(gen, self.rate))
        if "distillmos" in want:
            from speechtrain.quality.distillmos_mos import distillmos

            out["distillmos"] = distillmos(gen, self.rate)
        if ref is not None and self.embed_fn is not None and "speaker_sim" in want:
            out["speaker_sim"] = qm.cosine(self.embed_fn(ref, self.rate), self.embed_fn(gen, self.rate))
        if self.transcribe is not None and "cer" in want:  # an item without its text: no value (counted in failed)
            said = self.transcribe(gen, self.rate) if item.text else ""
            out["cer"] = qm.cer(item.text, said, self.language, self.text_numbers) if item.text else math.nan
            if ref is not None and item.text:
                out["cer_recordings"] = self._recording_cer(item.item_id, ref, item.text)
        return out
