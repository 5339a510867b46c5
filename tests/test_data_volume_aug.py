"""Volume augmentation (SingingVocoders' volume_aug): a crop's audio and its log-mel change volume together,
never clipping, for the drawn share of crops, reproducibly; the training loader applies it, evaluation never."""

from __future__ import annotations

import math

import numpy as np
import pytest

from speechtrain.config import ConfigError, load_config
from speechtrain.data.augment import VolumeAug
from speechtrain.data.collate import MEL_PAD
from speechtrain.data.features import MelSettings, log_mel_numpy
from speechtrain.data.loader import BatchReader
from speechtrain.data.planners import BatchKey

MEL = MelSettings()
HOP = MEL.hop_length


def _crop(peak: float, frames: int = 24) -> dict[str, np.ndarray]:
    noise = np.random.default_rng(0).standard_normal(frames * HOP) * np.hanning(frames * HOP)  # broadband
    audio = (peak * noise / np.abs(noise).max()).astype(np.float32)
    return {"audio": audio, "mel": log_mel_numpy(audio, MEL), "f0": np.full(frames, 220.0, np.float32)}


def test_audio_and_mel_move_together_and_never_clip() -> None:
    item = _crop(0.5)
    aug = VolumeAug(1.0)
    for where in (0.0, 0.3, 1.0):
        out = aug.apply(item, where)
        g = aug.gain(item["audio"], where)
        assert -3.0 <= g <= min(3.0, -math.log(0.5)) + 1e-6
        np.testing.assert_allclose(out["audio"], item["audio"] * math.exp(g), rtol=1e-6)
        assert np.abs(out["audio"]).max() <= 1.0
        # the mel moved by g is the mel of the scaled audio, away from the floors (log 1e-5; the STFT's 1e-9)
        want = log_mel_numpy(out["audio"], MEL)
        above = (want > -7) & (item["mel"] > -7)
        assert above.mean() > 0.3
        np.testing.assert_allclose(out["mel"][above], want[above], atol=2e-4)
        assert out["mel"].min() >= MEL_PAD - 1e-6
        np.testing.assert_array_equal(out["f0"], item["f0"])  # the pitch does not change
    assert aug.gain(item["audio"], 1.0) == pytest.approx(-math.log(0.5 + 1e-5))  # loudest: peak exactly at 1
    assert aug.apply(item, None) is item


def test_draws_follow_the_key_and_the_share() -> None:
    aug = VolumeAug(0.5, seed=3)
    key = BatchKey(tuple(range(400)), tuple(range(400)))
    a = aug.draws(key)
    assert a == aug.draws(key)  # the same key and seed: the same volumes (a resumed run repeats them)
    assert 150 < sum(d is not None for d in a) < 250
    assert VolumeAug(0.5, seed=4).draws(key) != a


class _Items:
    hop_length, sample_rate = HOP, MEL.sample_rate

    def __init__(self) -> None:
        self.items = [_crop(0.4, 40) | {"id": f"u{i}"} for i in range(4)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict:
        return self.items[i]


def test_reader_scales_training_crops_only() -> None:
    data = _Items()
    key = BatchKey((0, 1, 2, 3), (5, 5, 5, 5))
    keys = ("audio", "mel", "f0")
    plain = BatchReader(data, keys, 1, 16)[key]
    louder = BatchReader(data, keys, 1, 16, volume=VolumeAug(1.0))[key]
    ratios = (louder["audio"].abs().amax(-1) / plain["audio"].abs().amax(-1)).flatten().log()
    mel_shift = (louder["mel"] - plain["mel"]).amax(dim=(1, 2))
    np.testing.assert_allclose(ratios.numpy(), mel_shift.numpy(), atol=1e-4)  # same gain in audio and mel
    assert ratios.std() > 0.1  # drawn per crop
    with pytest.raises(ConfigError, match="crop_frames"):
        load_config(None, ["data.volume_aug_prob=0.5"])
