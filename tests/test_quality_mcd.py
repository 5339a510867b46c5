"""MCD and MCD-DTW in the literature's units: against the reference implementation ``mel-cepstral-distance``
(Kubichek 1993; a test dependency, in the ``dev`` extra) on the same STFT, mel bands and coefficients within 10 %,
and 0 dB for a copy of the same audio at another gain (c0, the energy, is left out; the floor moves with the gain)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from speechtrain.config import DataConfig
from speechtrain.data.demo import synthesize_text
from speechtrain.data.features import log_mel_numpy
from speechtrain.quality import metrics as qm

RATE = 16000
#: 32 ms windows, 8 ms hop, 40 mel bands up to 8 kHz: settings both implementations can take exactly
SETTINGS = DataConfig(sample_rate=RATE, n_fft=512, win_length=512, hop_length=128, n_mels=40, fmax=8000.0)


def _speech(text: str, seed: int) -> np.ndarray:
    """A demo utterance at 16 kHz with white noise 50 dB below its peak: no digital silence, whose log (the
    reference floors at machine epsilon, we 60 dB below the peak) would decide the figure instead of the speech."""
    x = qm.resample(synthesize_text(text), 22050, RATE).astype(np.float64)
    x = x / np.abs(x).max()
    return (x + np.random.default_rng(seed).normal(0.0, 10 ** (-50 / 20), x.shape)).astype(np.float32)


def _mel(x: np.ndarray) -> np.ndarray:
    return log_mel_numpy(x, SETTINGS)


@pytest.fixture(scope="module")
def pairs() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    clean = _speech("the quick brown fox jumps over it", 1)
    noise = np.random.default_rng(2).normal(0.0, 1.0, clean.shape) * np.std(clean) / math.sqrt(10.0)
    return {
        "10 dB SNR copy": (clean, (clean + noise).astype(np.float32)),
        "another sentence": (clean, _speech("a lazy dog sleeps in the sun all day", 3)),
    }


def _reference(ref: np.ndarray, deg: np.ndarray, aligning: str, folder: Path) -> float:
    """mel-cepstral-distance's MCD of the pair on our settings (c1..c24 of 40 bands), in dB: it takes the cosine
    series of log10 band energies without 1/M and reports the plain Euclidean distance, so its figure times
    ``(20 / ln 10) * (ln 10 / 2) * sqrt(2) / M`` = ``5 sqrt(2) / M`` is the papers' ``10/ln10 sqrt(2 sum dc^2)``."""
    mcd_ref = pytest.importorskip("mel_cepstral_distance")
    a, b = folder / "a.wav", folder / "b.wav"
    sf.write(str(a), ref, RATE, subtype="FLOAT")
    sf.write(str(b), deg, RATE, subtype="FLOAT")
    value, _ = mcd_ref.compare_audio_files(
        a, b, sample_rate=RATE, n_fft=32, win_len=32, hop_len=8, M=40, fmax=8000, s=0, D=qm.MCD_COEFFS,
        norm_audio=False, aligning=aligning, align_target="mfcc",
    )  # fmt: skip
    return float(value) * 5.0 * math.sqrt(2.0) / 40


@pytest.mark.parametrize("name", ["10 dB SNR copy", "another sentence"])
def test_mcd_matches_the_reference_implementation(
    pairs: dict[str, tuple[np.ndarray, np.ndarray]], name: str, tmp_path: Path
) -> None:
    ref, deg = pairs[name]
    frame = qm.mcd(_mel(ref), _mel(deg))
    aligned = qm.mcd_dtw(_mel(ref), _mel(deg))
    assert frame == pytest.approx(_reference(ref, deg, "pad", tmp_path), rel=0.10)
    assert aligned == pytest.approx(_reference(ref, deg, "dtw", tmp_path), rel=0.10)
    assert 1.0 < aligned <= frame < 15.0  # the scale papers report (4-8 dB for TTS), not tens of dB


def test_mcd_of_a_copy_at_another_gain_is_zero(pairs: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    clean, _ = pairs["10 dB SNR copy"]
    for gain_db in (-3.0, 6.0):
        copy = clean * np.float32(10 ** (gain_db / 20))
        assert qm.mcd(_mel(clean), _mel(copy)) < 0.05
        assert qm.mcd_dtw(_mel(clean), _mel(copy)) < 0.05
