"""Augmentations of vocoder crops: pitch shift (audio, mel and f0 shifted together) and volume.

SingingVocoders' ``key_aug``: a crop's audio is resampled as if played ``factor`` times faster
(``factor = 2^(semitones / 12)``), which moves every frequency (f0, its harmonics, the formants) up by
that factor; the mel is recomputed from the shifted audio and the f0 is the cached f0 read at the
matching source times and multiplied by the factor. The triple stays consistent, so a vocoder learns
pitches outside the singer's range without mel and f0 contradicting each other.

The crop is cut from ``ceil((crop + 2 margin) * factor)`` source frames at the planned offset, resampled
(soxr), and the ``margin`` frames on each side dropped, so that the recomputed mel frames see real audio
on both sides as the cached ones do. An item too short for the shifted window keeps its plain crop
(as SingingVocoders does). Which crops are shifted and by how much is drawn from the batch's key and
the loader seed, so a resumed run shifts the same crops by the same amounts.

Volume (:class:`VolumeAug`, SingingVocoders' ``volume_aug``): a crop's audio is multiplied by ``e^g`` and its
log-mel moved by ``g`` (the mel of the scaled audio away from the log floor), ``g`` uniform in
``[-3, min(3, -ln peak)]`` so that the louder crop never clips; drawn from the batch key and the seed likewise.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from speechtrain.data.collate import MEL_PAD, crop_item
from speechtrain.data.features import MelSettings, log_mel_numpy

if TYPE_CHECKING:
    from collections.abc import Sequence

    from speechtrain.config import DataConfig
    from speechtrain.data.planners import BatchKey


@dataclass(frozen=True)
class PitchShift:
    """Which crops to shift (``prob``), by how much (``semitones`` range, drawn uniformly), and the mel
    settings to recompute the mel with."""

    prob: float
    semitones: tuple[float, float]
    mel: MelSettings
    seed: int = 0
    f0_offset: float = 0.5  # where in its hop a cached f0 frame is measured (data.f0_frame_offset)

    @classmethod
    def from_data(cls, data: DataConfig, seed: int = 0) -> PitchShift | None:
        """The augmentation of a data section (None when ``data.pitch_shift_prob`` is 0)."""
        if data.pitch_shift_prob <= 0:
            return None
        lo, hi = data.pitch_shift_semitones
        mel = MelSettings.from_data(data)
        return cls(float(data.pitch_shift_prob), (float(lo), float(hi)), mel, int(seed), float(data.f0_frame_offset))

    @property
    def margin_frames(self) -> int:
        """Frames kept on each side of a shifted crop while its mel is recomputed (the STFT window's reach)."""
        return math.ceil((self.mel.n_fft - self.mel.hop_length) / (2 * self.mel.hop_length)) + 1

    def factors(self, key: BatchKey) -> list[float]:
        """Frequency factor per item of a planned batch (1.0: not shifted), drawn from the key and the seed."""
        words = [self.seed, *key.indices, *(key.offsets or ())]
        rng = np.random.default_rng([self.seed, zlib.crc32(np.asarray(words, dtype=np.int64).tobytes())])
        lo, hi = self.semitones
        shift = rng.random(len(key.indices)) < self.prob
        semis = rng.uniform(lo, hi, len(key.indices))
        return [float(2.0 ** (s / 12.0)) if on else 1.0 for on, s in zip(shift, semis)]

    def crop(self, item: dict[str, Any], offset: int, crop_frames: int, factor: float) -> dict[str, Any]:
        """The crop of ``item`` at ``offset``, shifted by ``factor`` (a plain crop when 1 or too short)."""
        hop = self.mel.hop_length
        if factor == 1.0 or "audio" not in item:
            return crop_item(item, offset, crop_frames, hop)
        shifted = shift_crop(item, offset, crop_frames, factor, self.mel, self.margin_frames, self.f0_offset)
        return shifted if shifted is not None else crop_item(item, offset, crop_frames, hop)


def shift_crop(
    item: dict[str, Any],
    offset: int,
    crop_frames: int,
    factor: float,
    mel: MelSettings,
    margin: int,
    f0_offset: float = 0.5,
) -> dict[str, Any] | None:
    """``crop_frames`` frames of ``item`` (``audio`` (T_samples,), optional ``mel`` (n_mels, T_frames) and
    ``f0`` (T_frames,), f0 frame ``i`` measured at ``(i + f0_offset) * hop``) with every frequency multiplied by
    ``factor``; None when the item is too short."""
    import soxr

    hop = mel.hop_length
    audio = np.asarray(item["audio"], dtype=np.float32).reshape(-1)  # (T_samples,)
    window = crop_frames + 2 * margin  # frames of shifted audio to make
    need = int(math.ceil(window * hop * factor)) + hop  # source samples they come from (+ a hop for rounding)
    if need > audio.shape[0]:
        return None
    start = min(offset * hop, audio.shape[0] - need)
    # played `factor` times faster: the segment read as sampled at sr * factor, brought back to sr
    out = soxr.resample(audio[start : start + need], mel.sample_rate * factor, mel.sample_rate)
    out = np.asarray(out, dtype=np.float32)[: window * hop]
    if out.shape[0] < window * hop:
        return None
    shifted = dict(item)
    shifted["audio"] = np.ascontiguousarray(out[margin * hop : (margin + crop_frames) * hop])  # (crop * hop,)
    if "mel" in item:
        full = log_mel_numpy(out, mel)  # (n_mels, window)
        shifted["mel"] = np.ascontiguousarray(full[:, margin : margin + crop_frames])
    if "f0" in item:
        # f0 frame j of the crop sits on shifted sample (margin + j + f0_offset) * hop, i.e. source sample
        # start + that * factor; cached f0 frame i sits on source sample (i + f0_offset) * hop
        centres = start + (margin + np.arange(crop_frames) + f0_offset) * hop * factor
        positions = centres / hop - f0_offset
        shifted["f0"] = (read_f0(np.asarray(item["f0"], np.float32), positions) * factor).astype(np.float32)
    return shifted


def read_f0(f0: np.ndarray, positions: Sequence[float] | np.ndarray) -> np.ndarray:
    """f0 (T_frames,) read at fractional frame ``positions``: log-linear between two voiced neighbours,
    else the nearest frame (0 stays unvoiced)."""
    pos = np.clip(np.asarray(positions, dtype=np.float64), 0, f0.shape[0] - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, f0.shape[0] - 1)
    w = pos - lo
    a, b = f0[lo].astype(np.float64), f0[hi].astype(np.float64)
    nearest = np.where(w < 0.5, a, b)
    both = (a > 0) & (b > 0)
    blended = np.exp2((1 - w) * np.log2(np.maximum(a, 1e-9)) + w * np.log2(np.maximum(b, 1e-9)))
    return np.where(both, blended, nearest)


@dataclass(frozen=True)
class VolumeAug:
    """Which crops change volume (``prob``) and by how much: a natural-log gain uniform in ``[low, min(high,
    -ln peak)]`` (SingingVocoders: -3 and 3)."""

    prob: float
    seed: int = 0
    low: float = -3.0
    high: float = 3.0

    @classmethod
    def from_data(cls, data: DataConfig, seed: int = 0) -> VolumeAug | None:
        """The augmentation of a data section (None when ``data.volume_aug_prob`` is 0)."""
        return cls(float(data.volume_aug_prob), int(seed)) if data.volume_aug_prob > 0 else None

    def draws(self, key: BatchKey) -> list[float | None]:
        """Per item of a planned batch: None (unchanged) or where in the gain range it goes (0..1)."""
        words = [self.seed, *key.indices, *(key.offsets or ())]
        salt = zlib.crc32(b"volume")  # a stream of its own beside the pitch shift's
        rng = np.random.default_rng([self.seed, zlib.crc32(np.asarray(words, dtype=np.int64).tobytes()), salt])
        on = rng.random(len(key.indices)) < self.prob
        where = rng.random(len(key.indices))
        return [float(w) if o else None for o, w in zip(on, where)]

    def gain(self, audio: np.ndarray, where: float) -> float:
        """The log gain at ``where`` (0..1) of the range allowed for ``audio`` (its peak stays below 1)."""
        peak = float(np.max(np.abs(audio))) + 1e-5 if audio.size else 1.0
        high = min(self.high, -math.log(peak))
        return self.low + where * (high - self.low)

    def apply(self, item: dict[str, Any], where: float | None) -> dict[str, Any]:
        """``item`` (a crop: ``audio`` (T_samples,), optional ``mel`` (n_mels, T_frames)) at its drawn volume."""
        if where is None or "audio" not in item:
            return item
        audio = np.asarray(item["audio"], dtype=np.float32)
        g = self.gain(audio, where)
        out = dict(item)
        out["audio"] = (audio * math.exp(g)).astype(np.float32)
        if "mel" in item:
            out["mel"] = np.maximum(np.asarray(item["mel"], dtype=np.float32) + g, MEL_PAD).astype(np.float32)
        return out
