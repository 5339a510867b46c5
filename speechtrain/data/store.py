"""The feature cache: a :class:`FeatureStore` per data section, holding one typed :class:`CacheIndex`
per manifest and settings variant.

Layout under the cache root (``data.cache_dir``, default ``<data folder>/.speechtrain_cache``)::

    <root>/<manifest-stem>-<hash8>/index-<settings-hash8>.json
                                                 one per manifest and settings variant (up to 4 kept):
                                                 settings, items, problems, header probes
    <root>/features/<kk>/<mel_key>.mel.npy       float32 (n_mels, T_frames)
    <root>/features/<kk>/<audio_key>.audio.npy   int16 (T_frames * hop_length,)
    <root>/features/<kk>/<f0_key>.f0.npy         float32 (T_frames,) Hz, 0 = unvoiced (with data.f0_method)
    <root>/features/<kk>/<key>.<name>.npy        a model family's derived feature (XTTS: int16 DVAE codes
                                                 (T_codes,) as ``codes``): :mod:`speechtrain.data.derived`
    <root>/.lock                                 held while preparing (names its holder: pid, host, command)
    <root>/leases/<pid>-<n>.keys                 the feature keys an open dataset reads (a reader lease)

A mel key hashes the audio file's absolute path, size, mtime and the feature settings (sample_rate,
n_fft, win_length, hop_length, n_mels, fmin, fmax); an audio key the same file facts with sample_rate
and hop_length only; an f0 key the audio key's facts with the f0 settings (method, f0_min, f0_max); a derived
feature's key the audio key with the feature's settings digest (its weights, its own mel settings). A
changed file or setting gets new keys and is recomputed (a mel-only setting from the stored audio) while
everything else is reused; files that no index and no live reader lease refers to are removed. A
:class:`ReaderLease` is an ``flock``-held file listing the keys an open dataset reads (a training, say): a
``prepare`` run meanwhile never deletes them, and a lease whose process is gone (its lock dropped by the
kernel) is removed by the next garbage collection.
Switching between settings (an 80-mel vocoder and a 64-mel classifier on the same data) keeps both.

The store owns the two rules that prepare and the dataset share: :meth:`FeatureStore.stale_reason`
(whether an index can be used as is) and :meth:`FeatureStore.split_items` (which items are held out
for evaluation). An index that cannot be read as a :class:`CacheIndex` (another cache version, a
damaged file, a layout from elsewhere) counts as missing: ``prepare`` rebuilds it.

Every feature file is read through :func:`load_feature`, which checks it against the index (readable to its
end, the shape the index gives: ``(n_mels, frames)``, ``(samples,)``, ``(frames,)``, a derived feature's
recorded shape): a damaged file is a :class:`DataError` naming it and ``speechtrain prepare --repair``, which
recomputes the damaged files (:func:`damaged_files`). :meth:`FeatureStore.lock` waits for another ``prepare``
at most :data:`LOCK_WAIT_SECONDS`, saying who holds the lock, then gives up with the holder's name.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import signal
import socket
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from speechtrain.data.derived import DerivedFeature
from speechtrain.data.features import MelSettings
from speechtrain.data.limits import ItemLimits
from speechtrain.data.manifest import (
    ManifestSignature,
    Problem,
    data_folder,
    file_signature,
    manifest_signature,
    paired_eval_file,
    refuse_cached_outside_roots,
    resolve_format,
)
from speechtrain.data.pitch import F0Settings
from speechtrain.data.text.frontend import TextSettings
from speechtrain.data.text.inventory import TextItem
from speechtrain.data.validate import Probe
from speechtrain.errors import DataError, free_space
from speechtrain.logs import get_logger

if TYPE_CHECKING:
    from speechtrain.config import DataConfig

CACHE_VERSION = 3  # bump when the index layout changes (3: symbols from the front end, text settings)
FEATURE_VERSION = 2  # bump when the feature files change (their keys hash it; an index bump keeps them)
KEEP_VARIANTS = 4  # settings variants kept per manifest (e.g. 80-mel for a vocoder, 64-mel for a classifier)
LOCK_WAIT_SECONDS = 600.0  # how long a prepare waits for another one's cache lock before giving up
AUDIO_KEYS = ("sample_rate", "hop_length")  # the stored audio depends only on these

log = get_logger(__name__)


class Role(StrEnum):
    """What a manifest (or a split of the data) is for."""

    TRAIN = "train"
    EVAL = "eval"


@dataclass(frozen=True)
class ManifestRef:
    """One manifest of the data: its role, path and resolved format."""

    role: Role
    path: str
    format: str


@dataclass(frozen=True)
class IndexSettings:
    """Everything an index depends on besides the files: the features (with f0 or not), duration limits,
    the text front end (language, phonemizer, lowercase, ...) and the metadata's encoding."""

    mel: MelSettings
    min_duration: float
    max_duration: float
    text: TextSettings = field(default_factory=TextSettings)
    encoding: str | None = None
    version: int = CACHE_VERSION
    f0: F0Settings | None = None
    derived: tuple[tuple[str, str], ...] = ()  # (name, settings digest) of each derived feature, sorted
    limits: tuple[tuple[str, str], ...] = ()  # (name, settings digest) of each model's item limits, sorted
    text_column: str | None = None  # data.text_column: the transcript's column of the metadata

    def with_derived(self, features: Sequence[DerivedFeature]) -> IndexSettings:
        """These settings with ``features`` as the derived features (replacing any)."""
        return replace(self, derived=tuple(sorted((f.name, f.digest()) for f in features)))

    def with_limits(self, limits: Sequence[ItemLimits]) -> IndexSettings:
        """These settings with ``limits`` as the model's item limits (replacing any)."""
        return replace(self, limits=tuple(sorted((x.name, x.digest()) for x in limits)))

    @property
    def lowercase(self) -> bool:
        return self.text.lowercase

    @classmethod
    def from_data(cls, data: DataConfig, derived: Sequence[DerivedFeature] = ()) -> IndexSettings:
        f0 = F0Settings.from_data(data)
        settings = cls(
            MelSettings.from_data(data),
            data.min_duration,
            data.max_duration,
            TextSettings.from_data(data),
            data.encoding,
            f0=f0,
            text_column=data.text_column,
        )
        return settings.with_derived(derived)

    def to_dict(self) -> dict[str, Any]:
        """The flat JSON layout of an index's ``settings`` (the f0 keys only with f0, ``derived`` only with
        derived features, so that the indexes of data without them keep their names)."""
        return {
            "version": self.version,
            **self.mel.to_dict(),
            "min_duration": self.min_duration,
            "max_duration": self.max_duration,
            **self.text.to_dict(),
            "encoding": self.encoding,
            **(self.f0.to_dict() if self.f0 is not None else {}),
            **({"derived": dict(self.derived)} if self.derived else {}),
            **({"limits": dict(self.limits)} if self.limits else {}),
            **({"text_column": self.text_column} if self.text_column else {}),
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> IndexSettings:
        mel = MelSettings(**{f.name: raw[f.name] for f in fields(MelSettings)})
        text = TextSettings.from_dict(raw)
        f0 = None
        if raw.get("f0_method") is not None:
            f0 = F0Settings.from_dict(raw)
        derived = tuple(sorted((str(k), str(v)) for k, v in (raw.get("derived") or {}).items()))
        limits = tuple(sorted((str(k), str(v)) for k, v in (raw.get("limits") or {}).items()))
        return cls(
            mel,
            raw["min_duration"],
            raw["max_duration"],
            text,
            raw["encoding"],
            int(raw["version"]),
            f0,
            derived,
            limits,
            raw.get("text_column"),
        )

    def changes_from(self, other: IndexSettings) -> list[str]:
        """``key old -> new`` for every setting that differs from ``other``."""
        have, want = other.to_dict(), self.to_dict()
        return [f"{k} {have.get(k)!r} -> {v!r}" for k, v in want.items() if have.get(k) != v]

    def digest(self) -> str:
        """8 hex digits naming this settings variant's index file."""
        blob = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:8]


@dataclass
class CachedItem:
    """One prepared utterance: where its features are, its length and what it says."""

    id: str
    path: str  # the audio file (absolute)
    key: str  # mel key
    audio_key: str
    frames: int  # mel frames
    samples: int  # stored audio samples (frames * hop_length)
    text: str  # as listed
    symbols: str  # what the text front end made of it (normalised text or phonemes): one symbol per character
    unmapped: str  # characters the front end removed because they cannot stand for speech
    speaker: str | None
    label: str | None
    orig_sr: int  # the file's own sample rate
    channels: int  # the file's channels (downmixed to mono)
    f0_key: str | None = None  # cached f0 (T_frames,), with data.f0_method
    derived: dict[str, str] = field(default_factory=dict)  # derived feature name -> its key
    shapes: dict[str, list[int]] = field(default_factory=dict)  # derived feature name -> its array's shape
    reading: str = ""  # why the phonemizer's reading is suspect, one reason a line (the text report lists them)

    def feature_keys(self) -> list[str]:
        """Every feature file key of this item (mel, audio, f0, derived)."""
        return [k for k in (self.key, self.audio_key, self.f0_key, *self.derived.values()) if k is not None]

    def to_json(self) -> dict[str, Any]:
        return {f.name: dict(v) if isinstance(v := getattr(self, f.name), dict) else v for f in fields(self)}

    def text_item(self) -> TextItem:
        return TextItem(self.id, self.symbols, self.unmapped, self.text, self.reading)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> CachedItem:
        return cls(
            id=str(raw["id"]),
            path=str(raw["path"]),
            key=str(raw["key"]),
            audio_key=str(raw["audio_key"]),
            frames=int(raw["frames"]),
            samples=int(raw["samples"]),
            text=str(raw["text"]),
            symbols=str(raw["symbols"]),
            unmapped=str(raw["unmapped"]),
            speaker=None if raw["speaker"] is None else str(raw["speaker"]),
            label=None if raw["label"] is None else str(raw["label"]),
            orig_sr=int(raw["orig_sr"]),
            channels=int(raw["channels"]),
            f0_key=None if raw.get("f0_key") is None else str(raw["f0_key"]),
            derived={str(k): str(v) for k, v in (raw.get("derived") or {}).items()},
            shapes={str(k): [int(n) for n in v] for k, v in (raw.get("shapes") or {}).items()},
            reading=str(raw.get("reading") or ""),
        )

    def expected_shapes(self, n_mels: int) -> dict[str, tuple[int, ...] | None]:
        """Field -> the shape its cache file must have (None: not recorded, any shape)."""
        out: dict[str, tuple[int, ...] | None] = {"mel": (n_mels, self.frames), "audio": (self.samples,)}
        if self.f0_key is not None:
            out["f0"] = (self.frames,)
        for name in self.derived:
            shape = self.shapes.get(name)
            out[name] = tuple(shape) if shape is not None else None
        return out


@dataclass
class CacheIndex:
    """What ``prepare`` wrote for one manifest and settings variant (one JSON file)."""

    settings: IndexSettings
    role: Role
    manifest: str  # absolute path
    format: str
    manifest_sig: ManifestSignature
    items: list[CachedItem] = field(default_factory=list)
    speakers: list[str] = field(default_factory=list)  # sorted names (of the training data for an eval index)
    labels: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    probes: dict[str, Probe] = field(default_factory=dict)  # audio path -> header probe
    symbols: list[str] = field(default_factory=list)  # learned from the items' transcripts, sorted

    def to_json(self) -> dict[str, Any]:
        return {
            "settings": self.settings.to_dict(),
            "symbols": list(self.symbols),
            "role": str(self.role),
            "manifest": self.manifest,
            "format": self.format,
            "manifest_sig": self.manifest_sig,
            "speakers": list(self.speakers),
            "labels": list(self.labels),
            "items": [it.to_json() for it in self.items],
            "problems": [p.to_dict() for p in self.problems],
            "probes": {path: probe.to_json() for path, probe in self.probes.items()},
        }

    @classmethod
    def from_json(cls, raw: Any) -> CacheIndex:
        """Parse the JSON layout; raises KeyError/TypeError/ValueError on anything else."""
        if not isinstance(raw, dict) or not isinstance(raw.get("settings"), dict):
            raise ValueError("not a cache index")
        if raw["settings"].get("version") != CACHE_VERSION:
            raise ValueError(
                f"cache version {raw['settings'].get('version')!r}, this speechtrain writes {CACHE_VERSION}"
            )
        return cls(
            settings=IndexSettings.from_dict(raw["settings"]),
            role=Role(raw["role"]),
            manifest=str(raw["manifest"]),
            format=str(raw["format"]),
            manifest_sig=raw["manifest_sig"],
            items=[CachedItem.from_json(it) for it in raw["items"]],
            speakers=[str(s) for s in raw["speakers"]],
            labels=[str(s) for s in raw["labels"]],
            problems=[Problem(**p) for p in raw.get("problems", [])],
            probes={str(path): Probe.from_json(rec) for path, rec in raw.get("probes", {}).items()},
            symbols=[str(s) for s in raw["symbols"]],
        )

    @classmethod
    def read(cls, path: Path) -> CacheIndex | None:
        """The index at ``path``, or None when missing, unreadable, from another cache version or
        damaged (each of which ``prepare`` treats as missing and rebuilds)."""
        try:
            return cls.from_json(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def write(self, path: Path) -> None:
        """Write atomically (a reader never sees half a file); a failed write (a full disk) is a one-line
        :class:`DataError` and leaves the previous index as it was."""
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as fh:
                fh.write(json.dumps(self.to_json(), separators=(",", ":")).encode())
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise not_written(path, exc) from None

    def feature_keys(self) -> set[str]:
        """Every mel, audio, f0 and derived key the index refers to."""
        return {k for it in self.items for k in it.feature_keys()}


@dataclass
class SplitItems:
    """The items of one split with the training data's speaker and label names."""

    items: list[CachedItem]
    speakers: list[str]
    labels: list[str]
    symbols: list[str] = field(default_factory=list)  # learned from the training transcripts


def not_written(path: Path, exc: OSError) -> DataError:
    """The one-line error for a cache file that could not be written (a full disk, a read-only folder)."""
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
    why = f"the disk is full ({os.strerror(exc.errno or 0)})" if full else (exc.strerror or str(exc))
    return DataError(
        f"could not write {path}: {why}; {free_space(path)} free there. Free some space, or point data.cache_dir at "
        "a larger disk, and run prepare again (what was computed so far is reused)"
    )


def load_feature(path: Path, shape: tuple[int, ...] | None, item_id: str) -> np.ndarray:
    """A cache file, memory-mapped and checked: readable to its end and of ``shape`` (None: any). A damaged
    file (truncated, rewritten with another shape) is a one-line :class:`DataError` with the fix."""
    fix = "run `speechtrain prepare --repair` with the same config and data.* overrides (it recomputes damaged files)"
    try:
        array = np.load(path, mmap_mode="r")
    except FileNotFoundError:
        raise DataError(f"feature cache file {path} of '{item_id}' is missing (deleted after prepare): {fix}") from None
    except (ValueError, OSError, EOFError) as exc:
        first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise DataError(
            f"feature cache file {path} of '{item_id}' is damaged (truncated or corrupt: {first.strip()}): {fix}"
        ) from None
    if shape is not None and tuple(array.shape) != tuple(shape):
        raise DataError(
            f"feature cache file {path} of '{item_id}' is damaged: shape {tuple(array.shape)} where the index says "
            f"{tuple(shape)}: {fix}"
        )
    return array


def damaged_files(root: Path, item: CachedItem, n_mels: int) -> list[Path]:
    """The feature files of ``item`` that are there but do not read as the index says (see
    :func:`load_feature`); what ``prepare --repair`` deletes so that they are computed again."""
    paths = {"mel": mel_path(root, item.key), "audio": audio_path(root, item.audio_key)}
    if item.f0_key is not None:
        paths["f0"] = f0_path(root, item.f0_key)
    for name, key in item.derived.items():
        paths[name] = derived_path(root, key, name)
    bad = []
    for name, shape in item.expected_shapes(n_mels).items():
        if name in paths and paths[name].is_file():
            try:
                load_feature(paths[name], shape, item.id)
            except DataError:
                bad.append(paths[name])
    return bad


def _digest(obj: Any) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:24]


def feature_keys(audio_path: str, sig: list[int] | None, mel: MelSettings) -> tuple[str, str]:
    """``(mel_key, audio_key)`` of one file: the mel key hashes every feature setting, the audio key
    only ``sample_rate`` and ``hop_length``, so an n_mels/n_fft/fmax change reuses the stored audio."""
    settings = mel.to_dict()
    mel_key = _digest([FEATURE_VERSION, "mel", audio_path, sig, settings])
    audio_key = _digest([FEATURE_VERSION, "audio", audio_path, sig, {k: settings[k] for k in AUDIO_KEYS}])
    return mel_key, audio_key


def f0_key(audio_path: str, sig: list[int] | None, mel: MelSettings, f0: F0Settings) -> str:
    """The f0 key of one file: the audio key's facts (sample_rate, hop_length) and the f0 settings."""
    settings = mel.to_dict()
    return _digest([CACHE_VERSION, "f0", audio_path, sig, {k: settings[k] for k in AUDIO_KEYS}, f0.to_dict()])


def derived_key(audio_key: str, feature: DerivedFeature) -> str:
    """The key of a derived feature of one file: its audio key (the stored audio the feature is computed
    from) and the feature's settings digest."""
    return _digest([FEATURE_VERSION, "derived", feature.name, audio_key, feature.digest()])


def derived_path(root: Path, key: str, name: str) -> Path:
    """The array of derived feature ``name`` under its key."""
    return root / "features" / key[:2] / f"{key}.{name}.npy"


def f0_path(root: Path, key: str) -> Path:
    """float32 (T_frames,) f0 in Hz (0 = unvoiced) of an f0 key."""
    return root / "features" / key[:2] / f"{key}.f0.npy"


def mel_path(root: Path, key: str) -> Path:
    """float32 (n_mels, T_frames) log-mel of a mel key."""
    return root / "features" / key[:2] / f"{key}.mel.npy"


def audio_path(root: Path, key: str) -> Path:
    """int16 (T_frames * hop_length,) audio of an audio key."""
    return root / "features" / key[:2] / f"{key}.audio.npy"


def read_audio(root: Path, key: str) -> np.ndarray:
    """float32 (T_frames * hop_length,) audio of an audio key, as every reader sees it (``pcm / 32767``): the
    dataset's ``audio`` and what derived features are computed from are the same numbers."""
    pcm = np.load(audio_path(root, key), mmap_mode="r")  # int16 (T_frames * hop,)
    return pcm.astype(np.float32) / np.float32(32767.0)


def held_out_ids(ids: Sequence[str], eval_utterances: int) -> set[str]:
    """The ids held out for evaluation: the ``eval_utterances`` smallest by a stable hash of the id
    (independent of listing order). Capped at a fifth of the items (at least one when there are two
    or more) so that a small corpus keeps most of its items for training."""
    k = min(eval_utterances, max(1, len(ids) // 5) if len(ids) >= 2 else 0)
    ranked = sorted(ids, key=lambda i: hashlib.sha1(i.encode()).hexdigest())
    return set(ranked[:k])


class FeatureStore:
    """The feature cache of one data section: where it is, what is fresh, how the data splits.

    Build it with :meth:`from_data` (a :class:`speechtrain.config.DataConfig`) or with explicit values.
    ``eval_utterances`` is used only without an ``eval_manifest``.
    """

    def __init__(
        self,
        manifest: str,
        settings: IndexSettings,
        *,
        eval_manifest: str | None = None,
        format: str = "auto",
        cache_dir: str | None = None,
        eval_utterances: int = 16,
        derived: Sequence[DerivedFeature] = (),
        limits: Sequence[ItemLimits] = (),
    ) -> None:
        self.manifest, self.eval_manifest, self.format = str(manifest), eval_manifest, format
        self.derived = tuple(derived)
        self.limits = tuple(limits)
        self.settings = settings.with_derived(self.derived) if self.derived else settings
        self.settings = self.settings.with_limits(self.limits) if self.limits else self.settings
        self.eval_utterances = int(eval_utterances)
        self.root = Path(cache_dir).absolute() if cache_dir else data_folder(manifest) / ".speechtrain_cache"
        self._refs: list[ManifestRef] | None = None

    @classmethod
    def from_data(
        cls, data: DataConfig, derived: Sequence[DerivedFeature] = (), limits: Sequence[ItemLimits] = ()
    ) -> FeatureStore:
        """The store of ``data.manifest`` (and ``data.eval_manifest``) with ``data``'s settings, the model
        family's ``derived`` features (:mod:`speechtrain.data.derived`) and item ``limits``
        (:mod:`speechtrain.data.limits`)."""
        if not data.manifest:
            raise DataError("data.manifest is not set (speechtrain prepare DATA, or data.manifest=PATH)")
        return cls(
            data.manifest,
            IndexSettings.from_data(data),
            eval_manifest=data.eval_manifest,
            format=data.format,
            cache_dir=data.cache_dir,
            eval_utterances=data.eval_utterances,
            derived=derived,
            limits=limits,
        )

    @property
    def mel(self) -> MelSettings:
        return self.settings.mel

    # ------------------------------------------------------------------ manifests and index files
    def manifests(self) -> list[ManifestRef]:
        """The training manifest, and the evaluation manifest when there is one: ``eval_manifest``, else
        the eval file the layout's folder brings (XTTS ``eval.csv``, Common Voice ``dev.tsv``)."""
        if self._refs is None:
            encoding = self.settings.encoding
            fmt = resolve_format(self.manifest, self.format, encoding)
            refs = [ManifestRef(Role.TRAIN, self.manifest, fmt)]
            if self.eval_manifest:
                eval_fmt = resolve_format(self.eval_manifest, self.format, encoding)
                refs.append(ManifestRef(Role.EVAL, self.eval_manifest, eval_fmt))
            else:
                paired = paired_eval_file(self.manifest, fmt)
                if paired is not None:
                    refs.append(ManifestRef(Role.EVAL, str(paired), fmt))
            self._refs = refs
        return list(self._refs)

    @property
    def separate_eval(self) -> bool:
        """Whether the eval split is a manifest of its own (else items held out of the training one)."""
        return any(ref.role == Role.EVAL for ref in self.manifests())

    def manifest_dir(self, manifest: str) -> Path:
        """The cache folder of one manifest (holds one index per settings variant)."""
        resolved = str(Path(manifest).resolve())
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(resolved).name or "data")[:40]
        return self.root / f"{stem}-{hashlib.sha1(resolved.encode()).hexdigest()[:8]}"

    def index_path(self, manifest: str) -> Path:
        """Where the index of ``manifest`` for the current settings lives. Each settings variant has its
        own index, so switching between configs does not rebuild (or delete) the other's features."""
        return self.manifest_dir(manifest) / f"index-{self.settings.digest()}.json"

    def read_index(self, ref: ManifestRef) -> CacheIndex | None:
        """The index of ``ref`` for the current settings (None: missing or unreadable)."""
        return CacheIndex.read(self.index_path(ref.path))

    def latest_index(self, ref: ManifestRef) -> CacheIndex | None:
        """The index for the current settings, else the most recently written variant (for reuse/diffs)."""
        current = self.read_index(ref)
        if current is not None:
            return current
        for path in self._variants(ref.path):
            index = CacheIndex.read(path)
            if index is not None:
                return index
        return None

    def write_index(self, ref: ManifestRef, index: CacheIndex) -> None:
        """Write the current variant's index of ``ref`` and drop the oldest variants beyond the kept few."""
        index.write(self.index_path(ref.path))
        for path in self._variants(ref.path)[KEEP_VARIANTS:]:
            with contextlib.suppress(OSError):
                path.unlink()

    def _variants(self, manifest: str) -> list[Path]:
        return sorted(self.manifest_dir(manifest).glob("index-*.json"), key=_mtime, reverse=True)

    # ------------------------------------------------------------------ feature files
    def feature_keys(self, audio_file: str, sig: list[int] | None) -> tuple[str, str]:
        return feature_keys(audio_file, sig, self.mel)

    def f0_key(self, audio_file: str, sig: list[int] | None) -> str | None:
        """The f0 key of a file, None when the data has no f0 (``data.f0_method`` unset)."""
        return f0_key(audio_file, sig, self.mel, self.settings.f0) if self.settings.f0 is not None else None

    def mel_path(self, key: str) -> Path:
        return mel_path(self.root, key)

    def f0_path(self, key: str) -> Path:
        return f0_path(self.root, key)

    def audio_path(self, key: str) -> Path:
        return audio_path(self.root, key)

    def derived_keys(self, audio_key: str) -> dict[str, str]:
        """Derived feature name -> key of a file (by its audio key)."""
        return {f.name: derived_key(audio_key, f) for f in self.derived}

    def derived_path(self, key: str, name: str) -> Path:
        return derived_path(self.root, key, name)

    def has_features(self, mel_key: str, audio_key: str, f0_key: str | None = None) -> bool:
        """Whether the mel, audio (and f0) files of an item are there (not its derived features)."""
        have = self.mel_path(mel_key).is_file() and self.audio_path(audio_key).is_file()
        return have and (f0_key is None or self.f0_path(f0_key).is_file())

    def has_item(self, item: CachedItem) -> bool:
        """Whether every feature file of a prepared item is there, its derived features included."""
        have = self.has_features(item.key, item.audio_key, item.f0_key)
        return have and all(self.derived_path(k, name).is_file() for name, k in item.derived.items())

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Exclusive lock on the cache root while preparing (no-op where fcntl is missing). The holder writes
        its pid, host and command into the lock file; a second ``prepare`` says who holds it, waits at most
        :data:`LOCK_WAIT_SECONDS` and then gives up with a DataError naming the holder.

        The descriptor is not inherited by processes started meanwhile (``O_CLOEXEC``), and
        :func:`speechtrain.data.prepare` workers close their forked copy, so only this process holds it: it
        is released when this process ends, however it ends."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as exc:
            raise not_written(self.root / ".lock", exc) from None
        try:
            import fcntl
        except ImportError:  # Windows
            os.close(fd)
            yield
            return
        HELD_LOCK_FDS.add(fd)
        try:
            self._wait_for(fd, fcntl)
            info = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
            info["command"] = " ".join(["speechtrain", *sys.argv[1:]])[:300]
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps(info).encode(), 0)
            except OSError:
                pass  # the lock holds without its note (a full disk)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            HELD_LOCK_FDS.discard(fd)
            os.close(fd)

    def _wait_for(self, fd: int, fcntl: Any) -> None:
        """Take the lock on ``fd``: at once, else after saying who holds it, else a DataError after the wait."""
        start = time.monotonic()
        said = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            holder = _lock_note(self.root / ".lock")
            waited = time.monotonic() - start
            if waited >= LOCK_WAIT_SECONDS:
                raise DataError(
                    f"the feature cache {self.root} is locked by {holder}, which is preparing it; gave up after "
                    f"{waited:.0f} s. Wait for it to finish, or stop it (if that process is gone, its lock went "
                    "with it: run again)"
                )
            if not said:
                log.warning(f"waiting for the feature cache {self.root}: locked by {holder}")
                said = True
            time.sleep(min(1.0, max(0.05, LOCK_WAIT_SECONDS / 20)))

    def collect_garbage(self) -> int:
        """Delete feature files that no readable index under the root and no live reader lease refers to;
        returns how many."""
        keep: set[str] = set()
        for path in self.root.glob("*/index-*.json"):
            index = CacheIndex.read(path)
            if index is not None:
                keep |= index.feature_keys()
        keep |= live_lease_keys(self.root)
        removed = 0
        for f in (self.root / "features").glob("*/*.npy"):
            if f.name.split(".", 1)[0] not in keep:
                with contextlib.suppress(OSError):
                    f.unlink()
                    removed += 1
        return removed

    def lease(self, items: Sequence[CachedItem]) -> ReaderLease | None:
        """A reader lease on the feature files of ``items`` (None where ``fcntl`` is missing)."""
        return ReaderLease.take(self.root, {k for it in items for k in it.feature_keys()})

    # ------------------------------------------------------------------ the two shared rules
    def stale_reason(self, ref: ManifestRef, require_text: bool | None, index: CacheIndex | None = None) -> str | None:
        """Why the current index of ``ref`` cannot be used as is (None: fresh). ``index`` saves a
        second read when the caller has it already."""
        index = index if index is not None else self.read_index(ref)
        if index is None:
            other = self.latest_index(ref)
            changed = self.settings.changes_from(other.settings) if other is not None else []
            return "stale (settings changed: " + ", ".join(changed) + ")" if changed else "missing"
        if index.settings != self.settings:
            return "stale (settings changed)"
        if index.format != ref.format or index.manifest_sig != manifest_signature(ref.path, ref.format):
            return "stale (the manifest changed)"
        changed_files = [p for p, probe in index.probes.items() if file_signature(p) != probe.sig]
        if changed_files:
            return f"stale ({len(changed_files)} audio file(s) changed, e.g. {changed_files[0]})"
        for item in index.items:
            if not self.has_item(item):
                return f"incomplete (feature files of '{item.id}' are missing)"
        if require_text is True and any(not item.text for item in index.items):
            return "stale (it keeps items with empty text, and this task needs text)"
        if require_text is False and any(p.reason == "empty_text" for p in index.problems):
            return "stale (it skipped empty-text items; data.require_text is now false)"
        return None

    def status(self, require_text: bool | None) -> str | None:
        """None when every manifest's index is fresh, else ``manifest: why not``."""
        for ref in self.manifests():
            reason = self.stale_reason(ref, require_text)
            if reason is not None:
                return f"{ref.path}: {reason}"
        return None

    def split_items(self, split: Role, train: CacheIndex, eval_index: CacheIndex | None = None) -> SplitItems:
        """The items of ``split``: the eval manifest's for ``eval`` when there is one; otherwise the
        training manifest's, less (train) or only (eval) the ids held out by :func:`held_out_ids`."""
        if self.separate_eval:
            if split == Role.EVAL and eval_index is None:
                raise ValueError("the eval split of a separate eval manifest needs that manifest's index")
            items = list(eval_index.items if split == Role.EVAL and eval_index is not None else train.items)
        else:
            held = held_out_ids([it.id for it in train.items], self.eval_utterances)
            items = [it for it in train.items if (it.id in held) == (split == Role.EVAL)]
        return SplitItems(items, list(train.speakers), list(train.labels), list(train.symbols))

    def open_index(self, ref: ManifestRef, require_text: bool | None) -> CacheIndex:
        """The fresh index of ``ref``; DataError (with the command to run) when missing or stale."""
        index = self.read_index(ref)
        reason = self.stale_reason(ref, require_text, index)
        if reason is not None or index is None:
            raise DataError(
                f"feature cache for {ref.path} is {reason}; run `speechtrain prepare {ref.path}` "
                f"with the same --config and data.* overrides (cache: {self.root})"
            )
        refuse_cached_outside_roots(ref.path, [item.path for item in index.items])  # a fresh cache: no manifest read
        return index

    def open_split(self, split: Role | str, require_text: bool | None) -> SplitItems:
        """The items of ``split`` (``train`` or ``eval``) from fresh indexes (DataError when stale)."""
        try:
            role = Role(split)
        except ValueError:
            raise ValueError(f"split must be 'train' or 'eval', got {split!r}") from None
        refs = {ref.role: ref for ref in self.manifests()}
        train = self.open_index(refs[Role.TRAIN], require_text)
        eval_index = None
        if role == Role.EVAL and Role.EVAL in refs:
            eval_index = self.open_index(refs[Role.EVAL], require_text)
        return self.split_items(role, train, eval_index)


#: descriptors of cache locks this process holds (a forked prepare worker closes its copies: it must not keep the
#: lock alive once its parent is gone)
HELD_LOCK_FDS: set[int] = set()


def _lock_note(path: Path) -> str:
    """Who holds a cache lock, from the note in its file."""
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        info = {}
    if not isinstance(info, dict) or "pid" not in info:
        return "another process"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(info.get("started", 0))))
    return f"pid {info['pid']} on host {info.get('host', '?')} (`{info.get('command', '?')}`, since {since})"


class ReaderLease:
    """Held while a dataset reads ``keys``: ``<root>/leases/<pid>-<n>.keys``, one key a line, under an
    exclusive ``flock`` for the life of this object (dropped by the kernel if the process dies). Taken
    by renaming a locked temporary file into place, so garbage collection never sees it unlocked."""

    _count = 0

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self._pid = path, os.getpid()
        self._fd: int | None = fd

    @classmethod
    def take(cls, root: Path, keys: set[str]) -> ReaderLease | None:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            return None
        folder = root / "leases"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            cls._count += 1
            path = folder / f"{os.getpid()}-{cls._count}.keys"
            tmp = folder / f".{path.name}.tmp"
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError:
            return None  # a read-only cache: nothing can delete its files either
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, "".join(k + "\n" for k in sorted(keys)).encode())
            os.replace(tmp, path)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                tmp.unlink()
            return None
        return cls(path, fd)

    def release(self) -> None:
        """Give the lease back (only in the process that took it: forked loader workers inherit it). SIGINT and
        SIGTERM wait until it is given back: a KeyboardInterrupt between the unlink and the close (or before
        them) would leave the lease's file behind, or its descriptor open."""
        if self._fd is None or os.getpid() != self._pid:
            return
        fd, self._fd = self._fd, None
        with _signals_held():
            with contextlib.suppress(OSError):
                self.path.unlink()
            with contextlib.suppress(OSError):
                os.close(fd)

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # noqa: BLE001,S110 - interpreter shutdown: the kernel drops the lock anyway
            pass

    def __getstate__(self) -> dict[str, Any]:  # a spawned worker does not hold the lease; its parent does
        return {"path": self.path, "_fd": None, "_pid": -1}


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM held back (delivered when the block ends) in this thread, where the platform can."""
    held = {signal.SIGINT, signal.SIGTERM}
    try:
        before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    except (AttributeError, OSError, ValueError):  # pragma: no cover - Windows
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def live_lease_keys(root: Path) -> set[str]:
    """The keys of the live reader leases under ``root``; stale leases (their process gone) are removed."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return set()
    keys: set[str] = set()
    for path in (root / "leases").glob("*.keys"):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # held: a live reader
                keys |= set(path.read_text().split())
                continue
            with contextlib.suppress(OSError):
                path.unlink()  # nobody holds it: its process is gone
        finally:
            os.close(fd)
    return keys


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
