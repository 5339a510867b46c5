"""XTTS's mel spectrograms, written with torch only (Coqui uses torchaudio's ``MelSpectrogram``).

Same maths as ``torchaudio.transforms.MelSpectrogram`` with the settings XTTS uses: a centred STFT
(reflect padding of ``n_fft // 2``, so ``frames = samples // hop + 1``), a periodic window zero-padded to
``n_fft`` when shorter, the power spectrum, HTK-scale triangular filters (optionally Slaney area-normalised).
XTTS then takes ``log(clamp(mel, 1e-5))`` and divides each band by ``mel_stats`` (the checkpoint's
``mel_stats.pth``). Two instances matter:

- the DVAE mel: ``n_fft=1024, hop=256, win=1024`` (one code per 4 frames = 1024 samples);
- the conditioning (style) mel of the perceiver path: ``n_fft=2048, hop=256, win=1024``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

#: what XTTS's mels share: 0-8000 Hz, Slaney-normalised HTK filters, log floor 1e-5 (the DVAE codes' cache key)
MEL_F_MAX, MEL_NORM, LOG_FLOOR = 8000.0, "slaney", 1e-5
#: the STFT of the mel the DVAE reads (Coqui's ``TorchMelSpectrogram`` defaults)
DVAE_STFT = {"n_fft": 1024, "hop_length": 256, "win_length": 1024}


def _hz_to_mel_htk(freq: float) -> float:
    return 2595.0 * math.log10(1.0 + freq / 700.0)


def mel_filters(
    n_freqs: int,
    f_min: float,
    f_max: float,
    n_mels: int,
    sample_rate: int,
    norm: str | None = None,
) -> torch.Tensor:
    """HTK-scale triangular filters ``(n_freqs, n_mels)`` as torchaudio's ``melscale_fbanks`` computes them
    (float32; ``norm="slaney"`` divides each filter by its bandwidth)."""
    all_freqs = torch.linspace(0, sample_rate // 2, n_freqs)
    m_pts = torch.linspace(_hz_to_mel_htk(f_min), _hz_to_mel_htk(f_max), n_mels + 2)
    f_pts = 700.0 * (10 ** (m_pts / 2595.0) - 1.0)
    f_diff = f_pts[1:] - f_pts[:-1]  # (n_mels + 1,)
    slopes = f_pts.unsqueeze(0) - all_freqs.unsqueeze(1)  # (n_freqs, n_mels + 2)
    down = (-1.0 * slopes[:, :-2]) / f_diff[:-1]
    up = slopes[:, 2:] / f_diff[1:]
    fb = torch.max(torch.zeros(1), torch.min(down, up))
    if norm == "slaney":
        enorm = 2.0 / (f_pts[2 : n_mels + 2] - f_pts[:n_mels])
        fb *= enorm.unsqueeze(0)
    return fb


class _Window(nn.Module):
    """Holds the STFT window as ``window`` (the layout of torchaudio's ``Spectrogram``)."""

    window: torch.Tensor

    def __init__(self, value: torch.Tensor, persistent: bool) -> None:
        super().__init__()
        self.register_buffer("window", value, persistent=persistent)


class _Filters(nn.Module):
    """Holds the mel filterbank as ``fb`` (the layout of torchaudio's ``MelScale``)."""

    fb: torch.Tensor

    def __init__(self, value: torch.Tensor, persistent: bool) -> None:
        super().__init__()
        self.register_buffer("fb", value, persistent=persistent)


class MelSpectrogram(nn.Module):
    """Power mel spectrogram: (B, T_samples) or (B, 1, T_samples) -> (B, n_mels, T_samples // hop + 1).

    Buffers ``spectrogram.window`` and ``mel_scale.fb``, torchaudio's names (persistent when ``persistent``:
    the speaker encoder's state dict holds them)."""

    def __init__(
        self,
        sample_rate: int,
        n_fft: int,
        hop_length: int,
        win_length: int,
        n_mels: int,
        f_min: float = 0.0,
        f_max: float | None = None,
        norm: str | None = None,
        window_fn: Callable[[int], torch.Tensor] = torch.hann_window,
        persistent: bool = False,
    ) -> None:
        super().__init__()
        self.n_fft, self.hop_length, self.win_length, self.n_mels = n_fft, hop_length, win_length, n_mels
        f_max = float(sample_rate // 2) if f_max is None else f_max
        self.spectrogram = _Window(window_fn(win_length), persistent)
        fb = mel_filters(n_fft // 2 + 1, f_min, f_max, n_mels, sample_rate, norm)
        self.mel_scale = _Filters(fb, persistent)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        if audio.dim() == 3:
            audio = audio.squeeze(1)
        spec = torch.stft(
            audio.float(),
            self.n_fft,
            hop_length=self.hop_length,
            win_length=self.win_length,
            window=self.spectrogram.window.float(),
            center=True,
            pad_mode="reflect",
            normalized=False,
            onesided=True,
            return_complex=True,
        )  # (B, n_fft // 2 + 1, T_frames)
        power = spec.abs().pow(2.0)
        return torch.matmul(power.transpose(-1, -2), self.mel_scale.fb.float()).transpose(-1, -2)  # (B, n_mels, T)


class XttsMel(nn.Module):
    """Normalised log-mel of XTTS: ``log(clamp(mel, 1e-5)) / mel_stats`` -> (B, n_mels, T_frames).

    Runs in float32 with autocast off (the DVAE's codes must not depend on the training precision)."""

    def __init__(
        self, n_fft: int, hop_length: int, win_length: int, n_mels: int = 80, sample_rate: int = 22050
    ) -> None:
        super().__init__()
        self.mel = MelSpectrogram(sample_rate, n_fft, hop_length, win_length, n_mels, 0.0, MEL_F_MAX, norm=MEL_NORM)

    def forward(self, audio: torch.Tensor, mel_stats: torch.Tensor) -> torch.Tensor:
        with torch.autocast(audio.device.type, enabled=False):
            mel = self.mel(audio.float())
            mel = torch.log(torch.clamp(mel, min=LOG_FLOOR))
            return mel / mel_stats.float()[None, :, None]


def dvae_mel(n_mels: int = 80, sample_rate: int = 22050) -> XttsMel:
    """The mel the DVAE reads (hop 256; Coqui's ``TorchMelSpectrogram`` defaults)."""
    return XttsMel(DVAE_STFT["n_fft"], DVAE_STFT["hop_length"], DVAE_STFT["win_length"], n_mels, sample_rate)


def dvae_mel_settings(n_mels: int = 80, sample_rate: int = 22050) -> dict[str, object]:
    """Every setting of the DVAE mel (a key of the cached DVAE codes: a change recomputes them)."""
    return {
        **DVAE_STFT,
        "n_mels": n_mels,
        "sample_rate": sample_rate,
        "f_min": 0.0,
        "f_max": MEL_F_MAX,
        "norm": MEL_NORM,
        "log_floor": LOG_FLOOR,
        "window": "hann",
        "center": True,
    }


def style_mel(n_mels: int = 80, sample_rate: int = 22050) -> XttsMel:
    """The conditioning mel of XTTS-v2's perceiver path (n_fft 2048, hop 256, win 1024)."""
    return XttsMel(2048, 256, 1024, n_mels, sample_rate)


class XttsMels(nn.Module):
    """The two mels XTTS computes from 22050 Hz audio: ``dvae`` (what the DVAE reads) and ``style`` (what the
    conditioning encoder reads). No state of its own: the filterbanks are rebuilt, the norms are passed in."""

    def __init__(self, n_mels: int = 80, sample_rate: int = 22050) -> None:
        super().__init__()
        self.dvae = dvae_mel(n_mels, sample_rate)
        self.style = style_mel(n_mels, sample_rate)

    def train(self, mode: bool = True) -> XttsMels:
        return super().train(False)
