"""Log-mel and linear spectrograms with torch only (no torchaudio), the same maths on the CPU
(feature cache) and on the device (on-device features, vocoder losses, VITS).

Frame convention: ``frames = n_samples // hop_length``. The signal is reflect-padded by
``(n_fft - hop_length) / 2`` on both sides and the STFT is not centred, so a crop of ``F`` frames
lines up with exactly ``F * hop_length`` samples (the HiFi-GAN convention).
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

if TYPE_CHECKING:
    from speechtrain.config import DataConfig


@dataclass(frozen=True)
class MelSettings:
    """The STFT and mel settings that define a log-mel (a change of any of them changes the features)."""

    sample_rate: int = 22050
    n_fft: int = 1024
    win_length: int = 1024
    hop_length: int = 256
    n_mels: int = 80
    fmin: float = 0.0
    fmax: float | None = 8000.0

    @classmethod
    def from_data(cls, data: DataConfig) -> MelSettings:
        """The settings of a :class:`speechtrain.config.DataConfig`."""
        return cls(data.sample_rate, data.n_fft, data.win_length, data.hop_length, data.n_mels, data.fmin, data.fmax)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (hashed into the feature-cache keys: keep the names)."""
        return asdict(self)


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    # Slaney scale: linear below 1 kHz, logarithmic above
    f = np.asarray(f, dtype=np.float64)
    f_sp = 200.0 / 3
    mels = f / f_sp
    min_log_hz, min_log_mel, logstep = 1000.0, 1000.0 / f_sp, math.log(6.4) / 27.0
    return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-10) / min_log_hz) / logstep, mels)


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    f_sp = 200.0 / 3
    freqs = f_sp * m
    min_log_hz, min_log_mel, logstep = 1000.0, 1000.0 / f_sp, math.log(6.4) / 27.0
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), freqs)


@functools.lru_cache(maxsize=16)
def _mel_scalar(hz: float) -> float:
    return float(_hz_to_mel(np.asarray(hz, dtype=np.float64)))


def mel_filterbank(sample_rate: int, n_fft: int, n_mels: int, fmin: float, fmax: float | None) -> np.ndarray:
    """Slaney-normalised triangular mel filters, shape (n_mels, n_fft // 2 + 1), float32."""
    fmax = fmax or sample_rate / 2
    fft_freqs = np.linspace(0, sample_rate / 2, n_fft // 2 + 1)
    mel_pts = _mel_to_hz(np.linspace(_mel_scalar(fmin), _mel_scalar(fmax), n_mels + 2))
    fdiff = np.diff(mel_pts)
    ramps = mel_pts[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_pts[2 : n_mels + 2] - mel_pts[:n_mels]))[:, None]
    return weights.astype(np.float32)


def num_frames(n_samples: int, hop_length: int) -> int:
    """Mel frames for a signal of ``n_samples`` samples."""
    return n_samples // hop_length


#: the epsilon under the magnitude's square root in HiFi-GAN's mel (jik876 ``mel_spectrogram``): a silent bin's
#: magnitude is sqrt(1e-9)
HIFIGAN_MAGNITUDE_EPS = 1e-9
#: VITS's (and Piper's) value (``spectrogram_torch``): sqrt(1e-6), so a silent mel bin reads higher than HiFi-GAN's
VITS_MAGNITUDE_EPS = 1e-6


class Spectrogram(nn.Module):
    """Magnitude spectrogram: (B, T_samples) or (B, 1, T_samples) -> (B, n_fft // 2 + 1, T_frames);
    ``eps`` is added under the square root (:data:`HIFIGAN_MAGNITUDE_EPS` or :data:`VITS_MAGNITUDE_EPS`)."""

    window: torch.Tensor

    def __init__(
        self, n_fft: int = 1024, win_length: int = 1024, hop_length: int = 256, eps: float = HIFIGAN_MAGNITUDE_EPS
    ) -> None:
        super().__init__()
        self.n_fft, self.win_length, self.hop_length, self.eps = n_fft, win_length, hop_length, eps
        self.register_buffer("window", torch.hann_window(win_length), persistent=False)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        if audio.dim() == 3:
            audio = audio.squeeze(1)
        n = audio.shape[-1]
        pad = (self.n_fft - self.hop_length) // 2
        mode = "reflect" if n > pad + self.hop_length else "constant"  # reflect needs a longer signal
        x = torch.nn.functional.pad(audio.float().unsqueeze(1), (pad, pad + self.hop_length), mode=mode).squeeze(1)
        spec = torch.stft(
            x,
            self.n_fft,
            hop_length=self.hop_length,
            win_length=self.win_length,
            window=self.window.to(x.device),
            center=False,
            return_complex=True,
        )  # (B, F, T_frames + 1)
        return torch.sqrt(spec.real.pow(2) + spec.imag.pow(2) + self.eps)[..., : num_frames(n, self.hop_length)]


class LogMel(nn.Module):
    """Log-mel spectrogram: (B, T_samples) or (B, 1, T_samples) -> (B, n_mels, T_frames), natural log."""

    fb: torch.Tensor

    def __init__(
        self,
        sample_rate: int = 22050,
        n_fft: int = 1024,
        win_length: int = 1024,
        hop_length: int = 256,
        n_mels: int = 80,
        fmin: float = 0.0,
        fmax: float | None = 8000.0,
        eps: float = HIFIGAN_MAGNITUDE_EPS,
    ) -> None:
        super().__init__()
        self.spec = Spectrogram(n_fft, win_length, hop_length, eps)
        self.hop_length = hop_length
        fb = torch.from_numpy(mel_filterbank(sample_rate, n_fft, n_mels, fmin, fmax))
        self.register_buffer("fb", fb, persistent=False)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        return self.from_magnitude(self.spec(audio))

    def from_magnitude(self, mag: torch.Tensor) -> torch.Tensor:
        """The log-mel of a magnitude spectrogram (B, n_fft // 2 + 1, T_frames) -> (B, n_mels, T_frames): VITS
        takes its target mel from the utterance's spectrogram this way."""
        mel = torch.matmul(self.fb.to(mag.device), mag)  # (B, n_mels, T_frames)
        return torch.log(torch.clamp(mel, min=1e-5))

    @classmethod
    def from_settings(cls, settings: MelSettings, eps: float = HIFIGAN_MAGNITUDE_EPS) -> LogMel:
        """Build from :class:`MelSettings`."""
        s = settings
        return cls(s.sample_rate, s.n_fft, s.win_length, s.hop_length, s.n_mels, s.fmin, s.fmax, eps)

    @classmethod
    def from_config(cls, data: DataConfig, eps: float = HIFIGAN_MAGNITUDE_EPS) -> LogMel:
        """Build from the mel settings of a :class:`speechtrain.config.DataConfig`."""
        return cls.from_settings(MelSettings.from_data(data), eps)


def log_mel_numpy(audio: np.ndarray, settings: MelSettings | DataConfig) -> np.ndarray:
    """Log-mel of one 1-D float signal on the CPU, (n_mels, T_frames) float32 (used by the cache).

    ``settings``: :class:`MelSettings`, or a DataConfig whose mel settings are used."""
    mel_settings = settings if isinstance(settings, MelSettings) else MelSettings.from_data(settings)
    module = _cached_logmel(mel_settings)
    with torch.no_grad():
        return module(torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32))[None])[0].numpy()


@functools.lru_cache(maxsize=4)
def _cached_logmel(settings: MelSettings) -> LogMel:
    return LogMel.from_settings(settings)
