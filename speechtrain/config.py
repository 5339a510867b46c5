"""Typed, validated configuration: YAML files on top, ``key=value`` overrides on the command line.

Sections: ``data``, ``model``, ``optim``, ``accel``, ``train``, ``tune``, ``bench``. Every field
carries a docstring (``description``). An unknown key is an error naming the key and the closest
valid one; a wrong type names the key, the value and the expected type.

The ``model`` section is validated by the config class of the model family named in
``model.name`` (looked up in :mod:`speechtrain.registry`, which imports nothing of this module), so
model keys get the same checks.
"""

from __future__ import annotations

import difflib
import importlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Generic, Literal, TypeVar, Union, overload

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
    PrivateAttr,
    SerializeAsAny,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)
from typing_extensions import Self

from speechtrain import registry
from speechtrain.errors import UserError
from speechtrain.quality.catalog import ASR_KINDS, METRICS, check_best_metric

Switch = Union[Literal["auto"], bool]


def layout_names() -> tuple[str, ...]:
    """The ``data.format`` values besides ``auto``: the layouts that declare themselves in
    :mod:`speechtrain.data.layouts`. Asked by name (as :mod:`speechtrain.registry` asks a model family for
    its config class), so that reading a config imports no data code until a format is checked."""
    return tuple(importlib.import_module("speechtrain.data.layouts").names())


class ConfigError(UserError, ValueError):
    """A configuration problem, with a message that names the key and the fix."""


#: the schema mark of a field whose value may name code to import (``package.module:function``): every such field
#: carries it (``Field(..., json_schema_extra=NAMES_CODE)``), so that a network-facing door (the web UI) can refuse
#: each one its operator did not allow (:func:`code_values`); tests/test_code_fields.py fails on an unmarked one
NAMES_CODE: dict[str, Any] = {"names_code": True}


def marks_code(field: Any) -> bool:
    """A pydantic field (``FieldInfo``) declared with :data:`NAMES_CODE`."""
    extra = getattr(field, "json_schema_extra", None)
    return isinstance(extra, dict) and extra.get("names_code") is True


def names_code(value: Any) -> bool:
    """A value of a :data:`NAMES_CODE` field that names code: ``package.module:function`` (its loaders import what
    holds a colon, and take every other value as a built-in name)."""
    return isinstance(value, str) and ":" in value


def code_values(section: BaseModel, prefix: str = "") -> list[tuple[str, str]]:
    """``(dotted key, value)`` of every :data:`NAMES_CODE` field of ``section`` (a whole Config, or one section,
    walked into its sub-sections) whose value names code (:func:`names_code`); list values one by one."""
    found: list[tuple[str, str]] = []
    for name, field in type(section).model_fields.items():
        value = getattr(section, name, None)
        key = f"{prefix}{name}"
        if marks_code(field):
            values = value if isinstance(value, (list, tuple)) else [value]
            found += [(key, v) for v in values if isinstance(v, str) and names_code(v)]
        elif isinstance(value, BaseModel):
            found += code_values(value, f"{key}.")
    return found


#: the schema marks of a field whose value is a file or folder of the machine (``Field(...,
#: json_schema_extra=NAMES_DATASET)``), by what the job does there: reads it as a dataset, writes a run directory
#: there, or reads and writes files there (a feature cache, a checkpoint folder, weights to start from). A
#: network-facing door (the web UI) keeps each one under its own folders (:func:`path_values`);
#: tests/test_path_fields.py fails on an unmarked one
NAMES_DATASET: dict[str, Any] = {"names_path": "dataset"}
NAMES_RUN: dict[str, Any] = {"names_path": "run"}
NAMES_FILES: dict[str, Any] = {"names_path": "files"}
#: a folder of model weights that a job loads and runs (the user's ASR model, ``train.quality_asr``): a path of the
#: files kind, which a web UI served beyond this machine also refuses from a request (:func:`model_values`)
NAMES_MODEL: dict[str, Any] = {"names_path": "files", "names_model": True}


def path_kind(field: Any) -> str | None:
    """``dataset``, ``run`` or ``files`` for a pydantic field declared with a path mark (:data:`NAMES_DATASET`
    ...), else None."""
    extra = getattr(field, "json_schema_extra", None)
    kind = extra.get("names_path") if isinstance(extra, dict) else None
    return kind if isinstance(kind, str) else None


def path_values(section: BaseModel, prefix: str = "") -> list[tuple[str, str, str]]:
    """``(dotted key, kind, value)`` of every set path field of ``section`` (a whole Config, or one section, walked
    into its sub-sections; list values one by one)."""
    found: list[tuple[str, str, str]] = []
    for name, field in type(section).model_fields.items():
        value = getattr(section, name, None)
        key, kind = f"{prefix}{name}", path_kind(field)
        if kind is not None:
            values = value if isinstance(value, (list, tuple)) else [value]
            found += [(key, kind, str(v)) for v in values if isinstance(v, (str, os.PathLike)) and str(v)]
        elif isinstance(value, BaseModel):
            found += path_values(value, f"{key}.")
    return found


def model_values(section: BaseModel, prefix: str = "") -> list[tuple[str, str]]:
    """``(dotted key, value)`` of every set :data:`NAMES_MODEL` field of ``section`` (walked into sub-sections)."""
    found: list[tuple[str, str]] = []
    for name, field in type(section).model_fields.items():
        value = getattr(section, name, None)
        extra = getattr(field, "json_schema_extra", None)
        if isinstance(extra, dict) and extra.get("names_model") is True:
            found += [(f"{prefix}{name}", str(value))] if isinstance(value, (str, os.PathLike)) and str(value) else []
        elif isinstance(value, BaseModel):
            found += model_values(value, f"{prefix}{name}.")
    return found


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(
        extra="forbid", validate_assignment=True, protected_namespaces=(), allow_inf_nan=False
    )  # inf/NaN in a float setting (optim.lr=.inf) is refused


# ------------------------------------------------------------------------------------------ data
Phonemizer = Literal["none", "espeak", "rules", "piper"]
Symbols = Union[list[str], Literal["ascii"], None]
NumBuckets = Union[PositiveInt, Literal["auto"]]
Oversize = Literal["own_batch", "skip"]
CropShort = Literal["pad", "skip"]
RankRemainder = Literal["defer", "drop_report"]
F0Method = Union[Literal["yin", "parselmouth"], None]


class AudioSection(Section):
    """``data.audio``: Audio and features: sample rate, STFT and mel settings, durations kept, f0."""

    sample_rate: int = Field(22050, gt=0, description="Target sample rate in Hz; other rates are resampled (soxr).")
    n_fft: int = Field(1024, gt=0, description="FFT size of the STFT.")
    win_length: int = Field(1024, gt=0, description="Window length in samples.")
    hop_length: int = Field(256, gt=0, description="Hop length in samples (one mel frame).")
    n_mels: int = Field(80, gt=0, description="Number of mel bands.")
    fmin: float = Field(0.0, ge=0, description="Lowest mel frequency in Hz.")
    fmax: float | None = Field(8000.0, description="Highest mel frequency in Hz (None: Nyquist).")
    min_duration: float = Field(0.3, ge=0, description="Shorter utterances are skipped and reported (seconds).")
    max_duration: float = Field(30.0, gt=0, description="Longer utterances are skipped and reported (seconds).")
    f0_method: F0Method = Field(
        None,
        description="f0 per mel frame, computed by prepare and cached beside the mel (0 = unvoiced): yin (torch) "
        "or parselmouth (Praat, pip install 'speechtrain[pitch]'); None: no f0. NSF vocoders need it.",
    )
    f0_min: float = Field(65.0, gt=0, description="Lowest f0 the extractor looks for (Hz; SingingVocoders: 65).")
    f0_max: float = Field(1100.0, gt=0, description="Highest f0 the extractor looks for (Hz; SingingVocoders: 1100).")
    f0_frame_offset: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Where in its hop f0 frame i is measured, in hops: 0.5 (the centre of hop i, the centre of mel "
        "frame i's window) or 0.0 (sample i x hop: SingingVocoders' and DiffSinger's grid, half a hop earlier).",
    )

    @model_validator(mode="after")
    def _check_f0(self) -> AudioSection:
        if self.f0_max <= self.f0_min:
            raise ValueError(f"data.f0_max ({self.f0_max}) must be above data.f0_min ({self.f0_min})")
        if self.f0_method is not None and self.f0_max >= self.sample_rate / 2:
            raise ValueError(
                f"data.f0_max ({self.f0_max} Hz) must be below the Nyquist frequency ({self.sample_rate / 2} Hz)"
            )
        return self


class TextSection(Section):
    """``data.text``: Text: language, cleaners, phonemes, the symbol set."""

    require_text: bool | None = Field(None, description="Skip items with empty text; None: as the task needs.")
    lowercase: bool = Field(True, description="Lowercase text before tokenizing.")
    language: str = Field(
        "und",
        pattern=r"^[A-Za-z]{2,3}([-_][A-Za-z0-9]{2,8})*$",
        description="BCP-47 code of the transcripts (en, uz, uz-Cyrl, am, ...): picks the language's text cleaners "
        "and the espeak voice; und or any code without cleaners: the generic rules.",
    )
    phonemizer: Phonemizer = Field(
        "none",
        description="none: train on characters; espeak: IPA phonemes from espeak-ng (extra 'phonemes'); rules: the "
        "language's own G2P (am); piper: Piper's own espeak-ng phonemes and id layout (^ _ p _ ... $ per sentence, "
        "the ids a Piper voice reads at inference; with model.add_blank=false; extra 'export').",
    )
    transliterate: bool = Field(False, description="Uzbek (uz, uz-Cyrl): Cyrillic to Latin before tokenizing.")
    strip_accents: bool = Field(
        False, description="Remove accents (cafe for café), as runs before learned symbols did."
    )
    symbols: Symbols = Field(
        None,
        description="The model's text symbols. None: learned from the training transcripts by prepare and recorded "
        "in the run; a list pins them (fine-tuning); ascii: the fixed set of runs before learned symbols.",
    )

    @field_validator("symbols")
    @classmethod
    def _distinct_characters(cls, value: list[str] | str | None) -> list[str] | str | None:
        if isinstance(value, list):
            bad = [s for s in value if len(s) != 1]
            if bad:
                raise ValueError(f"every symbol must be one character, got {bad[:5]}")
            twice = sorted({s for s in value if value.count(s) > 1})
            if twice:
                raise ValueError(f"symbols listed twice: {twice[:5]}")
        return value


class BatchingSection(Section):
    """``data.batching``: Batches: the frame budget, duration buckets, crops, padding, ranks."""

    batch_size: int = Field(16, gt=0, description="Items per batch when bucketing is off; the mean for random plans.")
    eval_batch_size: int = Field(8, gt=0, description="Items per evaluation batch.")
    bucketing: bool = Field(True, description="Duration-bucketed batches sized in frames (else fixed-count random).")
    max_frames: int | None = Field(
        None, gt=0, description="Padded mel frames per batch (batch size x longest item); None: batch_size x longest."
    )
    quadratic_frames: float | None = Field(
        None, gt=0, description="Adds length^2/quadratic_frames to an item's cost, for attention models."
    )
    num_buckets: NumBuckets = Field(
        "auto",
        description="Duration buckets, boundaries at equal-total-duration quantiles; auto: the fewest whose planned "
        "padding is within bucket_padding_target.",
    )
    bucket_padding_target: float = Field(
        0.02, gt=0, lt=1, description="num_buckets=auto: the padded share of frames the bucket count aims for."
    )
    sort_pool: int = Field(
        16,
        gt=0,
        description="Inside a bucket, shuffled items are sorted by length in pools of this many batches "
        "(less padding); 1: random batches within the bucket.",
    )
    max_batch_size: int = Field(64, gt=0, description="Cap on items per batch (the frame budget is the real limit).")
    bucket_batch_sizes: list[int] | None = Field(
        None, description="Explicit batch size per bucket, shortest bucket first (written by `speechtrain tune`)."
    )
    bucket_boundaries: list[int] | None = Field(
        None, description="Explicit bucket upper bounds in frames (written by `speechtrain tune`)."
    )
    oversize: Oversize = Field(
        "own_batch", description="An utterance longer than the frame budget: its own batch, or skipped and counted."
    )
    crop_frames: int | None = Field(None, gt=0, description="Vocoder mode: random segments of this many mel frames.")
    crop_short: CropShort = Field("pad", description="Items shorter than crop_frames: pad or skip.")
    pad_multiple: int = Field(1, gt=0, description="Round padded length up to a multiple (8 helps tensor cores).")
    rank_remainder: RankRemainder = Field(
        "defer", description="Batches that do not divide among ranks: deferred to the next epoch, or dropped+reported."
    )
    shuffle: bool = Field(True, description="Shuffle within buckets and across batches (seeded by seed and epoch).")


class LoaderSection(Section):
    """``data.loader``: Delivery: DataLoader workers, pinned memory, features on the device."""

    num_workers: int = Field(0, ge=0, description="DataLoader worker processes.")
    pin_memory: Switch = Field("auto", description="Pin host memory for faster copies (auto: on with CUDA).")
    prefetch_factor: int | None = Field(None, gt=0, description="Batches prefetched per worker (None: torch default).")
    persistent_workers: bool = Field(False, description="Keep workers alive between epochs.")
    features_on_device: bool = Field(False, description="Compute log-mel on the device from raw audio in batch.")


class AugmentSection(Section):
    """``data.augment``: Training-time augmentation: noise, SpecAugment masks, key shifts."""

    noise_snr_db: float | None = Field(None, description="Device-side additive noise at this SNR (dB) in training.")
    time_masks: int = Field(0, ge=0, description="SpecAugment time masks per item (training only).")
    time_mask_width: int = Field(20, ge=0, description="Max width of a time mask in frames.")
    freq_masks: int = Field(0, ge=0, description="SpecAugment frequency masks per item (training only).")
    freq_mask_width: int = Field(10, ge=0, description="Max width of a frequency mask in mel bands.")
    pitch_shift_prob: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Share of training crops key-shifted (audio resampled, mel recomputed, f0 scaled together, as "
        "SingingVocoders' key_aug); needs data.crop_frames. 0: off.",
    )
    pitch_shift_semitones: tuple[float, float] = Field(
        (-1.82, 5.83),
        description="Range of the key shift in semitones, drawn uniformly (default: SingingVocoders' speed 0.9-1.4).",
    )
    volume_aug_prob: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Share of training crops scaled in volume (audio x e^g, log-mel + g, g uniform in [-3, "
        "min(3, -ln peak)]: never clipping), as SingingVocoders' volume_aug; needs data.crop_frames. 0: off.",
    )

    @model_validator(mode="after")
    def _check_shift_range(self) -> AugmentSection:
        lo, hi = self.pitch_shift_semitones
        if lo > hi:
            raise ValueError(f"data.pitch_shift_semitones [{lo}, {hi}]: the first must not exceed the second")
        return self


T = TypeVar("T")


class _Alias(Generic[T]):
    """A flat key of the data section (``data.sample_rate``) that reads and writes its section's field
    (``data.audio.sample_rate``): the keys from before the sections keep working in code, YAML and
    ``key=value`` overrides."""

    def __init__(self, section: str) -> None:
        self.section = section
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> _Alias[T]: ...
    @overload
    def __get__(self, obj: object, owner: type) -> T: ...
    def __get__(self, obj: object | None, owner: type) -> Any:
        if obj is None:
            return self
        return getattr(getattr(obj, self.section), self.name)

    def __set__(self, obj: object, value: T) -> None:
        setattr(obj, self.name, value)  # DataConfig.__setattr__ routes it to the section


class DataConfig(Section):
    """Where the audio is (the keys below), and in sections: how features are computed (``audio``), how
    text becomes symbols (``text``), how batches are formed (``batching``) and delivered (``loader``), and
    the augmentation (``augment``).

    Every section key has a flat alias (``data.sample_rate`` is ``data.audio.sample_rate``): YAML files,
    ``key=value`` overrides, keyword arguments and attribute access take either; the config is written
    with the flat keys (``config.yaml`` of a run, ``speechtrain config show``), so a run directory reads
    the same in every version.
    """

    manifest: str | None = Field(
        None,
        description="The dataset: a folder in one of the layouts (data.format), or its metadata file.",
        json_schema_extra=NAMES_DATASET,
    )
    format: str = Field(
        "auto",
        description="Dataset layout: auto, or a layout of speechtrain.data.layouts (ljspeech, jsonl, xtts, ...; "
        "docs/data.md lists them all); auto detects and names the candidates when a folder matches several.",
    )
    encoding: str | None = Field(
        None,
        description="Text encoding of the metadata (e.g. latin-1, cp1251); None: UTF-8, or UTF-16/UTF-8 with a BOM.",
    )
    text_column: str | None = Field(
        None,
        description="The transcript's column in a metadata file with named columns (audiofolder: raw_text, ...); "
        "None: the layout's usual names (transcription, text, sentence, ...).",
    )
    eval_manifest: str | None = Field(
        None, description="Separate evaluation manifest; else items are held out.", json_schema_extra=NAMES_DATASET
    )
    eval_utterances: int = Field(16, ge=0, description="Utterances held out for evaluation when no eval_manifest.")
    cache_dir: str | None = Field(
        None,
        description="Feature cache folder (default: .speechtrain_cache beside the data).",
        json_schema_extra=NAMES_FILES,
    )

    audio: AudioSection = Field(
        default_factory=AudioSection,
        description="Audio and features: sample rate, STFT and mel settings, durations kept, f0.",
    )
    text: TextSection = Field(
        default_factory=TextSection,
        description="Text: language, cleaners, phonemes, the symbol set.",
    )
    batching: BatchingSection = Field(
        default_factory=BatchingSection,
        description="Batches: the frame budget, duration buckets, crops, padding, ranks.",
    )
    loader: LoaderSection = Field(
        default_factory=LoaderSection,
        description="Delivery: DataLoader workers, pinned memory, features on the device.",
    )
    augment: AugmentSection = Field(
        default_factory=AugmentSection, description="Training-time augmentation: noise, SpecAugment masks, key shifts."
    )

    # audio
    sample_rate: ClassVar[_Alias[int]] = _Alias("audio")
    n_fft: ClassVar[_Alias[int]] = _Alias("audio")
    win_length: ClassVar[_Alias[int]] = _Alias("audio")
    hop_length: ClassVar[_Alias[int]] = _Alias("audio")
    n_mels: ClassVar[_Alias[int]] = _Alias("audio")
    fmin: ClassVar[_Alias[float]] = _Alias("audio")
    fmax: ClassVar[_Alias[float | None]] = _Alias("audio")
    min_duration: ClassVar[_Alias[float]] = _Alias("audio")
    max_duration: ClassVar[_Alias[float]] = _Alias("audio")
    f0_method: ClassVar[_Alias[F0Method]] = _Alias("audio")
    f0_min: ClassVar[_Alias[float]] = _Alias("audio")
    f0_max: ClassVar[_Alias[float]] = _Alias("audio")
    f0_frame_offset: ClassVar[_Alias[float]] = _Alias("audio")
    # text
    require_text: ClassVar[_Alias[bool | None]] = _Alias("text")
    lowercase: ClassVar[_Alias[bool]] = _Alias("text")
    language: ClassVar[_Alias[str]] = _Alias("text")
    phonemizer: ClassVar[_Alias[Phonemizer]] = _Alias("text")
    transliterate: ClassVar[_Alias[bool]] = _Alias("text")
    strip_accents: ClassVar[_Alias[bool]] = _Alias("text")
    symbols: ClassVar[_Alias[Symbols]] = _Alias("text")
    # batching
    batch_size: ClassVar[_Alias[int]] = _Alias("batching")
    eval_batch_size: ClassVar[_Alias[int]] = _Alias("batching")
    bucketing: ClassVar[_Alias[bool]] = _Alias("batching")
    max_frames: ClassVar[_Alias[int | None]] = _Alias("batching")
    quadratic_frames: ClassVar[_Alias[float | None]] = _Alias("batching")
    num_buckets: ClassVar[_Alias[NumBuckets]] = _Alias("batching")
    bucket_padding_target: ClassVar[_Alias[float]] = _Alias("batching")
    sort_pool: ClassVar[_Alias[int]] = _Alias("batching")
    max_batch_size: ClassVar[_Alias[int]] = _Alias("batching")
    bucket_batch_sizes: ClassVar[_Alias[list[int] | None]] = _Alias("batching")
    bucket_boundaries: ClassVar[_Alias[list[int] | None]] = _Alias("batching")
    oversize: ClassVar[_Alias[Oversize]] = _Alias("batching")
    crop_frames: ClassVar[_Alias[int | None]] = _Alias("batching")
    crop_short: ClassVar[_Alias[CropShort]] = _Alias("batching")
    pad_multiple: ClassVar[_Alias[int]] = _Alias("batching")
    rank_remainder: ClassVar[_Alias[RankRemainder]] = _Alias("batching")
    shuffle: ClassVar[_Alias[bool]] = _Alias("batching")
    # loader
    num_workers: ClassVar[_Alias[int]] = _Alias("loader")
    pin_memory: ClassVar[_Alias[Switch]] = _Alias("loader")
    prefetch_factor: ClassVar[_Alias[int | None]] = _Alias("loader")
    persistent_workers: ClassVar[_Alias[bool]] = _Alias("loader")
    features_on_device: ClassVar[_Alias[bool]] = _Alias("loader")
    # augment
    noise_snr_db: ClassVar[_Alias[float | None]] = _Alias("augment")
    time_masks: ClassVar[_Alias[int]] = _Alias("augment")
    time_mask_width: ClassVar[_Alias[int]] = _Alias("augment")
    freq_masks: ClassVar[_Alias[int]] = _Alias("augment")
    freq_mask_width: ClassVar[_Alias[int]] = _Alias("augment")
    pitch_shift_prob: ClassVar[_Alias[float]] = _Alias("augment")
    pitch_shift_semitones: ClassVar[_Alias[tuple[float, float]]] = _Alias("augment")
    volume_aug_prob: ClassVar[_Alias[float]] = _Alias("augment")

    @model_validator(mode="before")
    @classmethod
    def _nest_flat_keys(cls, raw: Any) -> Any:
        return nest_data_keys(raw) if isinstance(raw, dict) else raw

    @model_serializer(mode="wrap")
    def _flat(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out = handler(self)
        return flatten_data_keys(out) if isinstance(out, dict) else out

    def __copy__(self) -> Self:
        # each copy owns its sections: setting data.max_frames on a copy leaves the original alone
        copied = super().__copy__()
        for name in DATA_SECTIONS:
            object.__setattr__(copied, name, getattr(self, name).__copy__())  # not validated: a copy as it is
        return copied

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy; ``update`` may name flat keys (``{"hop_length": 32}``), set in their sections."""
        if not update:
            return super().model_copy(deep=deep)
        rest = {k: v for k, v in update.items() if k not in DATA_ALIASES}
        copied = super().model_copy(update=rest, deep=deep)
        for name in DATA_SECTIONS:
            own = {k: v for k, v in update.items() if DATA_ALIASES.get(k) == name}
            if own:
                object.__setattr__(copied, name, getattr(copied, name).model_copy(update=own))
        return copied

    def __setattr__(self, name: str, value: Any) -> None:
        section = DATA_ALIASES.get(name)
        if section is None:
            super().__setattr__(name, value)
            return
        target = getattr(self, section)
        before = getattr(target, name)
        setattr(target, name, value)  # validated by the section
        try:
            self._check_across_sections()
        except ValueError:
            setattr(target, name, before)
            raise

    @model_validator(mode="after")
    def _checked_across_sections(self) -> DataConfig:
        self._check_across_sections()
        return self

    def _check_across_sections(self) -> None:
        if self.augment.pitch_shift_prob > 0 and not self.batching.crop_frames:
            raise ValueError(
                "data.pitch_shift_prob shifts random crops (a shifted utterance changes length): set "
                "data.crop_frames (vocoders), or data.pitch_shift_prob=0"
            )
        if self.augment.volume_aug_prob > 0 and not self.batching.crop_frames:
            raise ValueError(
                "data.volume_aug_prob scales vocoder crops (audio and log-mel together): set data.crop_frames, or "
                "data.volume_aug_prob=0"
            )

    @field_validator("format")
    @classmethod
    def _known_layout(cls, value: str) -> str:
        known = layout_names()
        if value != "auto" and value not in known:
            hint = _closest(value, list(known))
            raise ValueError(
                f"unknown dataset layout {value!r}"
                + (f"; did you mean {hint!r}?" if hint else "")
                + f" (valid: auto, {', '.join(known)})"
            )
        return value

    @field_validator("encoding")
    @classmethod
    def _known_encoding(cls, value: str | None) -> str | None:
        if value is not None:
            import codecs

            try:
                codecs.lookup(value)
            except LookupError:
                raise ValueError(f"unknown text encoding {value!r} (e.g. utf-8, latin-1, cp1251, utf-16)") from None
        return value


DATA_SECTIONS: dict[str, type[Section]] = {
    "audio": AudioSection,
    "text": TextSection,
    "batching": BatchingSection,
    "loader": LoaderSection,
    "augment": AugmentSection,
}
#: flat key -> its section (``sample_rate`` -> ``audio``)
DATA_ALIASES: dict[str, str] = {key: name for name, cls in DATA_SECTIONS.items() for key in cls.model_fields}


def nest_data_keys(raw: dict[str, Any]) -> dict[str, Any]:
    """A raw data section with its flat keys moved into their sections (``sample_rate`` ->
    ``audio.sample_rate``). A key given both ways with different values is an error naming both."""
    out = {k: v for k, v in raw.items() if k not in DATA_ALIASES}
    for key, value in raw.items():
        section = DATA_ALIASES.get(key)
        if section is None:
            continue
        current = out.get(section)
        nested = current.model_dump() if isinstance(current, BaseModel) else dict(current or {})
        if key in nested and nested[key] != value:
            raise ValueError(
                f"data.{key} and data.{section}.{key} are the same key, given twice ({value!r} and "
                f"{nested[key]!r}): keep one"
            )
        nested[key] = value
        out[section] = nested
    return out


def flatten_data_keys(raw: dict[str, Any]) -> dict[str, Any]:
    """A raw data section with its sections' keys lifted to flat keys (the form a config is written in).
    Keys a section does not have stay inside it, so that validation names them."""
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key in DATA_SECTIONS and isinstance(value, dict):
            own = {k: v for k, v in value.items() if DATA_ALIASES.get(k) == key}
            for k, v in own.items():
                if k in raw and raw[k] != v:
                    raise ConfigError(
                        f"data.{k} and data.{key}.{k} are the same key, given twice ({raw[k]!r} and {v!r}): keep one"
                    )
            out.update(own)
            rest = {k: v for k, v in value.items() if k not in own}
            if rest:
                out[key] = rest
        else:
            out.setdefault(key, value)
    return out


class ModelSection(Section):
    """Base of model-family configs. ``name`` picks the family (see ``speechtrain.registry``)."""

    #: why this family should not train in bf16 (its reference warns against it), or None: ``accel.precision:
    #: auto`` then picks fp16 with a grad scaler where it would pick bf16, and says so in accel.json
    avoid_bf16: ClassVar[str | None] = None

    name: str | None = Field(
        None, description="Model family: a built-in name or 'package.module:factory'.", json_schema_extra=NAMES_CODE
    )


class OpaqueModelConfig(ModelSection):
    """Config of a user model given as 'package.module:factory': keys pass through unchecked."""

    model_config = ConfigDict(extra="allow")
    name: str | None = Field(None, json_schema_extra=NAMES_CODE)


class OptimConfig(Section):
    """Optimizer, learning rate, clipping and schedule."""

    name: Literal["adamw", "adam", "muon", "sgd"] = Field(
        "adamw", description="adamw; adam; muon (Muon for 2-D hidden weights + AdamW for the rest); sgd."
    )
    lr: float = Field(2e-4, gt=0, description="Learning rate (AdamW part when name=muon).")
    betas: tuple[float, float] = Field((0.8, 0.99), description="Adam betas.")
    eps: float = Field(1e-9, gt=0, description="Adam epsilon.")
    weight_decay: float = Field(0.0, ge=0, description="Decoupled weight decay.")
    muon_lr: float = Field(0.02, gt=0, description="Muon learning rate for 2-D hidden weights.")
    muon_momentum: float = Field(0.95, ge=0, lt=1, description="Muon momentum.")
    muon_variant: Literal["torch", "singingvocoders"] = Field(
        "torch",
        description="Muon's parameter rule and update scale: torch (lr x sqrt(max(1, rows/cols)), heads and "
        "vectors to AdamW) or singingvocoders (their Muon_AdamW: lr x sqrt(max(rows, cols)), every >=2-D "
        "tensor but embeddings and weight-norm magnitudes).",
    )
    muon_weight_decay: float | None = Field(
        None, ge=0, description="Weight decay of the Muon part (None: weight_decay, which the AdamW part uses)."
    )
    implementation: Literal["auto", "fused", "foreach", "for_loop"] = Field(
        "auto", description="AdamW kernel: fused on CUDA, foreach elsewhere (auto)."
    )
    lr_scaling: Literal["none", "linear", "sqrt"] = Field(
        "none", description="Scale lr with the effective batch against reference_batch_size (opt-in)."
    )
    reference_batch_size: int = Field(16, gt=0, description="Batch size at which lr is right, for lr_scaling.")
    grad_clip: float | None = Field(1.0, gt=0, description="Clip the gradient norm per optimizer (None: off).")
    scheduler: Literal["none", "exponential", "warmup_cosine"] = Field("none", description="LR schedule.")
    gamma: float = Field(0.999875, gt=0, le=1, description="ExponentialLR decay per scheduler step.")
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up steps (warmup_cosine).")
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="Cosine floor as a fraction of lr.")
    scheduler_interval: Literal["step", "epoch"] = Field("step", description="Step the scheduler per step or epoch.")


class AccelConfig(Section):
    """Accelerations. Each reports whether it took effect; ``auto`` follows the hardware probe."""

    precision: Literal["auto", "bf16", "fp16", "fp32"] = Field(
        "auto", description="auto: bf16 where supported, else fp16 with a grad scaler, else fp32 (CPU: fp32)."
    )
    tf32: Switch = Field("auto", description="TF32 matmul/conv on Ampere+ (approximate).")
    cudnn_benchmark: Switch = Field("auto", description="cuDNN autotune (auto: on unless deterministic).")
    channels_last: Switch = Field("auto", description="channels-last memory format for 2-D conv models.")
    compile: Switch = Field(False, description="torch.compile the model(s).")
    compile_mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] = Field(
        "default", description="torch.compile mode."
    )
    compile_dynamic: bool | None = Field(None, description="torch.compile dynamic shapes (None: torch decides).")
    sdpa: Switch = Field("auto", description="Use scaled_dot_product_attention in attention layers.")
    activation_checkpointing: Switch = Field(False, description="Recompute repeated blocks in backward.")
    cpu_allocator: Switch = Field(
        "auto",
        description="Tune glibc malloc (no mmap per large block, freed memory kept): no page-fault storm from "
        "per-step activations. auto: on for CPU training on glibc Linux. Process-wide; same maths.",
    )
    deterministic: bool = Field(False, description="Deterministic algorithms (slower; turns cudnn_benchmark off).")


class TrainConfig(Section):
    """The training loop."""

    max_steps: int = Field(1000, gt=0, description="Optimizer steps to run.")
    max_minutes: float | None = Field(None, gt=0, description="Stop (and save) after this much wall time.")
    max_audio_seconds: float | None = Field(
        None,
        gt=0,
        description="Stop (evaluate and save) once this many seconds of audio were trained: equal audio for every "
        "configuration compared (bench --quality).",
    )
    grad_accum: int = Field(1, gt=0, description="Micro-batches per optimizer step.")
    log_every: int = Field(50, gt=0, description="Write metrics every N steps.")
    eval_every: int = Field(500, gt=0, description="Evaluate every N steps.")
    save_every: int = Field(500, gt=0, description="Save a checkpoint every N steps.")
    keep_checkpoints: int = Field(5, gt=0, description="Keep the last K checkpoints.")
    best_after: int = Field(0, ge=0, description="Keep the best checkpoint (by best_metric) only after this step.")
    eval_audio_samples: int = Field(4, ge=0, description="Audio samples written at evaluation (tasks with audio).")
    eval_batches: int | None = Field(None, gt=0, description="Cap on evaluation batches (None: the whole eval set).")
    quality_items: int = Field(
        4,
        ge=0,
        description="Eval items whose audio is scored with the family's quality metrics at each evaluation (PESQ, "
        "STOI, MCD, DNSMOS... see docs/training.md): the first N of the eval set, in its fixed order, generated "
        "with fixed seeds; their synthesis and scoring time is reported as quality_seconds. 0: none.",
    )
    quality_asr: str | None = Field(
        None,
        description="TTS: the ASR that transcribes each scored synthesis, adding cer (the character error rate "
        "against the item's text) beside cer_recordings (the same ASR on the recordings: the ceiling). 'judge': a "
        "small CTC recogniser trained on the corpus's own recordings (recipes/asr_ctc_tiny.yaml; cached by the "
        "corpus's content; refused when its held-out CER is above its bound), for any language. 'pocketsphinx': "
        "its bundled US English model (human recordings; pip install pocketsphinx). Else the folder of a local "
        "Hugging Face ASR model (Whisper or a CTC model such as wav2vec2, saved with save_pretrained as "
        "safetensors; needs transformers), read from that folder only (no remote code, no pickle). None: no cer.",
        json_schema_extra=NAMES_MODEL,
    )
    quality_asr_language: str | None = Field(
        None,
        description="The language Whisper transcribes in for quality_asr (e.g. en, uz); None: Whisper detects it. "
        "A CTC model takes none.",
    )
    best_metric: str | None = Field(
        None,
        description="The eval-row key that picks best.pt and early stopping, better when it falls or rises as the "
        "metric says (pesq, stoi, dnsmos_ovrl: higher; mcd, mcd_dtw, cer: lower; loss); name:min or name:max for a "
        "key of your own model. None: the family's default quality metric (mcd for vocoders, mcd_dtw for TTS, "
        "macro_f1 for classifiers; the eval loss for a model without quality metrics or quality_items=0).",
    )
    early_stop_patience: int | None = Field(
        None, gt=0, description="Stop when best_metric has not improved for this many evaluations (None: never)."
    )
    seed: int = Field(1234, description="Seed for Python, NumPy, torch and the sampler.")
    init_from: list[str] | None = Field(
        None,
        description="Start a fresh run from these weights (optimizer, step and schedule start afresh): a "
        "speechtrain run directory or checkpoint, a jik876/hifi-gan g_ file (and its do_ file), or a "
        "SingingVocoders NSF-HiFiGAN checkpoint. Modules the file lacks keep their initialisation; "
        "init_report.txt in the run lists every tensor.",
        json_schema_extra=NAMES_FILES,
    )
    init_trust_pickle: bool = Field(
        False, description="init_from: allow files holding pickled Python objects (Lightning checkpoints)."
    )

    @field_validator("init_from", mode="before")
    @classmethod
    def _one_path_is_a_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str | os.PathLike) else value

    output_dir: str = Field("runs/run", description="Run directory.", json_schema_extra=NAMES_RUN)
    auto_resume: bool = Field(
        False,
        description="Continue output_dir from its newest loadable checkpoint when it has one, else start (the rows "
        "a killed run wrote past its last checkpoint are dropped): the same command each time, what torchrun "
        "--max-restarts and a scheduler's requeue run (CLI: --auto-resume).",
    )
    device: str = Field("auto", description="auto, cpu, cuda, cuda:N.")
    strategy: Literal["auto", "ddp", "fsdp"] = Field(
        "auto",
        description="Several processes (torchrun): ddp replicates the model and all-reduces gradients in buckets "
        "during the backward; fsdp shards parameters, gradients and optimizer state (FSDP2, per transformer "
        "block, bf16 parameters with fp32 reduction under accel.precision=bf16; one-stage tasks, fp32/bf16, no "
        "Muon, no OOM redo; sharded DCP checkpoints step_N.dcp/ beside step_N.pt, loadable at any world size); "
        "auto: fsdp when one replica's weights + gradients + optimizer state (as speechtrain estimate counts "
        "them) exceed half a rank's device memory and the task qualifies, else ddp (logged with the reason).",
    )
    ddp_bucket_mb: float = Field(25.0, gt=0, description="DDP gradient bucket size, MiB (several processes only).")
    ddp_find_unused_parameters: Switch = Field(
        "auto",
        description="DDP looks for parameters a stage left without a gradient after every synced forward (a walk "
        "of the autograd graph, and torch's warning when there are none); auto: only for a task that declares "
        "ddp_find_unused_parameters = True (none of the built-in families needs it).",
    )
    ddp_static_graph: bool = Field(
        False,
        description="DDP's static_graph: the same parameters are used in the same order every step (lets DDP "
        "skip work; wrong for a task whose graph changes from step to step).",
    )
    ddp_gradient_as_bucket_view: bool = Field(
        True, description="DDP's gradient_as_bucket_view: gradients live in the all-reduce buckets (one copy less)."
    )
    dist_timeout_minutes: float = Field(
        10.0, gt=0, description="Several processes: a rank waiting longer than this for the others gives up."
    )
    memory_fraction: float | None = Field(
        None, gt=0, le=1, description="Cap this process's GPU memory share (set_per_process_memory_fraction)."
    )
    nan_fallback_after: int = Field(
        3, gt=0, description="Non-finite steps in a row under fp16 before reloading and switching precision."
    )
    oom_single_utterance: Literal["skip", "stop"] = Field(
        "skip",
        description="An utterance that runs out of memory on its own: skip it for the rest of the run and "
        "report it (skip), or stop with the fix (stop).",
    )
    progress: bool = Field(True, description="Show a progress bar.")
    tensorboard: bool = Field(True, description="Write TensorBoard events (needs the tensorboard package).")


class TuneConfig(Section):
    """The per-bucket batch-size tuner (`speechtrain tune`)."""

    memory_fraction: float = Field(0.9, gt=0, le=1, description="Share of device memory the tuner may plan for.")
    margin_gib: float = Field(0.5, ge=0, description="Memory kept free beyond the fraction, GiB.")
    objective: Literal["throughput", "memory"] = Field(
        "throughput", description="throughput: stop growing when audio-s/s stops rising; memory: largest that fits."
    )
    tolerance: float = Field(0.05, gt=0, lt=1, description="Bisection stops within this fraction.")
    min_gain: float = Field(0.05, ge=0, description="throughput: a larger batch must raise audio-s/s by this much.")
    steps_per_trial: int = Field(2, gt=0, description="Timed training steps per trial (after one warm-up).")
    max_batch_size: int = Field(1024, gt=0, description="Largest batch the tuner tries.")
    target_batch_seconds: float | None = Field(
        None, gt=0, description="Effective batch in seconds of audio; grad_accum is chosen to reach it."
    )


class BenchConfig(Section):
    """Defaults of `speechtrain bench`."""

    steps: int = Field(20, gt=0, description="Timed steps per measurement, at least (see min_seconds).")
    warmup: int = Field(3, ge=0, description="Warm-up steps excluded from timing.")
    min_seconds: float = Field(
        10.0, ge=0, description="Timed seconds per measurement, at least: the window is >= steps AND >= min_seconds."
    )
    repeat: int = Field(
        3, gt=0, description="Passes over the rows, interleaved round-robin; each row shows its median and range."
    )
    threads: Literal["auto"] | PositiveInt = Field(
        "auto",
        description="torch threads per row; auto: the usable cores minus the row's loader workers (no oversubscribing)",
    )
    max_spread: float = Field(
        0.2,
        gt=0,
        description="A speed-up whose per-pass ratios range wider than this fraction of the median (or across "
        "1.0x) is reported as inconclusive.",
    )
    row_timeout: float | None = Field(
        None,
        gt=0,
        description="Seconds a ladder row's process may take in all (start, warm-up, compilation, timing); past it "
        "the row is killed, marked 'timed out' and the next row runs (None: no limit).",
    )


class Config(Section):
    """A whole speechtrain configuration."""

    data: DataConfig = Field(default_factory=DataConfig)
    model: SerializeAsAny[ModelSection] = Field(default_factory=ModelSection)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    accel: AccelConfig = Field(default_factory=AccelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    tune: TuneConfig = Field(default_factory=TuneConfig)
    bench: BenchConfig = Field(default_factory=BenchConfig)
    # the folder of the YAML file it was loaded from (a user's 'module:factory' is looked for there too)
    _source_dir: Path | None = PrivateAttr(default=None)

    @property
    def source_dir(self) -> Path | None:
        return self._source_dir

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (YAML/JSON-safe) of the resolved config."""
        return self.model_dump(mode="json")

    def to_yaml(self) -> str:
        """The resolved config as YAML."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


SECTIONS = ("data", "model", "optim", "accel", "train", "tune", "bench")


def _closest(key: str, valid: list[str]) -> str | None:
    hits = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    return hits[0] if hits else None


def _model_for_path(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    cls: Any = root
    for part in loc:
        field = getattr(cls, "model_fields", {}).get(part) if isinstance(part, str) else None
        if field is None:
            return None
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            cls = ann
        else:
            return None
    return cls


def _format_errors(err: ValidationError, root: type[BaseModel], prefix: str = "") -> str:
    lines = []
    for e in err.errors():
        loc = tuple(e["loc"])
        key = prefix + ".".join(str(p) for p in loc)
        if e["type"] == "extra_forbidden":
            parent = _model_for_path(root, loc[:-1])
            valid = list(parent.model_fields) if parent is not None else []
            if parent is DataConfig:
                valid += list(DATA_ALIASES)  # the flat keys are keys of the data section too
            hint = _closest(str(loc[-1]), valid)
            msg = f"unknown key '{key}'"
            home = DATA_ALIASES.get(str(loc[-1]))
            if home is not None and parent in DATA_SECTIONS.values():
                msg += f": it is a key of data.{home} (data.{home}.{loc[-1]}, or data.{loc[-1]})"
            elif hint:
                msg += f"; did you mean '{prefix + '.'.join(str(p) for p in loc[:-1] + (hint,))}'?"
            elif valid:
                msg += f"; valid keys here: {', '.join(valid)}"
            lines.append(msg)
        elif e["type"] == "value_error" and isinstance(e.get("input"), dict):
            # a section's own cross-field check: its message names the keys and the fix
            lines.append(str(e["msg"]).removeprefix("Value error, "))
        elif e["type"] == "value_error":
            # a field's own check (data.format, data.encoding): its message says what is valid
            lines.append(f"bad value for '{key}': {e.get('input')!r}: {str(e['msg']).removeprefix('Value error, ')}")
        else:
            value = e.get("input")
            if len(loc) >= 3 and loc[-3] == "data" and DATA_ALIASES.get(str(loc[-1])) == loc[-2]:
                key = prefix + ".".join(str(p) for p in (*loc[:-2], loc[-1]))  # the flat key, as configs write it
            field_cls = _model_for_path(root, loc[:-1])
            expected = ""
            if field_cls is not None and loc and isinstance(loc[-1], str) and loc[-1] in field_cls.model_fields:
                ann = field_cls.model_fields[loc[-1]].annotation
                expected = f" (expected {_type_name(ann)})"
            lines.append(f"bad value for '{key}': {value!r} ({type(value).__name__}): {e['msg']}{expected}")
    return "\n".join(lines)


def _type_name(ann: Any) -> str:
    text = repr(ann) if not isinstance(ann, type) else ann.__name__
    return text.replace("typing.", "")


def parse_override(text: str) -> tuple[list[str], Any]:
    """Parse ``a.b.c=value`` (value read as YAML) into its key path and value."""
    if "=" not in text:
        raise ConfigError(f"override '{text}' is not key=value (e.g. train.max_steps=100)")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not p for p in key.split(".")):
        raise ConfigError(f"override '{text}': empty key part")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"override '{text}': value is not valid YAML ({exc})") from None
    return key.split("."), value


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in top.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


#: the recipes shipped with a checkout (absent in an installed wheel: then only the user's own folder is searched)
SHIPPED_RECIPES = Path(__file__).resolve().parents[1] / "recipes"


def missing_config_hint(path: Path) -> str:
    """What the user probably meant by a config path that is no file: the same name with ``.yaml``/``.yml``,
    a recipe of that name (``vits_tiny`` -> ``recipes/vits_tiny.yaml``), a close name in the same folder or among
    the shipped recipes; else whether the folder itself exists."""
    if path.is_dir():
        return f": {path} is a folder; name a YAML file in it"
    candidates = [path.with_suffix(sfx) for sfx in (".yaml", ".yml") if path.suffix != sfx]
    if len(path.parts) == 1:
        candidates += [Path("recipes") / f"{path.stem}.yaml", SHIPPED_RECIPES / f"{path.stem}.yaml"]
    for cand in candidates:
        if cand.is_file():
            return f"; did you mean {cand}?"
    for folder in dict.fromkeys((path.parent, SHIPPED_RECIPES)):
        if not folder.is_dir():
            continue
        files = {p.stem: p.name for p in sorted(folder.iterdir()) if p.suffix in (".yaml", ".yml")}
        hit = difflib.get_close_matches(path.stem, list(files), n=1, cutoff=0.75)
        if hit:
            name = files[hit[0]]
            return f"; did you mean {path.with_name(name) if folder == path.parent else folder / name}?"
    if not path.parent.is_dir():
        return f" (the folder {path.parent} does not exist either)"
    return ""


def read_yaml(path: str | os.PathLike[str], _chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Read a config YAML file; ``extends: other.yaml`` (relative to this file) merges a base first."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"config file not found: {path}"
            + (f" (extended by {_chain[-1]})" if _chain else "")
            + missing_config_hint(path)
        )
    resolved = path.resolve()
    if resolved in _chain:
        loop = " -> ".join(str(p) for p in (*_chain[_chain.index(resolved) :], resolved))
        raise ConfigError(f"{path}: 'extends:' loops back to a file that extends it ({loop}); break the loop")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}:{line}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x}); save the file as UTF-8"
        ) from None
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping of sections ({', '.join(SECTIONS)})")
    if isinstance(raw.get("data"), dict):
        raw["data"] = flatten_data_keys(raw["data"])  # one spelling per key before files are merged
    base = raw.pop("extends", None)
    if base is not None:
        raw = _deep_merge(read_yaml(path.parent / str(base), (*_chain, resolved)), raw)
    return raw


def build_config(raw: dict[str, Any]) -> Config:
    """Validate a raw dict into a :class:`Config`, the model section by its family's class."""
    for key in raw:
        if key not in SECTIONS:
            hint = _closest(str(key), list(SECTIONS))
            raise ConfigError(
                f"unknown section '{key}'" + (f"; did you mean '{hint}'?" if hint else f"; sections: {SECTIONS}")
            )
        if not isinstance(raw[key], dict):
            raise ConfigError(f"section '{key}' must be a mapping, got {raw[key]!r}")
    model_raw = dict(raw.get("model") or {})
    name = model_raw.get("name") or registry.default_family()
    if name is not None:
        model_raw["name"] = name
    cls = _model_class(name, model_raw)
    try:
        model = cls.model_validate(model_raw)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, cls, prefix="model.")) from None
    rest = {k: v for k, v in raw.items() if k != "model"}
    try:
        cfg = Config.model_validate({**rest, "model": model})
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, Config)) from None
    refusal = fsdp_refusal(cfg) or asr_refusal(cfg) or best_metric_refusal(cfg)
    if refusal is not None:
        raise ConfigError(refusal)
    return cfg


def best_metric_refusal(cfg: Config) -> str | None:
    """Why ``train.best_metric`` cannot pick this model's best checkpoint (None: it can): a metric the family
    does not report, or a quality metric with ``train.quality_items=0``."""
    value = cfg.train.best_metric
    kind = registry.quality_kind(cfg.model.name)
    why = check_best_metric(kind, value, asr=bool(cfg.train.quality_asr))
    if why is None and value and kind not in (None, "classifier") and cfg.train.quality_items == 0:
        name = value.partition(":")[0]
        if name in METRICS and name not in ("loss", "accuracy", "macro_f1"):
            why = f"train.best_metric={value} is scored on train.quality_items items, which is 0: set it above 0"
    return why


def asr_refusal(cfg: Config) -> str | None:
    """Why ``train.quality_asr`` (or its language) would do nothing for this model (None: it scores cer): the ASR
    model transcribes speech made from a text, which only TTS families make (a user's own model: decided when it
    runs, by its task's quality kind)."""
    t, name = cfg.train, cfg.model.name
    if t.quality_asr_language and not t.quality_asr:
        return "train.quality_asr_language is the language of train.quality_asr's model: set that too, or unset it"
    if t.quality_asr and name is not None and not registry.is_user_factory(name):
        kind = registry.family(name).quality
        if kind in ASR_KINDS:
            return None
        what = f"a {kind} model" if kind else "a model without quality metrics"
        return (
            f"train.quality_asr: the ASR character error rate scores speech synthesised from text (the TTS families), "
            f"and {cfg.model.name} is {what}: unset train.quality_asr"
        )
    return None


def fsdp_refusal(cfg: Config) -> str | None:
    """Why ``train.strategy=fsdp`` cannot run this config, with the alternative (None: it can, or another
    strategy is asked for). Read with the config, so that a refused combination stops before any work; a
    user's ``module:factory`` task is checked by the trainer when it is built (its stages are known then)."""
    if cfg.train.strategy != "fsdp":
        return None
    problems = []
    name = cfg.model.name
    if name is not None and not registry.is_user_factory(name):
        why = registry.family(name).fsdp_refusal()
        if why:
            problems.append(f"{why}: use train.strategy=ddp")
    if cfg.accel.precision == "fp16":
        problems.append(
            "accel.precision=fp16 needs a gradient scaler, which FSDP2's sharded gradients do not take: use "
            "accel.precision=bf16 (or fp32) with fsdp, or train.strategy=ddp"
        )
    if cfg.optim.name == "muon":
        problems.append(
            "Muon orthogonalises whole matrices, which FSDP2 splits across ranks: use optim.name=adamw with fsdp, "
            "or train.strategy=ddp"
        )
    return "train.strategy=fsdp is refused: " + "; ".join(problems) if problems else None


def _model_class(name: Any, model_raw: dict[str, Any]) -> type[BaseModel]:
    if name is None:
        keys = [k for k in model_raw if k != "name"]
        if keys:
            raise ConfigError(
                f"model.{keys[0]}: set model.name first to pick a family "
                f"({', '.join(registry.families())}, or 'package.module:factory' for your own)"
            )
        return ModelSection
    if not isinstance(name, str):
        raise ConfigError(f"bad value for 'model.name': {name!r}: give a family name or 'package.module:factory'")
    try:
        cls = registry.model_config_class(name)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0])) from None
    return OpaqueModelConfig if cls is None else cls


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key=value`` overrides to a raw config dict (copy)."""
    out = _deep_merge({}, raw)
    for text in overrides:
        keys, value = parse_override(text)
        if len(keys) == 3 and keys[0] == "data" and DATA_ALIASES.get(keys[2]) == keys[1]:
            keys = ["data", keys[2]]  # data.audio.sample_rate is written data.sample_rate
        node = out
        for k in keys[:-1]:
            nxt = node.get(k)
            if nxt is None:
                nxt = node[k] = {}
            elif not isinstance(nxt, dict):
                raise ConfigError(f"override '{text}': '{k}' is a value, not a section")
            node = nxt
        node[keys[-1]] = value
    return out


def load_config(path: str | os.PathLike[str] | None = None, overrides: list[str] | None = None) -> Config:
    """Load a YAML config (or defaults when ``path`` is None) and apply ``key=value`` overrides."""
    raw = read_yaml(path) if path is not None else {}
    cfg = build_config(apply_overrides(raw, overrides or []))
    if path is not None:
        cfg._source_dir = Path(path).resolve().parent
    return cfg


def save_config(cfg: Config, path: str | os.PathLike[str]) -> None:
    """Write the resolved config as YAML, atomically (a temporary file renamed over ``path``): a kill or a
    full disk leaves the previous file whole."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(cfg.to_yaml())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
