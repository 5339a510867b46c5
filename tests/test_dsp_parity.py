"""The hand-written DSP against librosa (a test-only reference): mel filterbank, STFT magnitude,
log-mel and Griffin-Lim. Same settings, same numbers (within float32 rounding)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.peers import need

librosa = need("librosa")  # the test-time DSP reference (the peers extra)

from speechtrain.data.features import LogMel, Spectrogram, mel_filterbank  # noqa: E402
from speechtrain.models.audio import griffin_lim  # noqa: E402

SETTINGS = [  # (sample_rate, n_fft, win_length, hop_length, n_mels, fmin, fmax): HiFi-GAN/VITS, NSF 44.1k, 16 kHz
    (22050, 1024, 1024, 256, 80, 0.0, 8000.0),
    (22050, 1024, 1024, 256, 80, 0.0, None),
    (44100, 2048, 2048, 512, 128, 40.0, 16000.0),
    (16000, 512, 400, 160, 64, 20.0, 7600.0),
]


def _speech_like(sample_rate: int, seconds: float = 0.8, seed: int = 0) -> np.ndarray:
    """A voiced-like test signal: harmonics of a gliding f0 plus a little noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(sample_rate * seconds)) / sample_rate
    f0 = 120 + 60 * t / seconds
    phase = 2 * np.pi * np.cumsum(f0) / sample_rate
    y = sum(np.sin(k * phase) / k for k in range(1, 12)) * 0.2 + 0.01 * rng.standard_normal(t.size)
    return y.astype(np.float32)


@pytest.mark.parametrize("sr, n_fft, win, hop, n_mels, fmin, fmax", SETTINGS)
def test_mel_filterbank_equals_librosa_slaney(sr, n_fft, win, hop, n_mels, fmin, fmax) -> None:  # noqa: ANN001
    ours = mel_filterbank(sr, n_fft, n_mels, fmin, fmax)
    ref = librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels, fmin=fmin, fmax=fmax, htk=False, norm="slaney")
    assert ours.shape == ref.shape
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("sr, n_fft, win, hop, n_mels, fmin, fmax", SETTINGS)
def test_spectrogram_and_log_mel_equal_librosa(sr, n_fft, win, hop, n_mels, fmin, fmax) -> None:  # noqa: ANN001
    y = _speech_like(sr)
    frames = len(y) // hop
    # our convention: reflect-pad (n_fft - hop) / 2 on both sides, no centring, frames = samples // hop
    pad = (n_fft - hop) // 2
    padded = np.pad(y, (pad, pad + hop), mode="reflect")
    ref_mag = np.abs(librosa.stft(padded, n_fft=n_fft, hop_length=hop, win_length=win, window="hann", center=False))
    ref_mag = ref_mag[:, :frames]
    with torch.no_grad():
        mag = Spectrogram(n_fft, win, hop)(torch.from_numpy(y)[None])[0].numpy()
        log_mel = LogMel(sr, n_fft, win, hop, n_mels, fmin, fmax)(torch.from_numpy(y)[None])[0].numpy()
    assert mag.shape == ref_mag.shape == (n_fft // 2 + 1, frames)
    np.testing.assert_allclose(mag, ref_mag, rtol=1e-3, atol=2e-4)  # sqrt(x + 1e-9) floor in ours
    fb = librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels, fmin=fmin, fmax=fmax, norm="slaney")
    ref_log_mel = np.log(np.maximum(fb @ ref_mag, 1e-5))
    np.testing.assert_allclose(log_mel, ref_log_mel, atol=2e-3)


def test_griffin_lim_converges_like_librosa() -> None:
    """Both fast Griffin-Lims (momentum 0.99, 32 iterations, reflect-padded STFTs as torch pads) reach the
    same spectral convergence: medians over 4 random initial phases, ours no worse than librosa's + 15 %."""
    sr, n_fft, hop = 22050, 1024, 256
    y = _speech_like(sr, seconds=1.0)

    def stft_mag(audio: np.ndarray) -> np.ndarray:
        spec = librosa.stft(audio, n_fft=n_fft, hop_length=hop, window="hann", center=True, pad_mode="reflect")
        return np.abs(spec)

    mag = stft_mag(y)

    def convergence(audio: np.ndarray) -> float:
        rebuilt = stft_mag(audio)
        n = min(rebuilt.shape[1], mag.shape[1])
        return float(np.linalg.norm(mag[:, :n] - rebuilt[:, :n]) / np.linalg.norm(mag[:, :n]))

    ours, ref = [], []
    for seed in range(4):
        audio = griffin_lim(torch.from_numpy(mag), n_fft, hop, n_fft, iterations=32, seed=seed).numpy()
        assert len(audio) == mag.shape[1] * hop  # frames x hop samples, the crop convention
        ours.append(convergence(audio))
        kw = {"n_iter": 32, "hop_length": hop, "win_length": n_fft, "n_fft": n_fft, "momentum": 0.99}
        ref.append(convergence(librosa.griffinlim(mag, init="random", random_state=seed, pad_mode="reflect", **kw)))
    assert np.median(ref) < 0.2
    assert np.median(ours) <= 1.15 * np.median(ref), (ours, ref)
