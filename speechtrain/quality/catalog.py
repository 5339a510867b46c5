"""The quality metrics by name: what each measures, which way is better, what it needs, and which metrics each
kind of model gets. Plain data (no numpy, no torch): the config checks ``train.best_metric`` against it when a
config is read, the Trainer picks ``best.pt`` by it, the bench and ``speechtrain eval`` print its units.

A family declares its kind (:attr:`speechtrain.registry.Family.quality`, the same string as its task's
``quality_kind``); :data:`KINDS` lists the metrics of each kind. A metric whose package is not installed is
named with its install hint in the eval row (``quality_missing``) and in the log, never skipped silently.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Literal

Mode = Literal["min", "max"]

#: the extra that installs every optional metric package
EXTRA_HINT = "pip install 'speechtrain[quality]'"


@dataclass(frozen=True)
class MetricSpec:
    """One metric: its key in the eval row, which way is better, its unit, the module it needs (None: numpy and
    torch only) and one line of what it is."""

    name: str
    mode: Mode
    unit: str
    package: str | None
    about: str

    def available(self) -> bool:
        """Whether the package it needs imports here (without importing it)."""
        return self.package is None or importlib.util.find_spec(self.package) is not None

    def hint(self) -> str:
        """'<name> (pip install <package>)': what to install for it."""
        if self.package in NO_DEPS:
            return f"{self.name} (pip install --no-deps {NO_DEPS[self.package]})"
        return f"{self.name} (pip install {PIP_NAMES.get(self.package or '', self.package)}, or {EXTRA_HINT})"


#: import name -> pip name, where they differ
PIP_NAMES = {"speechmos": "speechmos onnxruntime", "transformers": "'transformers>=4.40' jiwer"}
#: packages installed without their declared requirements, outside every extra: distillmos requires torchaudio,
#: which it does not need here, and pip's torchaudio for a CPU torch 2.13 does not load (once installed,
#: transformers imports it and fails)
NO_DEPS = {"distillmos": "distillmos xls-r-sqa"}

_SPECS = (
    MetricSpec("pesq", "max", "MOS-LQO", "pesq", "PESQ wide-band (ITU-T P.862.2) at 16 kHz against the recording"),
    MetricSpec("stoi", "max", "0-1", "pystoi", "short-time objective intelligibility against the recording"),
    MetricSpec("mcd", "min", "dB", None, "mel-cepstral distortion, frame by frame, against the recording"),
    MetricSpec("mrstft", "min", "", None, "multi-resolution STFT distance (spectral convergence + log-magnitude L1)"),
    MetricSpec("f0_rmse_cents", "min", "cents", None, "f0 RMSE over frames voiced in both, the run's extractor"),
    MetricSpec("gpe", "min", "share", None, "gross pitch error: frames voiced in both with f0 off by > 20 %"),
    MetricSpec("vde", "min", "share", None, "voicing decision error: frames voiced in one signal only"),
    MetricSpec("dnsmos_sig", "max", "MOS", "speechmos", "DNSMOS P.835 speech signal quality (non-intrusive)"),
    MetricSpec("dnsmos_bak", "max", "MOS", "speechmos", "DNSMOS P.835 background noise quality (non-intrusive)"),
    MetricSpec("dnsmos_ovrl", "max", "MOS", "speechmos", "DNSMOS P.835 overall quality (non-intrusive)"),
    MetricSpec("distillmos", "max", "MOS", "distillmos", "DistillMOS, a second non-intrusive MOS predictor (1-5)"),
    MetricSpec("mcd_dtw", "min", "dB", None, "mel-cepstral distortion after DTW alignment to the recording"),
    MetricSpec(
        "cer",
        "min",
        "share",
        "transformers",
        "character error rate of an ASR model (the judge's, or yours) on the synthesis",
    ),
    MetricSpec("cer_recordings", "min", "share", None, "the same ASR's CER on the recordings: the ceiling of cer"),
    MetricSpec("speaker_sim", "max", "cosine", None, "cosine of the model's speaker embeddings: synthesis, recording"),
    MetricSpec("accuracy", "max", "share", None, "share of eval items classified right"),
    MetricSpec("macro_f1", "max", "0-1", None, "F1 per class, averaged over the classes (each class counts alike)"),
    MetricSpec("loss", "min", "", None, "the task's eval loss (not a quality metric)"),
)
METRICS: dict[str, MetricSpec] = {s.name: s for s in _SPECS}

_VOCODER = ("pesq", "stoi", "mcd", "mrstft")
#: no duration ratio: a TTS model early in training speaks each symbol for a near-constant time, so its length
#: followed the text alone (identical to 16 digits across runs trained on different text) and told nothing of the model
_TTS = ("dnsmos_sig", "dnsmos_bak", "dnsmos_ovrl", "distillmos", "mcd_dtw")

#: quality kind -> the metrics computed for it (in the order tables show them)
KINDS: dict[str, tuple[str, ...]] = {
    "vocoder": _VOCODER,
    "pitch_vocoder": (*_VOCODER, "f0_rmse_cents", "gpe", "vde"),
    "tts": _TTS,
    "speaker_tts": (*_TTS, "speaker_sim"),
    "classifier": ("accuracy", "macro_f1"),
}

#: the kinds whose synthesis is of a text, and the metrics they get besides when the user names a local ASR model
#: (``train.quality_asr``; no ASR weights ship with speechtrain)
ASR_KINDS = ("tts", "speaker_tts")
ASR_METRICS = ("cer",)

#: the metric ``train.best_metric`` defaults to per kind: a quality metric that needs no optional package, so
#: that the default behaves the same wherever it runs (``train.best_metric=pesq`` etc. pick another)
DEFAULT_BEST: dict[str, str] = {
    "vocoder": "mcd",
    "pitch_vocoder": "mcd",
    "tts": "mcd_dtw",
    "speaker_tts": "mcd_dtw",
    "classifier": "macro_f1",
}


def metrics_of(kind: str, asr: bool = False) -> tuple[str, ...]:
    """The metrics of a quality kind ('' or an unknown kind: none); ``asr``: a local ASR model is named
    (``train.quality_asr``), which adds :data:`ASR_METRICS` to the kinds of :data:`ASR_KINDS`."""
    return KINDS.get(kind, ()) + (ASR_METRICS if asr and kind in ASR_KINDS else ())


def missing_packages(names: tuple[str, ...] | list[str]) -> list[str]:
    """The install hint of each metric in ``names`` whose package is absent."""
    return [METRICS[n].hint() for n in names if n in METRICS and not METRICS[n].available()]


@dataclass(frozen=True)
class BestMetric:
    """What picks ``best.pt``: an eval-row key and which way is better."""

    name: str
    mode: Mode

    def better(self, value: float, best: float | None) -> bool:
        return best is None or (value < best if self.mode == "min" else value > best)


def check_best_metric(kind: str | None, value: str | None, asr: bool = False) -> str | None:
    """Why ``train.best_metric=value`` does not suit a family of quality ``kind`` (None: it does); ``asr``: a
    local ASR model is named (``train.quality_asr``: ``cer`` is scored for TTS). ``kind`` None: a user's own model,
    whose eval keys are known only when it runs (any name is taken; ``name:min`` or ``name:max`` gives a key of its
    own its direction)."""
    if value is None or value == "loss":
        return None
    name, _, mode = value.partition(":")
    if mode and mode not in ("min", "max"):
        return f"train.best_metric={value}: the direction after ':' is min or max"
    if kind is None:
        return None
    offered = (*metrics_of(kind, asr), "loss")
    if name in ASR_METRICS and kind in ASR_KINDS and not asr:
        return (
            f"train.best_metric={value} is scored only with a local ASR model: set train.quality_asr=FOLDER (a "
            "Hugging Face Whisper or wav2vec2-CTC model saved as safetensors; none ships with speechtrain)"
        )
    if name not in offered or (mode and name in METRICS and mode != METRICS[name].mode):
        if mode and name in offered:
            return f"train.best_metric={value}: {name} is better when {METRICS[name].mode}imised; write {name}"
        return (
            f"train.best_metric={value} is not a metric of this model (a {kind or 'model without quality metrics'}); "
            f"choose one of {', '.join(offered)}"
        )
    return None


def resolve_best(kind: str, value: str | None, quality_items: int) -> BestMetric:
    """The metric that picks ``best.pt``: ``value`` (``name`` or ``name:min|max``), else the kind's default
    quality metric (the eval loss when the kind has none or ``train.quality_items`` is 0)."""
    if value:
        name, _, mode = value.partition(":")
        spec = METRICS.get(name)
        return BestMetric(name, mode if mode in ("min", "max") else (spec.mode if spec else "min"))  # type: ignore[arg-type]
    default = DEFAULT_BEST.get(kind)
    if default is None or (quality_items == 0 and kind != "classifier"):
        return BestMetric("loss", "min")
    return BestMetric(default, METRICS[default].mode)
