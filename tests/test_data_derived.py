"""Derived features in the feature cache (speechtrain.data.derived): computed once by prepare from the stored
audio, recomputed when and only when their inputs change, yielded by the dataset and padded by collate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from speechtrain.config import DataConfig, load_config
from speechtrain.data.dataset import SpeechDataset
from speechtrain.data.demo import make_demo_corpus
from speechtrain.data.derived import DerivedFeature
from speechtrain.data.loader import build_eval_loader
from speechtrain.data.prepare import ensure_prepared, is_prepared, prepare_dataset
from speechtrain.data.store import FeatureStore, read_audio
from speechtrain.errors import DataError
from speechtrain.train.task import Needs


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = make_demo_corpus(tmp_path / "demo", utterances=5, seed=7)
    for i, wav in enumerate(sorted((root / "wavs").glob("*.wav"))):
        data, sr = sf.read(wav, dtype="int16")
        sf.write(wav, data[: int((1.0 + 0.2 * i) * sr)], sr, subtype="PCM_16")
    return root


def _cfg(root: Path, *extra: str) -> DataConfig:
    return load_config(None, [f"data.manifest={root}", "data.eval_utterances=1", *extra]).data


def _energy(scale: float, loads: list[float]) -> DerivedFeature:
    """Frame energy (T_frames,) per 256 samples, times ``scale``; ``loads`` counts model loads."""

    def load():  # noqa: ANN202
        loads.append(scale)
        return lambda audio: scale * np.sqrt((audio[: audio.size // 256 * 256].reshape(-1, 256) ** 2).mean(1))

    return DerivedFeature("energy", {"scale": scale}, load, description="frame energy")


def _files(root: Path, suffix: str) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in (root / ".speechtrain_cache" / "features").glob(f"*/*.{suffix}.npy")}


def test_derived_feature_is_computed_once_from_the_stored_audio(corpus: Path) -> None:
    cfg, loads = _cfg(corpus), []
    energy = _energy(2.0, loads)
    report = prepare_dataset(cfg, workers=1, progress=False, derived=[energy])
    assert [(d.name, d.computed, d.reused) for d in report.derived] == [("energy", 5, 0)] and loads == [2.0]
    assert "energy    frame energy: reused 0, computed 5" in report.summary()
    assert is_prepared(cfg, derived=[energy]) is None and ensure_prepared(cfg, derived=[energy]) is None
    before = _files(corpus, "energy")
    again = prepare_dataset(cfg, workers=1, progress=False, derived=[energy])
    assert (again.computed, again.derived[0].computed, again.derived[0].reused, loads) == (0, 0, 5, [2.0])
    assert _files(corpus, "energy") == before

    ds = SpeechDataset.from_config(cfg, "train", fields=("audio", "energy"), derived=[energy])
    item = ds[1]
    expected = 2.0 * np.sqrt((read_audio(ds.root, ds._items[1].audio_key).reshape(-1, 256) ** 2).mean(1))
    assert np.array_equal(item["energy"], expected.astype(item["energy"].dtype))
    assert ds.subset([]).fields == ("audio", "energy")  # an empty subset keeps the field
    with pytest.raises(ValueError, match="unknown dataset field"):
        SpeechDataset.from_config(cfg, "train", fields=("energy",), derived=[_energy(2.0, [])]).with_fields(["pitch"])

    needs = Needs(mel=False, audio=True, derived=("energy",))
    batch = next(iter(build_eval_loader(cfg, ds, needs)))  # collate: 0 padding and energy_lengths
    lengths = batch.host_lengths["energy_lengths"]
    assert batch["energy"].shape == (batch.size, max(lengths)) and len(set(lengths)) > 1
    for i, n in enumerate(lengths):
        assert not batch["energy"][i, n:].any()
    noisy = _cfg(corpus, "data.noise_snr_db=20")  # the task would see noisy audio: not shipped
    assert "energy" not in next(iter(build_eval_loader(noisy, ds, needs)))


def test_new_settings_or_a_lost_file_recompute_the_derived_feature_only(corpus: Path) -> None:
    cfg, loads = _cfg(corpus), []
    prepare_dataset(cfg, workers=1, progress=False, derived=[_energy(2.0, loads)])
    mels, first = _files(corpus, "mel"), _files(corpus, "energy")

    other = _energy(3.0, loads)  # new weights: a settings variant of its own
    assert "derived" in (is_prepared(cfg, derived=[other]) or "")
    report = ensure_prepared(cfg, workers=1, progress=False, derived=[other])
    assert report is not None and (report.computed, report.reused, report.derived[0].computed) == (0, 5, 5)
    assert _files(corpus, "mel") == mels and len(_files(corpus, "energy")) == 10  # both variants kept
    assert all(_files(corpus, "energy")[p] == t for p, t in first.items())

    lost = sorted(first)[0]
    lost.unlink()
    assert "incomplete" in (is_prepared(cfg, derived=[_energy(2.0, [])]) or "")
    fixed = ensure_prepared(cfg, workers=1, progress=False, derived=[_energy(2.0, loads)])
    assert fixed is not None and (fixed.computed, fixed.derived[0].computed) == (0, 1) and lost.is_file()

    store = FeatureStore.from_data(cfg, [_energy(2.0, [])])
    items = store.open_split("train", None).items
    lease = store.lease(items)  # a reader lease keeps the derived files of what it reads
    assert lease is not None and set(lease.path.read_text().split()) >= {it.derived["energy"] for it in items}
    lease.release()


def test_a_failing_compute_names_the_item(corpus: Path) -> None:
    def load():  # noqa: ANN202
        def compute(audio: np.ndarray) -> np.ndarray:
            raise RuntimeError("shape mismatch")

        return compute

    with pytest.raises(DataError, match=r"broken feature of '.+' \(.+\.wav\) failed: RuntimeError: shape mismatch"):
        prepare_dataset(
            _cfg(corpus), workers=1, progress=False, derived=[DerivedFeature("bad", {}, load, "broken feature")]
        )
    with pytest.raises(ValueError, match="derived feature name"):
        DerivedFeature("mel", {}, load)
