"""Pitch-shift augmentation: audio, mel and f0 of a crop move together, by the drawn amount, reproducibly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from speechtrain.config import load_config
from speechtrain.data.augment import PitchShift, read_f0, shift_crop
from speechtrain.data.collate import crop_item
from speechtrain.data.dataset import SpeechDataset
from speechtrain.data.demo_singing import make_singing_corpus
from speechtrain.data.features import MelSettings, log_mel_numpy
from speechtrain.data.loader import build_train_loader, dataset_fields
from speechtrain.data.pitch import yin_f0
from speechtrain.data.planners import BatchKey
from speechtrain.data.prepare import prepare_dataset
from speechtrain.train.task import Needs

MEL = MelSettings()  # 22050 Hz, hop 256, n_fft 1024, 80 mels
HOP = MEL.hop_length


def _tone(hz: float, seconds: float = 2.0) -> dict[str, np.ndarray]:
    n = int(seconds * MEL.sample_rate) // HOP * HOP
    t = np.arange(n) / MEL.sample_rate
    audio = (0.5 * np.sin(2 * np.pi * hz * t) + 0.2 * np.sin(2 * np.pi * 2 * hz * t)).astype(np.float32)
    return {"audio": audio, "mel": log_mel_numpy(audio, MEL), "f0": np.full(n // HOP, hz, np.float32)}


def test_shift_moves_audio_mel_and_f0_together() -> None:
    item = _tone(220.0)
    shift = PitchShift(1.0, (4.0, 4.0), MEL)
    factor = 2.0 ** (4 / 12)
    out = shift_crop(item, 10, 32, factor, MEL, shift.margin_frames)
    assert out is not None
    assert out["audio"].shape == (32 * HOP,) and out["mel"].shape == (80, 32) and out["f0"].shape == (32,)
    np.testing.assert_allclose(out["f0"], 220.0 * factor, rtol=1e-5)  # f0 scaled with the audio
    measured, voiced = yin_f0(__import__("torch").from_numpy(out["audio"]), MEL.sample_rate, HOP)
    inner = measured[4:-4][voiced[4:-4]].numpy()
    cents = 1200 * np.abs(np.log2(inner / (220.0 * factor)))
    assert inner.size > 15 and np.median(cents) < 5  # the audio really sounds 4 semitones higher
    # the mel is the shifted audio's own: its strongest band moves up with the pitch
    plain = crop_item(item, 10, 32, HOP)
    assert np.argmax(out["mel"].mean(1)) > np.argmax(plain["mel"].mean(1))
    np.testing.assert_allclose(out["mel"][:, 4:-4], log_mel_numpy(out["audio"], MEL)[:, 4:-4], atol=0.1)


def test_factor_one_and_short_items_give_the_plain_crop() -> None:
    item = _tone(300.0, seconds=0.5)
    shift = PitchShift(1.0, (0.0, 0.0), MEL)
    same = shift.crop(item, 3, 16, 1.0)
    plain = crop_item(item, 3, 16, HOP)
    for k in ("audio", "mel", "f0"):
        np.testing.assert_array_equal(same[k], plain[k])
    too_long = shift.crop(item, 0, 40, 1.5)  # 40 frames x 1.5 > the 43 frames the item has
    np.testing.assert_array_equal(too_long["audio"], crop_item(item, 0, 40, HOP)["audio"])


def test_read_f0_blends_voiced_neighbours_and_keeps_unvoiced() -> None:
    f0 = np.array([100.0, 200.0, 0.0, 400.0], np.float32)
    got = read_f0(f0, [0.0, 0.5, 1.2, 1.8, 3.0])
    np.testing.assert_allclose(got, [100.0, 100 * 2**0.5, 200.0, 0.0, 400.0], rtol=1e-6)


def test_factors_are_drawn_from_the_key_in_range() -> None:
    shift = PitchShift(0.5, (-2.0, 5.0), MEL, seed=3)
    key = BatchKey(tuple(range(400)), tuple(range(400)))
    a, b = shift.factors(key), shift.factors(key)
    assert a == b  # the same key and seed: the same shifts (a resumed run repeats them)
    shifted = [f for f in a if f != 1.0]
    assert 150 < len(shifted) < 250
    assert min(shifted) >= 2 ** (-2 / 12) and max(shifted) <= 2 ** (5 / 12)
    assert PitchShift(0.5, (-2.0, 5.0), MEL, seed=4).factors(key) != a


@pytest.mark.slow
def test_training_loader_ships_shifted_crops(tmp_path: Path) -> None:
    root = make_singing_corpus(tmp_path / "s", utterances=4, seed=2)
    over = [f"data.manifest={root}", "data.eval_utterances=1", "data.f0_method=yin", "data.crop_frames=16"]
    cfg = load_config(None, [*over, "data.batch_size=3", "data.pitch_shift_prob=1", "data.pitch_shift_semitones=[3,3]"])
    prepare_dataset(cfg.data, workers=1, progress=False)
    needs = Needs(mel=True, audio=True, f0=True)
    ds = SpeechDataset.from_config(cfg.data, "train", fields=dataset_fields(cfg.data, needs))
    loader = build_train_loader(cfg.data, ds, needs, seed=0)
    batch = next(iter(loader))
    assert tuple(batch["f0"].shape) == (3, 16) and tuple(batch["mel"].shape) == (3, 80, 16)
    # every crop is shifted: its f0 is the pitch its audio has (measured again on the shifted audio)
    measured, voiced = yin_f0(batch["audio"][:, 0], MEL.sample_rate, HOP)
    both = voiced[:, 3:-3] & (batch["f0"][:, 3:-3] > 0)
    cents = 1200 * (measured[:, 3:-3][both] / batch["f0"][:, 3:-3][both]).log2().abs()
    assert both.sum() > 10 and float(cents.median()) < 15
    plain_cfg = load_config(None, [*over, "data.batch_size=3"])
    plain = next(iter(build_train_loader(plain_cfg.data, ds, needs, seed=0)))
    assert not np.allclose(plain["audio"].numpy(), batch["audio"].numpy())


def test_shifted_f0_follows_the_cache_grid() -> None:
    """data.f0_frame_offset=0.0 (SingingVocoders' grid): the cached f0 frame i sits on sample i x hop, and the
    shifted crop's f0 is read on that grid too."""
    n = 2 * MEL.sample_rate // HOP * HOP
    glide = lambda s: 200.0 * 2 ** (np.asarray(s) / n)  # noqa: E731  (Hz at sample s: one octave over the item)
    audio = (0.5 * np.sin(2 * np.pi * np.cumsum(glide(np.arange(n))) / MEL.sample_rate)).astype(np.float32)
    factor, margin = 2 ** (3 / 12), PitchShift(1.0, (3.0, 3.0), MEL).margin_frames
    for offset in (0.0, 0.5):
        item = {"audio": audio, "f0": glide((np.arange(n // HOP) + offset) * HOP).astype(np.float32)}
        out = shift_crop(item, 20, 16, factor, MEL, margin, f0_offset=offset)
        assert out is not None
        source = 20 * HOP + (margin + np.arange(16) + offset) * HOP * factor  # where each crop frame reads from
        np.testing.assert_allclose(out["f0"], glide(source) * factor, rtol=2e-4)
