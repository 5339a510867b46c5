"""Synthetic data: in-memory fake datasets with the attributes of
:class:`speechtrain.data.dataset.SpeechDataset`, and LJSpeech-like duration distributions.

Used by ``bench --fake-data``, ``plan --synthetic`` and ``estimate`` (to set a task up without a
corpus), and shared with tests (``speechtrain.testing.datasets`` re-exports it) and users who want
to try the batching without audio on disk.
``FakeSpeechDataset`` derives the audio from the mel (every sample of frame ``t`` equals
``mel[0, t]``), so that a test can check that a crop of audio lines up with its crop of mel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def ljspeech_like_frames(
    n: int = 13100,
    seed: int = 0,
    sample_rate: int = 22050,
    hop_length: int = 256,
    mean_s: float = 6.5,
    sd_s: float = 2.2,
    min_s: float = 1.0,
    max_s: float = 10.1,
) -> np.ndarray:
    """Mel frames per utterance of an LJSpeech-like corpus: durations ~ N(6.5 s, 2.2 s) clipped to
    [1, 10.1] s, at ``sample_rate / hop_length`` frames per second (int64 array)."""
    rng = np.random.default_rng(seed)
    seconds = np.clip(rng.normal(mean_s, sd_s, n), min_s, max_s)
    return (seconds * sample_rate / hop_length).astype(np.int64)


class _CharTokenizer:
    """Stand-in tokenizer (``pad_id = 0``) used when speechtrain.data.text is not importable."""

    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3
    vocab_size = 64

    def encode(self, text: str) -> list[int]:
        return [4 + (ord(c) % 60) for c in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(chr(97 + (i - 4) % 26) for i in ids if i >= 4)


def _tokenizer() -> Any:
    try:
        from speechtrain.data.text import Tokenizer

        return Tokenizer()
    except Exception:  # the real tokenizer is optional here
        return _CharTokenizer()


class FakeSpeechDataset:
    """A SpeechDataset look-alike held in memory.

    ``ds[i]`` returns ``id``, ``mel`` (n_mels, T_frames) float32, ``audio`` (T_frames * hop,) float32
    with ``audio[t * hop + j] == mel[0, t]``, ``tokens`` int64, ``text``, ``speaker``, ``label``
    (only the requested ``fields`` among mel/audio/tokens; the rest are cheap and always there).
    Items are generated on access from ``(seed, i)``, so large fake corpora cost no memory.
    """

    def __init__(
        self,
        frames: Sequence[int] | np.ndarray,
        *,
        n_mels: int = 8,
        hop_length: int = 4,
        sample_rate: int = 400,
        seed: int = 0,
        fields: Sequence[str] = ("mel", "audio", "tokens"),
        num_speakers: int = 2,
        num_labels: int = 3,
        tokenizer: Any = None,
    ) -> None:
        """``tokenizer``: what makes ``tokens`` (default: the fixed ASCII character set); pass the run's
        (``Tokenizer.from_data``) where a task checks that its data uses its symbols."""
        self.frames = np.asarray(frames, dtype=np.int64)
        self.n_mels, self.hop_length, self.sample_rate, self.seed = n_mels, hop_length, sample_rate, seed
        self.fields = tuple(fields)
        self.ids = [f"utt{i:05d}" for i in range(self.frames.size)]
        self.durations = self.frames * hop_length / sample_rate
        self.speakers = [f"spk{i}" for i in range(num_speakers)]
        self.labels = [f"class{i}" for i in range(num_labels)]
        self.tokenizer = tokenizer if tokenizer is not None else _tokenizer()
        self.texts = [self.text(i) for i in range(self.frames.size)]
        self.token_lengths = np.asarray([len(self.tokenizer.encode(t)) for t in self.texts], dtype=np.int64)
        self.speaker_ids = np.arange(self.frames.size, dtype=np.int64) % num_speakers
        self.label_ids = np.arange(self.frames.size, dtype=np.int64) % num_labels
        self._options = dict(n_mels=n_mels, hop_length=hop_length, sample_rate=sample_rate, seed=seed)
        self._options.update(num_speakers=num_speakers, num_labels=num_labels, tokenizer=self.tokenizer)

    def __len__(self) -> int:
        return int(self.frames.size)

    def with_fields(self, fields: Sequence[str]) -> FakeSpeechDataset:
        """The same items, reading other fields."""
        return FakeSpeechDataset(self.frames, fields=fields, **self._options)

    @property
    def total_seconds(self) -> float:
        return float(self.durations.sum())

    def text(self, i: int) -> str:
        words = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog"]
        return " ".join(words[(i + k) % len(words)] for k in range(1 + int(self.frames[i]) % 5))

    def mel(self, i: int) -> np.ndarray:
        t = int(self.frames[i])
        rng = np.random.default_rng([self.seed, i])
        return rng.standard_normal((self.n_mels, t), dtype=np.float32) - 4.0  # (n_mels, T_frames)

    def __getitem__(self, i: int) -> dict[str, Any]:
        i = int(i)
        if not 0 <= i < len(self):
            raise IndexError(i)
        item: dict[str, Any] = {
            "id": self.ids[i],
            "text": self.text(i),
            "speaker": int(self.speaker_ids[i]),
            "label": int(self.label_ids[i]),
        }
        if "mel" in self.fields or "audio" in self.fields:
            mel = self.mel(i)
            if "mel" in self.fields:
                item["mel"] = mel
            if "audio" in self.fields:
                item["audio"] = np.repeat(mel[0], self.hop_length).astype(np.float32) * 0.01  # (T_frames * hop,)
        if "tokens" in self.fields:
            item["tokens"] = np.asarray(self.tokenizer.encode(item["text"]), dtype=np.int64)
        return item


def fake_dataset(
    n: int = 64, min_frames: int = 5, max_frames: int = 60, seed: int = 0, **kwargs: Any
) -> FakeSpeechDataset:
    """A small FakeSpeechDataset with uniformly random lengths in [min_frames, max_frames]."""
    rng = np.random.default_rng(seed)
    frames = rng.integers(min_frames, max_frames + 1, n)
    return FakeSpeechDataset(frames, seed=seed, **kwargs)
