"""f0 extraction: accuracy on tones of known f0, alignment with mel frames and crops, gap filling."""

from __future__ import annotations

import builtins

import numpy as np
import pytest
import torch

from speechtrain.data.demo_singing import bright_vowel, frame_f0, plan_singing_corpus, synthesize_phrase
from speechtrain.data.pitch import (
    extract_f0,
    f0_error,
    frame_centres,
    interpolate_unvoiced,
    parselmouth_f0,
    shift_f0,
    yin_f0,
)
from speechtrain.errors import UserError

SR, HOP = 22050, 256


def _tone(f0: np.ndarray, sr: int = SR, harmonics: int = 12) -> np.ndarray:
    phase = 2 * np.pi * np.cumsum(f0) / sr
    wave = sum(np.sin(k * phase) / k for k in range(1, harmonics + 1))
    return (0.5 * wave / np.abs(wave).max()).astype(np.float32)


def _vibrato(seconds: float = 1.5, base: float = 220.0) -> np.ndarray:
    t = np.arange(int(seconds * SR)) / SR
    return base * 2 ** (40 * np.sin(2 * np.pi * 5.5 * t) / 1200)  # +-40 cents at 5.5 Hz


def test_yin_matches_a_vibrato_tone() -> None:
    f0 = _vibrato()
    est, voiced = extract_f0(_tone(f0), SR, HOP, "yin")
    assert est.shape == voiced.shape == (len(f0) // HOP,)
    ref = f0[np.arange(len(est)) * HOP + HOP // 2]  # true f0 at the centre of each hop
    err = f0_error(est, voiced, ref)
    assert err.median_cents < 3 and err.gross_error_rate < 0.03, err.summary()


def test_frame_i_is_measured_at_the_centre_of_hop_i() -> None:
    # a step from 200 to 300 Hz at sample 40 * HOP + HOP // 2: frames far enough on each side see one pitch
    n = 80 * HOP
    f0 = np.where(np.arange(n) < 40 * HOP + HOP // 2, 200.0, 300.0)
    est, voiced = yin_f0(torch.from_numpy(_tone(f0)), SR, HOP)
    assert voiced[5:35].all() and voiced[46:75].all()
    assert torch.allclose(est[5:35], torch.tensor(200.0), rtol=0.01)
    assert torch.allclose(est[46:75], torch.tensor(300.0), rtol=0.01)
    assert np.allclose(frame_centres(3, HOP, SR), np.array([0.5, 1.5, 2.5]) * HOP / SR)


def test_a_crop_gets_the_f0_of_its_frames_in_the_whole_utterance() -> None:
    audio = torch.from_numpy(_tone(_vibrato(2.0)))
    whole, whole_v = yin_f0(audio, SR, HOP)
    offset, frames = 37, 32
    crop, crop_v = yin_f0(audio[offset * HOP : (offset + frames) * HOP], SR, HOP)
    assert crop.shape == (frames,)
    inner = slice(3, frames - 3)  # away from the crop's edges, where the window meets padding
    cents = 1200 * torch.log2(crop[inner] / whole[offset : offset + frames][inner]).abs()
    assert crop_v[inner].all() and float(cents.max()) < 2.0


def test_yin_batches_and_marks_silence_unvoiced() -> None:
    tone = torch.from_numpy(_tone(_vibrato(1.0)))
    batch = torch.stack([tone, torch.zeros_like(tone), 0.01 * torch.randn(tone.shape[0])])  # (B, T)
    f0, voiced = yin_f0(batch.unsqueeze(1), SR, HOP)  # (B, 1, T) is accepted too
    assert f0.shape == voiced.shape == (3, tone.shape[0] // HOP) and f0.dtype == torch.float32
    assert voiced[0, 2:-2].all()
    assert not voiced[1].any() and (f0[1] == 0).all()
    assert voiced[2].float().mean() < 0.1  # white noise is aperiodic
    assert (f0[~voiced] == 0).all()


def test_singing_corpus_f0_is_recovered() -> None:
    utt = plan_singing_corpus(2, seed=3)[1]
    wave, f0, env = synthesize_phrase(utt, SR, seed=3)
    ref = frame_f0(f0, env, HOP)
    est, voiced = extract_f0(wave, SR, HOP, "yin")
    err = f0_error(est, voiced, ref)
    assert err.median_cents < 3 and err.gross_error_rate < 0.08, err.summary()


def test_parselmouth_matches_a_vibrato_tone() -> None:
    pytest.importorskip("parselmouth")
    f0 = _vibrato()
    est, voiced = parselmouth_f0(_tone(f0), SR, HOP)
    ref = f0[np.arange(len(est)) * HOP + HOP // 2]
    err = f0_error(est, voiced, ref)
    assert err.median_cents < 3 and err.gross_error_rate < 0.05, err.summary()


def test_parselmouth_missing_gives_an_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_parselmouth(name: str, *args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if name == "parselmouth":
            raise ImportError("no parselmouth")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_parselmouth)
    with pytest.raises(UserError, match=r"pip install 'speechtrain\[pitch\]'"):
        extract_f0(np.zeros(4096, np.float32), SR, HOP, "parselmouth")
    with pytest.raises(UserError, match="unknown f0 method"):
        extract_f0(np.zeros(4096, np.float32), SR, HOP, "crepe")  # type: ignore[arg-type]


def test_interpolate_unvoiced_is_log_linear_and_holds_the_ends() -> None:
    f0 = np.array([0, 100, 0, 0, 0, 1600, 0, 0], dtype=np.float32)
    out = interpolate_unvoiced(f0)
    assert isinstance(out, np.ndarray)
    # 100 -> 1600 Hz is 4 octaves over 4 frames: one octave per frame
    assert np.allclose(out, [100, 100, 200, 400, 800, 1600, 1600, 1600], rtol=1e-5)
    batch = torch.tensor([[0.0, 0.0, 0.0], [0.0, 220.0, 0.0]])
    filled = interpolate_unvoiced(batch, batch > 0)
    assert isinstance(filled, torch.Tensor)
    assert (filled[0] == 0).all()  # no voiced frame: stays 0 (the source is noise there)
    assert torch.allclose(filled[1], torch.tensor(220.0))
    assert np.allclose(shift_f0(np.array([0.0, 220.0]), 12), [0.0, 440.0])


# --- octave errors, SingingVocoders' frame grid ----------------------------------------------------------------
def test_yin_does_not_jump_an_octave_on_a_bright_vowel() -> None:
    """Before the octave check YIN took half the period on about a third of the frames (an octave high)."""
    x, true = bright_vowel()
    f0, voiced = yin_f0(torch.from_numpy(x), 44100, 512)
    err = f0_error(f0.numpy(), voiced.numpy(), true)
    assert err.gross_error_rate <= 0.01, err.summary()
    plain, plain_voiced = yin_f0(torch.from_numpy(x), 44100, 512, octave_check=False)
    assert f0_error(plain.numpy(), plain_voiced.numpy(), true).gross_error_rate > 0.2  # the case is a real one
    noisy = x + 0.03 * np.random.default_rng(1).standard_normal(len(x)).astype(np.float32)  # 17 dB SNR
    f0, voiced = yin_f0(torch.from_numpy(noisy), 44100, 512)
    assert f0_error(f0.numpy(), voiced.numpy(), true).gross_error_rate <= 0.01
    # and a frame the plain YIN gets right stays as it was (a vibrato tone)
    vib = _vibrato()
    truth = vib[(np.arange(len(vib) // HOP) * HOP + HOP // 2)]
    checked, _ = yin_f0(torch.from_numpy(_tone(vib)), SR, HOP)
    plain, _ = yin_f0(torch.from_numpy(_tone(vib)), SR, HOP, octave_check=False)
    right = np.abs(np.log2(np.maximum(plain.numpy(), 1e-3) / truth)) < 0.04
    assert right.mean() > 0.95
    np.testing.assert_array_equal(checked.numpy()[right], plain.numpy()[right])


def _their_parselmouth(wav: np.ndarray, sr: int, hop: int, length: int, f0_min: float = 65.0) -> np.ndarray:
    """SingingVocoders' get_pitch_parselmouth (utils/wav2F0.py), written from its description: the signal padded
    by ceil(1.5 / f0_min) s on the left so that Praat's first frame falls on its first sample."""
    import parselmouth

    left = int(np.ceil(1.5 / f0_min * sr))
    right = hop * ((len(wav) - 1) // hop + 1) - len(wav) + left + 1
    sound = parselmouth.Sound(np.pad(wav.astype(np.float64), (left, right)), sampling_frequency=sr)
    pitch = sound.to_pitch_ac(
        time_step=hop / sr, voicing_threshold=0.6, silence_threshold=0.01, pitch_floor=f0_min, pitch_ceiling=1100.0
    )
    f0 = pitch.selected_array["frequency"].astype(np.float32)
    return np.pad(f0, (0, max(0, length - len(f0))))[:length]


def test_frame_offset_zero_is_singingvocoders_grid() -> None:
    """data.f0_frame_offset=0.0: f0 frame i at sample i x hop, as their preprocessing measures it (half a hop
    before our default, the centre of mel frame i's window)."""
    pytest.importorskip("parselmouth")
    sr, hop = 44100, 512
    t = np.arange(2 * sr + 100) / sr
    x = _tone(200.0 * 2 ** (t / 2), sr)  # one octave up over 2 s: a half-hop shift is 3.5 cents
    theirs = _their_parselmouth(x, sr, hop, len(x) // hop)
    cents = {}
    for offset in (0.0, 0.5):
        ours, _ = parselmouth_f0(x, sr, hop, frame_offset=offset)
        both = (ours > 0) & (theirs > 0)
        assert both.mean() > 0.95
        cents[offset] = float(np.mean(np.abs(1200 * np.log2(ours[both] / theirs[both]))))
    assert cents[0.0] == 0.0 and cents[0.5] > 3.0, cents
    np.testing.assert_array_equal(parselmouth_f0(x, sr, hop, frame_offset=0.0)[0], theirs)  # their values exactly
    yin0, _ = extract_f0(x, sr, hop, "yin", frame_offset=0.0)
    truth = 200.0 * 2 ** (np.arange(len(yin0)) * hop / sr / 2)
    assert np.median(np.abs(1200 * np.log2(yin0[5:-5] / truth[5:-5]))) < 1.0  # yin moves its grid likewise
    np.testing.assert_allclose(frame_centres(3, hop, sr, 0.0), [0.0, hop / sr, 2 * hop / sr])


def test_f0_settings_name_the_grid_and_the_octave_check_in_the_cache_key() -> None:
    from speechtrain.config import load_config
    from speechtrain.data.pitch import F0Settings

    parsel = F0Settings("parselmouth")
    assert parsel.to_dict() == {"f0_method": "parselmouth", "f0_min": 65.0, "f0_max": 1100.0}  # caches keep names
    moved = F0Settings("parselmouth", frame_offset=0.0)
    assert moved.to_dict()["f0_frame_offset"] == 0.0 and F0Settings.from_dict(moved.to_dict()) == moved
    assert F0Settings("yin").to_dict()["f0_yin_octave_check"] is True  # yin f0 cached before the check is redone
    cfg = load_config(None, ["data.f0_method=yin", "data.f0_frame_offset=0.0"])
    assert F0Settings.from_data(cfg.data) == F0Settings("yin", 65.0, 1100.0, 0.0)
