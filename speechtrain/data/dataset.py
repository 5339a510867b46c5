"""``SpeechDataset``: the prepared feature cache, memory-mapped, as a map-style dataset.

``SpeechDataset.from_config(cfg, split="train", fields=("mel", "audio", "tokens"))`` opens the
cache written by ``speechtrain prepare`` and fails with a DataError (and the command to run) when it
is missing or stale. ``ds[i]`` is a dict with ``id``, ``text``, ``speaker``, ``label`` and the
requested fields among ``mel`` float32 (n_mels, T_frames), ``audio`` float32 (T_frames * hop,) and
``tokens`` int64 (L,); only those arrays are read from disk.

Eval split: ``data.eval_manifest`` when set; otherwise ``data.eval_utterances`` items held out by a
stable hash of their id (see :func:`speechtrain.data.cache.held_out_ids`).
Speakers and labels: ``ds.speakers`` / ``ds.labels`` are the sorted names of the training data;
an item's ``speaker`` / ``label`` is the index into them, -1 when the item has none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from speechtrain.data import cache as C
from speechtrain.data.text import Tokenizer
from speechtrain.errors import DataError

FIELDS = ("mel", "audio", "tokens")


class SpeechDataset:
    """Utterances from the feature cache; see the module docstring."""

    def __init__(
        self,
        items: list[dict[str, Any]],
        root: Path,
        data_cfg: Any,
        speakers: list[str],
        labels: list[str],
        fields: tuple[str, ...] = FIELDS,
    ) -> None:
        unknown = [f for f in fields if f not in FIELDS]
        if unknown:
            raise ValueError(f"unknown dataset field(s) {unknown}; valid: {FIELDS} (id/text/speaker/label always)")
        self.fields = tuple(fields)
        self.root = root
        self.sample_rate = int(data_cfg.sample_rate)
        self.hop_length = int(data_cfg.hop_length)
        self.n_mels = int(data_cfg.n_mels)
        self.speakers = list(speakers)
        self.labels = list(labels)
        self.tokenizer = Tokenizer(lowercase=data_cfg.lowercase)
        self._items = items
        self.ids: list[str] = [it["id"] for it in items]
        self.frames = np.asarray([it["frames"] for it in items], dtype=np.int64)
        self.durations = self.frames.astype(np.float64) * self.hop_length / self.sample_rate
        self.token_lengths = np.asarray([len(it["tokens"]) for it in items], dtype=np.int64)
        self.texts: list[str] = [it["text"] for it in items]
        spk = {n: i for i, n in enumerate(self.speakers)}
        lab = {n: i for i, n in enumerate(self.labels)}
        self.speaker_ids = np.asarray([spk.get(it["speaker"], -1) for it in items], dtype=np.int64)
        self.label_ids = np.asarray([lab.get(it["label"], -1) for it in items], dtype=np.int64)

    @classmethod
    def from_config(cls, cfg: Any, split: str = "train", fields: tuple[str, ...] | list[str] = FIELDS) -> SpeechDataset:
        """Open the prepared cache for ``split`` (``train`` or ``eval``) of ``cfg.data``."""
        if split not in ("train", "eval"):
            raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
        d = getattr(cfg, "data", cfg)
        roles = dict(C.manifests(d))
        train_index = _open_index(d, roles["train"])
        if split == "eval" and "eval" in roles:
            items = _open_index(d, roles["eval"])["items"]
        else:
            items = train_index["items"]
            if "eval" not in roles:
                held = C.held_out_ids([it["id"] for it in items], d.eval_utterances)
                items = [it for it in items if (it["id"] in held) == (split == "eval")]
        return cls(items, C.cache_root(d), d, train_index["speakers"], train_index["labels"], tuple(fields))

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        it = self._items[i]
        out: dict[str, Any] = {
            "id": it["id"],
            "text": it["text"],
            "speaker": int(self.speaker_ids[i]),
            "label": int(self.label_ids[i]),
        }
        if "mel" in self.fields:
            mel = np.load(C.mel_path(self.root, it["key"]), mmap_mode="r")  # (n_mels, T_frames)
            out["mel"] = np.array(mel, dtype=np.float32)
        if "audio" in self.fields:
            pcm = np.load(C.audio_path(self.root, it["audio_key"]), mmap_mode="r")  # int16 (T_frames * hop,)
            out["audio"] = pcm.astype(np.float32) / np.float32(32767.0)
        if "tokens" in self.fields:
            out["tokens"] = np.asarray(it["tokens"], dtype=np.int64)  # (L,)
        return out

    def with_fields(self, fields: tuple[str, ...] | list[str]) -> SpeechDataset:
        """The same items, reading other fields."""
        return SpeechDataset(self._items, self.root, _Settings(self), self.speakers, self.labels, tuple(fields))

    def subset(self, indices: list[int] | np.ndarray) -> SpeechDataset:
        """A dataset of the items at ``indices`` (same names and fields)."""
        items = [self._items[int(i)] for i in indices]
        return SpeechDataset(items, self.root, _Settings(self), self.speakers, self.labels, self.fields)

    @property
    def total_seconds(self) -> float:
        """Total audio in seconds."""
        return float(self.durations.sum())

    def __repr__(self) -> str:
        return (
            f"SpeechDataset({len(self)} items, {self.total_seconds / 3600:.3f} h, fields={self.fields}, "
            f"sr={self.sample_rate}, hop={self.hop_length}, n_mels={self.n_mels})"
        )


class _Settings:
    def __init__(self, ds: SpeechDataset) -> None:
        self.sample_rate, self.hop_length, self.n_mels = ds.sample_rate, ds.hop_length, ds.n_mels
        self.lowercase = ds.tokenizer.lowercase


def _open_index(d: Any, manifest: str) -> dict[str, Any]:
    fmt = C.resolve_format(manifest, d.format)
    index = C.read_index(C.index_path(d, manifest))
    reason = C.stale_reason(index, d, manifest, fmt, d.require_text)
    if reason is not None:
        raise DataError(
            f"feature cache for {manifest} is {reason}; run `speechtrain prepare {manifest}` "
            f"with the same --config and data.* overrides (cache: {C.cache_root(d)})"
        )
    assert index is not None
    return index
