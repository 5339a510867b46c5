"""TrainLoader / eval loader / DeviceFeatures / TimedIterator on the in-memory fake dataset."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from speechtrain.config import ConfigError, DataConfig, TrainConfig, load_config
from speechtrain.data.collate import MEL_PAD
from speechtrain.data.features import LogMel
from speechtrain.data.loader import (
    DeviceFeatures,
    TimedIterator,
    build_eval_loader,
    build_train_loader,
    dataset_fields,
)
from speechtrain.errors import DataError
from speechtrain.testing.datasets import fake_dataset
from speechtrain.train.task import Needs

SMALL = [
    "data.hop_length=4",
    "data.n_fft=16",
    "data.win_length=16",
    "data.n_mels=8",
    "data.sample_rate=400",
    "data.fmax=null",
    "data.num_buckets=3",
    "data.max_frames=200",
]


SEED = TrainConfig().seed  # the sampler seed these tests were written with


def _cfg(*extra: str) -> DataConfig:
    return load_config(None, [*SMALL, *extra]).data


def _take(loader, n: int) -> list:
    return list(itertools.islice(iter(loader), n))


def _same(a, b) -> None:
    assert a.ids == b.ids and a.bucket == b.bucket
    assert set(a.keys()) == set(b.keys())
    for k in a.keys():
        assert torch.equal(a[k], b[k]), k


def test_every_utterance_once_per_epoch_and_stats() -> None:
    ds = fake_dataset(40)
    loader = build_train_loader(_cfg(), ds, Needs(mel=True, text=True), seed=SEED)
    batches = _take(loader, len(loader))
    ids = [i for b in batches for i in b.ids]
    assert sorted(ids) == sorted(ds.ids)
    assert all(b.padded_frames <= 200 for b in batches)
    st = loader.stats()
    real = sum(b.real_frames for b in batches)
    padded = sum(b.padded_frames for b in batches)
    assert st["items"] == 40 and st["batches"] == len(batches)
    assert loader.mean_batch_size == pytest.approx(40 / len(batches))
    assert st["padding_fraction"] == pytest.approx(1 - real / padded)
    _take(loader, 1)  # next epoch starts; the finished one is in the history
    assert loader.epoch == 1 and loader.stats()["epochs"][0]["items"] == 40


def test_only_needed_fields_travel() -> None:
    ds = fake_dataset(12)
    b = _take(build_train_loader(_cfg(), ds, Needs(mel=True), seed=SEED), 1)[0]
    assert set(b.keys()) == {"mel", "mel_lengths"}
    b = _take(build_train_loader(_cfg("data.features_on_device=true"), ds, Needs(mel=True, labels=True), seed=SEED), 1)[
        0
    ]
    assert set(b.keys()) == {"audio", "audio_lengths", "labels"}
    assert dataset_fields(_cfg("data.features_on_device=true"), Needs(mel=True, text=True)) == ("audio", "tokens")


def test_missing_field_fails_before_any_worker() -> None:
    ds = fake_dataset(12, fields=("mel",))
    with pytest.raises(DataError, match="dataset_fields"):
        build_train_loader(_cfg(), ds, Needs(mel=True, audio=True), seed=SEED)


@pytest.mark.parametrize(
    "extra,workers",
    [((), 0), (("data.crop_frames=16", "data.batch_size=4"), 0), (("data.crop_frames=16", "data.batch_size=4"), 2)],
)
def test_resume_gives_the_same_remaining_batches(extra: tuple, workers: int) -> None:
    ds = fake_dataset(30)
    cfg = _cfg(*extra, f"data.num_workers={workers}")
    needs = Needs(mel=True, audio=True)
    loader = build_train_loader(cfg, ds, needs, seed=SEED)
    total = len(loader) + 3  # crosses an epoch boundary
    it = iter(loader)
    reference, states = [], []
    for _ in range(total):
        reference.append(next(it))
        states.append(loader.state_dict())
    del it
    for k in sorted({2, len(loader) - 1}):
        resumed = build_train_loader(cfg, ds, needs, seed=SEED)
        resumed.load_state_dict(states[k])
        rest = _take(resumed, total - k - 1)
        for a, b in zip(rest, reference[k + 1 :]):
            _same(a, b)
        assert resumed.stats()["batches"] == total


def test_load_state_dict_stops_a_running_iterator() -> None:
    ds = fake_dataset(30)
    loader = build_train_loader(_cfg(), ds, Needs(mel=True), seed=SEED)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    second = next(it)
    loader.load_state_dict(state)
    with pytest.raises(StopIteration):
        next(it)
    _same(next(iter(loader)), second)


def test_crop_batches_are_aligned_and_fixed_size() -> None:
    ds = fake_dataset(20, min_frames=10, max_frames=40)
    loader = build_train_loader(
        _cfg("data.crop_frames=12", "data.batch_size=4"), ds, Needs(mel=True, audio=True), seed=SEED
    )
    for b in _take(loader, len(loader)):
        assert b["mel"].shape[-1] == 12 and b["audio"].shape[-1] == 48
        for j, uid in enumerate(b.ids):
            n = b.host_lengths["mel_lengths"][j]
            mel, audio = b["mel"][j, :, :n].numpy(), b["audio"][j, 0, : n * 4].numpy()
            np.testing.assert_allclose(audio.reshape(n, 4)[:, 0], mel[0] * 0.01, rtol=1e-6)
            full = ds[ds.ids.index(uid)]["mel"]
            hits = [o for o in range(full.shape[1] - n + 1) if np.array_equal(full[:, o : o + n], mel)]
            assert hits, "crop must be a segment of the utterance"
    assert loader.stats()["crop_short"] == int((ds.frames < 12).sum())


def test_crop_short_skip_is_counted() -> None:
    ds = fake_dataset(20, min_frames=5, max_frames=30)
    loader = build_train_loader(
        _cfg("data.crop_frames=12", "data.batch_size=4", "data.crop_short=skip"),
        ds,
        Needs(mel=True, audio=True),
        seed=SEED,
    )
    ids = [i for b in _take(loader, len(loader)) for i in b.ids]
    short = int((ds.frames < 12).sum())
    assert short > 0 and len(ids) == 20 - short
    assert loader.stats()["skipped"] == {"crop_short": short}


def test_eval_loader_is_one_ordered_pass() -> None:
    ds = fake_dataset(11)
    ev = build_eval_loader(_cfg("data.eval_batch_size=4", "data.crop_frames=8"), ds, Needs(mel=True))
    for _ in range(2):
        batches = list(ev)
        assert [b.size for b in batches] == [4, 4, 3]
        assert [i for b in batches for i in b.ids] == ds.ids
        assert batches[0]["mel"].shape[-1] == ds.frames[:4].max()  # whole utterances, not crops


def test_device_features_match_logmel_of_each_item() -> None:
    cfg = _cfg("data.features_on_device=true")
    ds = fake_dataset(6, min_frames=20, max_frames=40)
    b = _take(build_train_loader(cfg, ds, Needs(mel=True), seed=SEED), 1)[0]
    out = DeviceFeatures(cfg).eval()(b)
    logmel = LogMel.from_config(cfg)
    assert out.host_lengths["mel_lengths"] == [n // 4 for n in b.host_lengths["audio_lengths"]]
    edge = 16 // 4 + 1  # frames whose STFT window reaches the item's end (padding differs there)
    for j in range(b.size):
        n = out.host_lengths["mel_lengths"][j]
        alone = logmel(b["audio"][j : j + 1, :, : n * 4])[0]
        torch.testing.assert_close(out["mel"][j, :, : n - edge], alone[:, : n - edge], rtol=1e-4, atol=1e-4)
        assert torch.all(out["mel"][j, :, n:] == MEL_PAD)


def test_spec_augment_masks_only_valid_frames_and_only_in_training() -> None:
    cfg = _cfg("data.time_masks=2", "data.time_mask_width=5", "data.freq_masks=1", "data.freq_mask_width=3")
    b = _take(build_train_loader(cfg, fake_dataset(16), Needs(mel=True), seed=SEED), 1)[0]
    aug = DeviceFeatures(cfg)
    torch.manual_seed(0)
    out = aug(b)
    changed = out["mel"] != b["mel"]
    assert changed.any()
    for j, n in enumerate(b.host_lengths["mel_lengths"]):
        assert not changed[j, :, n:].any(), "padding must stay padding"
    assert torch.equal(aug(b, training=False)["mel"], b["mel"])
    assert torch.equal(aug.eval()(b)["mel"], b["mel"])


def test_noise_reaches_the_requested_snr_and_spares_padding() -> None:
    cfg = _cfg("data.noise_snr_db=10", "data.features_on_device=true", "data.max_frames=2000")
    ds = fake_dataset(8, min_frames=150, max_frames=250)
    b = _take(build_train_loader(cfg, ds, Needs(mel=True, audio=True), seed=SEED), 1)[0]
    torch.manual_seed(0)
    out = DeviceFeatures(cfg)(b)
    for j, n in enumerate(b.host_lengths["audio_lengths"]):
        clean, noisy = b["audio"][j, 0, :n], out["audio"][j, 0, :n]
        snr = 10 * torch.log10(clean.pow(2).mean() / (noisy - clean).pow(2).mean())
        assert abs(float(snr) - 10.0) < 1.0
        assert torch.all(out["audio"][j, 0, n:] == 0)
    assert out["mel"].shape[-1] == b["audio"].shape[-1] // 4


def test_noise_without_audio_is_a_config_error() -> None:
    cfg = _cfg("data.noise_snr_db=10")
    b = _take(build_train_loader(cfg, fake_dataset(8), Needs(mel=True), seed=SEED), 1)[0]
    with pytest.raises(ConfigError, match="noise_snr_db"):
        DeviceFeatures(cfg)(b)


def test_timed_iterator_counts_batches_and_wait() -> None:
    timed = TimedIterator(range(3))
    assert list(timed) == [0, 1, 2]
    assert timed.count == 4  # three items and the StopIteration
    assert timed.wait_seconds >= 0.0
    waited = timed.reset()
    assert waited >= 0.0 and timed.wait_seconds == 0.0


@pytest.mark.gpu
def test_pinned_batches_reach_the_gpu() -> None:
    cfg = _cfg("data.pin_memory=true", "data.num_workers=1", "data.features_on_device=true")
    loader = build_train_loader(cfg, fake_dataset(16), Needs(mel=True), seed=SEED)
    b = _take(loader, 1)[0]
    assert b["audio"].is_pinned()
    out = DeviceFeatures(cfg).cuda()(b.to("cuda"))
    assert out["mel"].is_cuda and out["mel"].shape[-1] == b["audio"].shape[-1] // 4


def test_loader_does_not_touch_the_global_torch_rng() -> None:
    loader = build_train_loader(_cfg(), fake_dataset(20), Needs(mel=True), seed=SEED)
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    _take(loader, len(loader) + 2)  # crosses an epoch: a new DataLoader iterator
    assert torch.equal(torch.rand(3), expected)
