"""The padded batch that flows from the collate function to a Task.

Standard keys (present when the data has them and the task asked for them):

- ``mel``      (B, n_mels, T_frames) float32, ``mel_lengths`` (B,) int64
- ``audio``    (B, 1, T_samples) float32, ``audio_lengths`` (B,) int64
- ``tokens``   (B, L_tokens) int64, ``token_lengths`` (B,) int64
- ``speakers`` (B,) int64, ``labels`` (B,) int64

``texts`` holds the items' transcripts (host-side strings) when the task asked for text, for families whose
own text front end reads them (the XTTS BPE); ``ids`` and ``texts`` follow the items through splits.

``mel``, ``audio`` and ``tokens`` are padded along their last axis (see :func:`length_key`). Lengths are also
kept on the host (``host_lengths``) so that counting frames and audio seconds never syncs with
the device.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

_LENGTH_KEYS = {"tokens": "token_lengths"}


def length_key(key: str) -> str:
    """The lengths companion of a padded tensor key (``mel`` -> ``mel_lengths``, ``tokens`` -> ``token_lengths``)."""
    return _LENGTH_KEYS.get(key, f"{key}_lengths")


def round_up(n: int, multiple: int) -> int:
    """Round ``n`` up to a multiple of ``multiple``."""
    return int(math.ceil(n / multiple) * multiple) if multiple > 1 else int(n)


@dataclass
class Batch:
    """A padded batch: tensors by name, utterance ids, and host-side bookkeeping."""

    tensors: dict[str, torch.Tensor]
    ids: list[str]
    hop_length: int
    sample_rate: int
    pad_multiple: int = 1
    bucket: int | None = None
    host_lengths: dict[str, list[int]] = field(default_factory=dict)
    texts: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for key, value in self.tensors.items():
            if key.endswith("_lengths") and key not in self.host_lengths:
                self.host_lengths[key] = [int(v) for v in value.cpu().tolist()]  # host-side at collate time

    # mapping-like access
    def __getitem__(self, key: str) -> torch.Tensor:
        return self.tensors[key]

    def __contains__(self, key: object) -> bool:
        return key in self.tensors

    def get(self, key: str, default: Any = None) -> Any:
        return self.tensors.get(key, default)

    def keys(self) -> Iterator[str]:
        return iter(self.tensors)

    @property
    def size(self) -> int:
        """Number of utterances."""
        return len(self.ids)

    @property
    def frame_lengths(self) -> list[int]:
        """Real mel frames per item (from mel_lengths, else audio_lengths / hop)."""
        if "mel_lengths" in self.host_lengths:
            return self.host_lengths["mel_lengths"]
        if "audio_lengths" in self.host_lengths:
            return [n // self.hop_length for n in self.host_lengths["audio_lengths"]]
        return [0] * self.size

    @property
    def padded_frames(self) -> int:
        """Frames counting padding: B x padded length (the batch's memory cost)."""
        if "mel" in self.tensors:
            return self.size * int(self.tensors["mel"].shape[-1])
        if "audio" in self.tensors:
            return self.size * int(self.tensors["audio"].shape[-1]) // self.hop_length
        return self.size * max(self.frame_lengths, default=0)

    @property
    def real_frames(self) -> int:
        return int(sum(self.frame_lengths))

    @property
    def padding_fraction(self) -> float:
        padded = self.padded_frames
        return 0.0 if padded == 0 else 1.0 - self.real_frames / padded

    @property
    def audio_seconds(self) -> float:
        """Seconds of real audio in the batch."""
        if "audio_lengths" in self.host_lengths:
            return sum(self.host_lengths["audio_lengths"]) / self.sample_rate
        return self.real_frames * self.hop_length / self.sample_rate

    def to(self, device: torch.device | str, non_blocking: bool = True) -> Batch:
        """Copy tensors to ``device`` (non-blocking from pinned memory)."""
        moved = {k: v.to(device, non_blocking=non_blocking) for k, v in self.tensors.items()}
        return Batch(
            moved,
            list(self.ids),
            self.hop_length,
            self.sample_rate,
            self.pad_multiple,
            self.bucket,
            {k: list(v) for k, v in self.host_lengths.items()},
            list(self.texts),
        )

    def pin_memory(self) -> Batch:
        """Called by DataLoader(pin_memory=True)."""
        self.tensors = {k: v.pin_memory() for k, v in self.tensors.items()}
        return self

    def select(self, index: Sequence[int]) -> Batch:
        """A sub-batch of the given items, re-trimmed to its own longest item."""
        index = list(index)
        idx = torch.tensor(index, dtype=torch.long)
        out: dict[str, torch.Tensor] = {}
        lengths = {k: [self.host_lengths[k][i] for i in index] for k in self.host_lengths}
        for key, value in self.tensors.items():
            sub = value.index_select(0, idx.to(value.device))
            len_key = length_key(key)
            if len_key in lengths and sub.dim() >= 2:
                keep = round_up(max(lengths[len_key], default=0), self._multiple_for(key))
                sub = sub[..., : min(keep, sub.shape[-1])]
            out[key] = sub
        return Batch(
            out,
            [self.ids[i] for i in index],
            self.hop_length,
            self.sample_rate,
            self.pad_multiple,
            self.bucket,
            lengths,
            [self.texts[i] for i in index] if self.texts else [],
        )

    def _multiple_for(self, key: str) -> int:
        # audio stays aligned with mel frames: its padded length is a multiple of hop x pad_multiple
        return self.pad_multiple * self.hop_length if key == "audio" else self.pad_multiple

    def split(self, parts: int = 2) -> list[Batch]:
        """Split into ``parts`` contiguous sub-batches of near-equal size (no item lost or repeated)."""
        parts = max(1, min(parts, self.size))
        bounds = [round(i * self.size / parts) for i in range(parts + 1)]
        return [self.select(range(bounds[i], bounds[i + 1])) for i in range(parts) if bounds[i + 1] > bounds[i]]

    def chunks(self, max_items: int) -> list[Batch]:
        """Contiguous sub-batches of at most ``max_items`` items."""
        if self.size <= max_items:
            return [self]
        return self.split(math.ceil(self.size / max_items))
