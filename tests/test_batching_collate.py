"""Collate: padding values, lengths, pad_multiple, audio/mel alignment, crops."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from speechtrain.data.collate import MEL_PAD, collate, crop_item
from speechtrain.testing.datasets import FakeSpeechDataset


@pytest.fixture
def ds() -> FakeSpeechDataset:
    return FakeSpeechDataset([5, 12, 9], n_mels=4, hop_length=4)


def test_pads_to_the_longest_with_lengths(ds: FakeSpeechDataset) -> None:
    items = [ds[i] for i in range(3)]
    b = collate(items, pad_multiple=1, hop_length=4, sample_rate=400, bucket=2)
    assert b["mel"].shape == (3, 4, 12) and b["audio"].shape == (3, 1, 48)
    assert b["mel_lengths"].tolist() == [5, 12, 9] and b["audio_lengths"].tolist() == [20, 48, 36]
    assert b.host_lengths["mel_lengths"] == [5, 12, 9]
    assert b.bucket == 2 and b.ids == ["utt00000", "utt00001", "utt00002"]
    for i, it in enumerate(items):
        n = it["mel"].shape[1]
        assert torch.equal(b["mel"][i, :, :n], torch.from_numpy(it["mel"]))
        assert torch.all(b["mel"][i, :, n:] == MEL_PAD)
        assert torch.all(b["audio"][i, 0, n * 4 :] == 0)
        t = len(it["tokens"])
        assert torch.equal(b["tokens"][i, :t], torch.from_numpy(it["tokens"]))
        assert torch.all(b["tokens"][i, t:] == 0)
    assert b["speakers"].tolist() == [0, 1, 0] and b["labels"].tolist() == [0, 1, 2]
    assert math.isclose(b.padding_fraction, 1 - 26 / 36)
    assert math.isclose(b.audio_seconds, (20 + 48 + 36) / 400)


def test_pad_multiple_rounds_mel_and_keeps_audio_aligned(ds: FakeSpeechDataset) -> None:
    b = collate([ds[i] for i in range(3)], pad_multiple=8, hop_length=4, sample_rate=400)
    assert b["mel"].shape[-1] == 16 and b["audio"].shape[-1] == 16 * 4
    assert b["tokens"].shape[-1] % 8 == 0
    assert b["mel_lengths"].tolist() == [5, 12, 9]


def test_audio_only_batches_round_to_whole_frames() -> None:
    items = [{"id": "a", "audio": np.ones(10, np.float32)}, {"id": "b", "audio": np.ones(3, np.float32)}]
    b = collate(items, pad_multiple=2, hop_length=4, sample_rate=16)
    assert b["audio"].shape == (2, 1, 16) and b["audio_lengths"].tolist() == [10, 3]
    assert "mel" not in b


def test_crop_is_aligned_between_mel_and_audio(ds: FakeSpeechDataset) -> None:
    item = ds[1]  # 12 frames
    crop = crop_item(item, offset=3, crop_frames=5, hop_length=4)
    assert crop["mel"].shape == (4, 5) and crop["audio"].shape == (20,)
    np.testing.assert_array_equal(crop["mel"], item["mel"][:, 3:8])
    np.testing.assert_allclose(crop["audio"].reshape(5, 4)[:, 0], crop["mel"][0] * 0.01, rtol=1e-6)


def test_min_frames_pads_short_crops_to_the_fixed_shape(ds: FakeSpeechDataset) -> None:
    crops = [crop_item(ds[i], 0, 8, 4) for i in range(3)]
    b = collate(crops, pad_multiple=1, hop_length=4, sample_rate=400, min_frames=8)
    assert b["mel"].shape[-1] == 8 and b["audio"].shape[-1] == 32
    assert b["mel_lengths"].tolist() == [5, 8, 8]
    assert torch.all(b["mel"][0, :, 5:] == MEL_PAD)


def test_empty_batch_is_an_error() -> None:
    with pytest.raises(ValueError):
        collate([], 1, 4, 400)
