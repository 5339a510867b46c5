"""f0 in the feature cache: computed by prepare, aligned with mel frames, cropped with the mel and audio,
added to a cache prepared without it (mel and audio reused), absent from the names of f0-less indexes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from speechtrain.config import DataConfig, load_config
from speechtrain.data.collate import collate
from speechtrain.data.dataset import SpeechDataset
from speechtrain.data.demo_singing import make_singing_corpus
from speechtrain.data.loader import BatchReader, dataset_fields, item_keys
from speechtrain.data.pitch import F0Settings, f0_error
from speechtrain.data.planners import BatchKey
from speechtrain.data.prepare import is_prepared, prepare_dataset
from speechtrain.data.store import FeatureStore, IndexSettings
from speechtrain.errors import DataError
from speechtrain.train.task import Needs


@pytest.fixture(scope="module")
def singing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_singing_corpus(tmp_path_factory.mktemp("sing") / "singing", utterances=5, seed=3)


def _cfg(root: Path, *extra: str) -> DataConfig:
    return load_config(None, [f"data.manifest={root}", "data.eval_utterances=1", *extra]).data


def _features(root: Path, suffix: str) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in (root / ".speechtrain_cache" / "features").glob(f"*/*{suffix}")}


def test_prepare_caches_f0_per_mel_frame_close_to_the_truth(singing: Path) -> None:
    cfg = _cfg(singing, "data.f0_method=yin")
    report = prepare_dataset(cfg, workers=1, progress=False)
    assert report.kept == 5 and not report.problems
    ds = SpeechDataset.from_config(cfg, "train", fields=("mel", "audio", "f0"))
    errors = []
    for i in range(len(ds)):
        item = ds[i]
        assert item["f0"].dtype == np.float32 and item["f0"].shape == (item["mel"].shape[1],)
        # the cached f0 is the one measured on the stored audio (the same settings give the same values)
        again = F0Settings("yin", cfg.f0_min, cfg.f0_max).extract(item["audio"], cfg.sample_rate, cfg.hop_length)
        np.testing.assert_allclose(item["f0"], again, rtol=1e-5, atol=1e-3)
        truth = np.load(singing / "f0" / f"{item['id']}.npy")
        assert truth.shape == item["f0"].shape  # one value per mel frame, the same frames as the truth
        errors.append(f0_error(item["f0"], item["f0"] > 0, truth))
    assert max(e.median_cents for e in errors) < 10
    assert max(e.gross_error_rate for e in errors) < 0.1


def test_crops_carry_the_same_frames_of_mel_f0_and_audio(singing: Path) -> None:
    cfg = _cfg(singing, "data.f0_method=yin", "data.crop_frames=16")
    prepare_dataset(cfg, workers=1, progress=False)
    needs = Needs(mel=True, audio=True, f0=True)
    assert "f0" in item_keys(cfg, needs) and "f0" in dataset_fields(cfg, needs)
    ds = SpeechDataset.from_config(cfg, "train", fields=dataset_fields(cfg, needs))
    reader = BatchReader(ds, item_keys(cfg, needs), crop_frames=16)
    offsets = (0, 37, int(ds.frames[2]) - 16)
    batch = reader[BatchKey((0, 1, 2), offsets)]
    assert tuple(batch["f0"].shape) == (3, 16) and tuple(batch["mel"].shape[::2]) == (3, 16)
    assert batch["audio"].shape[-1] == 16 * cfg.hop_length
    for row, (i, o) in enumerate(zip((0, 1, 2), offsets)):
        whole = ds[i]
        np.testing.assert_array_equal(batch["f0"][row].numpy(), whole["f0"][o : o + 16])
        np.testing.assert_array_equal(batch["mel"][row].numpy(), whole["mel"][:, o : o + 16])
        start = o * cfg.hop_length
        np.testing.assert_array_equal(
            batch["audio"][row, 0].numpy(), whole["audio"][start : start + 16 * cfg.hop_length]
        )


def test_collate_pads_f0_as_unvoiced_and_select_trims_it() -> None:
    items = [{"mel": np.zeros((4, n), np.float32), "f0": np.full(n, 200.0, np.float32), "id": str(n)} for n in (5, 9)]
    batch = collate(items, pad_multiple=1, hop_length=4)
    assert tuple(batch["f0"].shape) == (2, 9) and batch["f0"][0, 5:].abs().sum() == 0
    assert batch.host_lengths["f0_lengths"] == [5, 9]
    first = batch.select([0])
    assert tuple(first["f0"].shape) == (1, 5) and tuple(first["mel"].shape) == (1, 4, 5)


def test_f0_added_later_reuses_mel_and_audio_and_f0less_index_names_do_not_move(singing: Path, tmp_path: Path) -> None:
    root = make_singing_corpus(tmp_path / "s", utterances=3, seed=9)
    plain = _cfg(root)
    assert "f0_method" not in IndexSettings.from_data(plain).to_dict()  # indexes of data without f0 keep names
    prepare_dataset(plain, workers=1, progress=False)
    with pytest.raises(DataError, match="data.f0_method"):
        SpeechDataset.from_config(plain, "train", fields=("mel", "f0"))
    mels, audio = _features(root, ".mel.npy"), _features(root, ".audio.npy")
    with_f0 = _cfg(root, "data.f0_method=yin")
    assert is_prepared(with_f0) is not None
    prepare_dataset(with_f0, workers=1, progress=False)
    assert is_prepared(with_f0) is None and is_prepared(plain) is None  # both variants stay usable
    assert _features(root, ".mel.npy") == mels and _features(root, ".audio.npy") == audio  # not rewritten
    assert len(_features(root, ".f0.npy")) == 3
    store = FeatureStore.from_data(with_f0)
    other = FeatureStore.from_data(_cfg(root, "data.f0_method=yin", "data.f0_max=800"))
    assert store.index_path(str(root)) != other.index_path(str(root))  # f0 settings name their own variant


def test_pitch_settings_are_checked_at_load_time() -> None:
    from speechtrain.config import ConfigError

    with pytest.raises(ConfigError, match="f0_max"):
        load_config(None, ["data.f0_min=300", "data.f0_max=200"])
    with pytest.raises(ConfigError, match="Nyquist"):
        load_config(None, ["data.f0_method=yin", "data.sample_rate=2000", "data.f0_max=1100"])
    with pytest.raises(ConfigError, match="crop_frames"):
        load_config(None, ["data.pitch_shift_prob=0.5"])
