"""``SpeechDataset``: the prepared feature cache, memory-mapped, as a map-style dataset.

``SpeechDataset.from_config(data, split="train", fields=("mel", "audio", "tokens"))`` opens the
cache that ``speechtrain prepare`` wrote for a :class:`speechtrain.config.DataConfig` through its
:class:`~speechtrain.data.store.FeatureStore` (``SpeechDataset.from_store`` takes a store of your
own), and fails with a DataError (and the command to run) when it is missing or stale. ``ds[i]`` is
a dict with ``id``, ``text``, ``speaker``, ``label`` and the requested fields among ``mel`` float32
(n_mels, T_frames), ``audio`` float32 (T_frames * hop,), ``tokens`` int64 (L,) and ``f0`` float32
(T_frames,) Hz, 0 = unvoiced (prepared with ``data.f0_method``), and a model family's derived features by
name (XTTS: ``codes`` int16 (T_codes,), the DVAE codes; :mod:`speechtrain.data.derived`) when the store was
opened with them; only those arrays are read from disk.

Eval split: ``data.eval_manifest`` when set; otherwise ``data.eval_utterances`` items held out by a
stable hash of their id (:meth:`speechtrain.data.store.FeatureStore.split_items`, the one rule).
Tokens: ``ds.tokenizer`` maps the symbols ``prepare`` cached for each transcript to ids, with the
symbol set learned from the training transcripts (or ``data.symbols`` when pinned).
Speakers and labels: ``ds.speakers`` / ``ds.labels`` are the sorted names of the training data;
an item's ``speaker`` / ``label`` is the index into them, -1 when the item has none.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from speechtrain.data.derived import DerivedFeature
from speechtrain.data.features import MelSettings
from speechtrain.data.limits import ItemLimits
from speechtrain.data.store import (
    CachedItem,
    FeatureStore,
    ReaderLease,
    audio_path,
    derived_path,
    f0_path,
    load_feature,
    mel_path,
)
from speechtrain.data.text import Tokenizer
from speechtrain.errors import DataError

if TYPE_CHECKING:
    from speechtrain.config import DataConfig

FIELDS = ("mel", "audio", "tokens", "f0")
DEFAULT_FIELDS = ("mel", "audio", "tokens")


class SpeechDataset:
    """Utterances from the feature cache; see the module docstring."""

    def __init__(
        self,
        items: Sequence[CachedItem],
        root: Path,
        mel: MelSettings,
        *,
        speakers: Sequence[str] = (),
        labels: Sequence[str] = (),
        tokenizer: Tokenizer | None = None,
        fields: Sequence[str] = DEFAULT_FIELDS,
        derived: Sequence[str] = (),
    ) -> None:
        derived = sorted({*derived, *(name for it in items for name in it.derived)})  # names that may be fields
        unknown = [f for f in fields if f not in FIELDS and f not in derived]
        if unknown:
            valid = (*FIELDS, *derived)
            raise ValueError(f"unknown dataset field(s) {unknown}; valid: {valid} (id/text/speaker/label always)")
        missing = [f for f in fields if f in derived and any(f not in it.derived for it in items)]
        if missing:
            raise DataError(f"derived feature(s) {missing} were not prepared for every item; run `speechtrain prepare`")
        self.fields = tuple(fields)
        self.root = root
        self.mel_settings = mel
        self.sample_rate = int(mel.sample_rate)
        self.hop_length = int(mel.hop_length)
        self.n_mels = int(mel.n_mels)
        self.speakers = list(speakers)
        self.labels = list(labels)
        self.tokenizer = tokenizer if tokenizer is not None else Tokenizer()
        self._items = list(items)
        self.derived_names = tuple(derived)
        self.derived = tuple(f for f in self.fields if f in derived)  # the derived features read
        self._lease: ReaderLease | None = None  # held while this dataset (or a subset of it) is alive
        self.ids: list[str] = [it.id for it in self._items]
        self.frames = np.asarray([it.frames for it in self._items], dtype=np.int64)  # mel frames per item
        self.durations = self.frames.astype(np.float64) * self.hop_length / self.sample_rate
        self.token_lengths = np.asarray([len(it.symbols) for it in self._items], dtype=np.int64)
        self.texts: list[str] = [it.text for it in self._items]
        spk = {n: i for i, n in enumerate(self.speakers)}
        lab = {n: i for i, n in enumerate(self.labels)}
        self.speaker_ids = np.asarray(
            [spk.get(it.speaker, -1) if it.speaker is not None else -1 for it in self._items], dtype=np.int64
        )
        self.label_ids = np.asarray(
            [lab.get(it.label, -1) if it.label is not None else -1 for it in self._items], dtype=np.int64
        )
        if "f0" in self.fields and any(it.f0_key is None for it in self._items):
            raise DataError(
                "the task needs f0 but the feature cache has none: set data.f0_method (yin or parselmouth) and run "
                "`speechtrain prepare` again (only the f0 is computed; mel and audio are reused)"
            )

    @classmethod
    def from_store(
        cls,
        store: FeatureStore,
        split: str = "train",
        fields: Sequence[str] = DEFAULT_FIELDS,
        require_text: bool | None = None,
        symbols: Sequence[str] | str | None = None,
    ) -> SpeechDataset:
        """Open ``split`` (``train`` or ``eval``) of a prepared store (DataError when missing or stale).
        ``symbols``: a pinned symbol set (None: the symbols ``prepare`` learned from the training data)."""
        part = store.open_split(split, require_text)
        lease = store.lease(part.items)  # a prepare run meanwhile keeps these feature files
        gone = [it.id for it in part.items if not store.has_item(it)]
        if gone:  # removed between reading the index and taking the lease
            raise DataError(
                f"feature files of {len(gone)} item(s) (e.g. '{gone[0]}') were removed while the dataset was "
                f"opened: a `speechtrain prepare` ran on {store.root} at the same time; run again"
            )
        tokenizer = Tokenizer(symbols if symbols is not None else part.symbols, store.settings.text)
        ds = cls(
            part.items,
            store.root,
            store.mel,
            speakers=part.speakers,
            labels=part.labels,
            tokenizer=tokenizer,
            fields=fields,
            derived=[f.name for f in store.derived],
        )
        ds._lease = lease
        return ds

    @classmethod
    def from_config(
        cls,
        data: DataConfig,
        split: str = "train",
        fields: Sequence[str] = DEFAULT_FIELDS,
        derived: Sequence[DerivedFeature] = (),
        limits: Sequence[ItemLimits] = (),
    ) -> SpeechDataset:
        """Open the prepared cache for ``split`` (``train`` or ``eval``) of a data section; ``derived``: the
        model family's derived features it was prepared with (their names may then be ``fields``);
        ``limits``: the model's item limits it was prepared with."""
        if split not in ("train", "eval"):
            raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
        store = FeatureStore.from_data(data, derived, limits)
        return cls.from_store(store, split, fields, data.require_text, data.symbols)

    def release(self) -> None:
        """Give back the feature cache's reader lease now (else when the dataset and its subsets are collected);
        a ``prepare`` may then remove the files this dataset reads."""
        if self._lease is not None:
            self._lease.release()

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        it = self._items[i]
        out: dict[str, Any] = {
            "id": it.id,
            "text": it.text,
            "speaker": int(self.speaker_ids[i]),
            "label": int(self.label_ids[i]),
        }
        # every file checked against the index (readable to its end, its shape): a damaged one is a DataError
        if "mel" in self.fields:
            mel = load_feature(mel_path(self.root, it.key), (self.n_mels, it.frames), it.id)  # (n_mels, T_frames)
            out["mel"] = np.array(mel, dtype=np.float32)
        if "audio" in self.fields:
            pcm = load_feature(audio_path(self.root, it.audio_key), (it.samples,), it.id)  # int16 (T_frames * hop,)
            out["audio"] = pcm.astype(np.float32) / np.float32(32767.0)  # as read_audio: float32 (T_frames * hop,)
        if "tokens" in self.fields:
            out["tokens"] = np.asarray(self.tokenizer.encode_symbols(it.symbols), dtype=np.int64)  # (L,)
        if "f0" in self.fields:
            assert it.f0_key is not None  # checked in __init__
            f0 = load_feature(f0_path(self.root, it.f0_key), (it.frames,), it.id)  # (T_frames,)
            out["f0"] = np.array(f0, dtype=np.float32)
        for name in self.derived:
            shape = it.shapes.get(name)  # recorded by prepare (None in an index written before it did)
            path = derived_path(self.root, it.derived[name], name)
            out[name] = np.array(load_feature(path, tuple(shape) if shape is not None else None, it.id))  # (..., T)
        return out

    def _like(self, items: Sequence[CachedItem], fields: Sequence[str]) -> SpeechDataset:
        ds = SpeechDataset(
            items,
            self.root,
            self.mel_settings,
            speakers=self.speakers,
            labels=self.labels,
            tokenizer=self.tokenizer,
            fields=fields,
            derived=self.derived_names,
        )
        ds._lease = self._lease  # the subset reads the same files
        return ds

    def with_fields(self, fields: Sequence[str]) -> SpeechDataset:
        """The same items, reading other fields."""
        return self._like(self._items, fields)

    def subset(self, indices: Sequence[int] | np.ndarray) -> SpeechDataset:
        """A dataset of the items at ``indices`` (same names and fields)."""
        return self._like([self._items[int(i)] for i in indices], self.fields)

    @property
    def total_seconds(self) -> float:
        """Total audio in seconds."""
        return float(self.durations.sum())

    def __repr__(self) -> str:
        return (
            f"SpeechDataset({len(self)} items, {self.total_seconds / 3600:.3f} h, fields={self.fields}, "
            f"sr={self.sample_rate}, hop={self.hop_length}, n_mels={self.n_mels})"
        )
