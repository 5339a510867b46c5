"""Feature cache: reuse, invalidation by file and by setting, eval split, stale errors, workers."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from speechtrain.config import DataConfig, load_config
from speechtrain.data.dataset import SpeechDataset
from speechtrain.data.demo import make_demo_corpus
from speechtrain.data.features import log_mel_numpy
from speechtrain.data.prepare import ensure_prepared, is_prepared, prepare_dataset
from speechtrain.errors import DataError


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = make_demo_corpus(tmp_path / "demo", utterances=6, seed=5)
    for wav in (root / "wavs").glob("*.wav"):  # shorten to 1.5 s: the cache logic is what is tested
        data, sr = sf.read(wav, dtype="int16")
        sf.write(wav, data[: int(1.5 * sr)], sr, subtype="PCM_16")
    return root


def _cfg(root: Path, *extra: str) -> DataConfig:
    return load_config(None, [f"data.manifest={root}", "data.eval_utterances=1", *extra]).data


def _features(root: Path) -> set[str]:
    return {p.name for p in (root / ".speechtrain_cache" / "features").glob("*/*.npy")}


def test_second_run_reuses_and_changes_rebuild_only_what_changed(corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import speechtrain.data.validate as validate

    cfg = _cfg(corpus)
    first = prepare_dataset(cfg, workers=1, progress=False)
    assert (first.computed, first.reused, first.kept) == (6, 0, 6)
    assert is_prepared(cfg) is None and ensure_prepared(cfg) is None
    before = {p: p.stat().st_mtime_ns for p in (corpus / ".speechtrain_cache" / "features").glob("*/*.npy")}
    opened: list[str] = []
    real_probe = validate.probe_audio
    monkeypatch.setattr(validate, "probe_audio", lambda path: opened.append(path) or real_probe(path))
    again = prepare_dataset(cfg, workers=1, progress=False)
    assert (again.computed, again.reused) == (0, 6) and opened == []  # no audio file opened
    assert {p: p.stat().st_mtime_ns for p in before} == before  # nothing rewritten

    wav = sorted((corpus / "wavs").glob("*.wav"))[2]
    data, sr = sf.read(wav, dtype="int16")
    sf.write(wav, data[:sr], sr, subtype="PCM_16")  # the file changes (size and content)
    assert "changed" in (is_prepared(cfg) or "")
    with pytest.raises(DataError, match="speechtrain prepare"):
        SpeechDataset.from_config(cfg, "train")
    changed = ensure_prepared(cfg, workers=1, progress=False)
    assert changed is not None and (changed.computed, changed.reused) == (1, 5) and opened == [str(wav)]
    assert changed.removed_stale == 2  # the old mel + audio of that file
    ds = SpeechDataset.from_config(cfg, "train")
    ds_all = ds.ids + SpeechDataset.from_config(cfg, "eval").ids
    assert sorted(ds_all) == sorted(p.stem for p in (corpus / "wavs").glob("*.wav"))

    cfg64 = _cfg(corpus, "data.n_mels=64")
    assert "n_mels 80 -> 64" in (is_prepared(cfg64) or "")
    with pytest.raises(DataError, match=r"n_mels 80 -> 64.*speechtrain prepare"):
        SpeechDataset.from_config(cfg64, "train")
    import speechtrain.data.prepare as prep

    decoded: list[str] = []
    real_compute = prep.compute_features
    monkeypatch.setattr(prep, "compute_features", lambda f, s: decoded.append(f) or real_compute(f, s))
    rebuilt = prepare_dataset(cfg64, workers=1, progress=False)
    assert (rebuilt.computed, rebuilt.reused, rebuilt.removed_stale) == (6, 0, 0)
    assert decoded == []  # the new mels come from the stored audio
    assert len(_features(corpus)) == 6 + 2 * 6  # audio shared; both mel variants stay usable
    assert SpeechDataset.from_config(cfg64, "train")[0]["mel"].shape[0] == 64
    assert SpeechDataset.from_config(cfg, "train")[0]["mel"].shape[0] == 80
    del ds  # no dataset of the 80-mel variant stays open (an open one keeps its files: a reader lease)
    for n_mels in (40, 48, 56, 72):  # only the 4 most recent variants are kept
        prepare_dataset(_cfg(corpus, f"data.n_mels={n_mels}"), workers=1, progress=False)
    assert is_prepared(cfg) is not None and is_prepared(_cfg(corpus, "data.n_mels=72")) is None
    assert len(_features(corpus)) == 6 + 4 * 6


def test_validation_only_change_reuses_features(corpus: Path) -> None:
    first = sorted((corpus / "wavs").glob("*.wav"))[0]
    data, sr = sf.read(first, dtype="int16")
    sf.write(first, data[: int(0.8 * sr)], sr, subtype="PCM_16")  # one item shorter than the rest
    prepare_dataset(_cfg(corpus), workers=1, progress=False)
    stricter = _cfg(corpus, "data.max_duration=1.0", "data.eval_utterances=0")
    assert is_prepared(stricter) is not None
    report = prepare_dataset(stricter, workers=1, progress=False)
    assert report.kept == 1 and report.computed == 0 and set(report.skipped) == {"too_long"}
    # a limit that leaves nothing is an error naming why (a run could not train on it), not an empty cache
    with pytest.raises(DataError, match="none of its 6 listed utterance.*too_long 6"):
        prepare_dataset(_cfg(corpus, "data.max_duration=0.6"), workers=1, progress=False)


def test_cached_features_match_the_audio(corpus: Path) -> None:
    cfg = _cfg(corpus, "data.eval_utterances=0")
    prepare_dataset(cfg, workers=1, progress=False)
    ds = SpeechDataset.from_config(cfg, "train")
    assert len(ds) == 6 and ds.sample_rate == 22050 and ds.hop_length == 256 and ds.n_mels == 80
    for i in range(len(ds)):
        item = ds[i]
        frames = int(ds.frames[i])
        assert item["mel"].dtype == np.float32 and item["mel"].shape == (80, frames)
        assert item["audio"].dtype == np.float32 and item["audio"].shape == (frames * 256,)
        assert item["tokens"].dtype == np.int64 and len(item["tokens"]) == ds.token_lengths[i] > 0
        assert abs(ds.durations[i] - frames * 256 / 22050) < 1e-9
    np.testing.assert_allclose(log_mel_numpy(ds[0]["audio"], cfg), ds[0]["mel"], atol=1e-4)


def test_eval_split_is_deterministic_and_disjoint(corpus: Path) -> None:
    cfg = _cfg(corpus)
    prepare_dataset(cfg, workers=1, progress=False)
    train, evals = SpeechDataset.from_config(cfg, "train"), SpeechDataset.from_config(cfg, "eval")
    assert len(evals) == 1 and len(train) == 5 and not set(train.ids) & set(evals.ids)
    (corpus / "metadata.csv").write_text("".join(reversed((corpus / "metadata.csv").read_text().splitlines(True))))
    prepare_dataset(cfg, workers=1, progress=False)
    assert SpeechDataset.from_config(cfg, "eval").ids == evals.ids  # independent of listing order


def test_eval_manifest_and_unknown_labels(tmp_path: Path) -> None:
    for split, labels in (("train", ("a", "b")), ("val", ("a", "c"))):
        for label in labels:
            (tmp_path / split / label).mkdir(parents=True)
            sf.write(tmp_path / split / label / "x.wav", np.full(11025, 0.1), 22050, subtype="PCM_16")
    cfg = load_config(None, [f"data.manifest={tmp_path / 'train'}", f"data.eval_manifest={tmp_path / 'val'}"]).data
    with pytest.raises(DataError, match="missing"):
        SpeechDataset.from_config(cfg, "eval")
    report = prepare_dataset(cfg, workers=1, progress=False)
    assert (report.train, report.eval) == (2, 1) and report.skipped == {"unknown_label": ["c/x"]}
    ev = SpeechDataset.from_config(cfg, "eval", fields=())
    assert ev.ids == ["a/x"] and ev.labels == ["a", "b"] and ev[0]["label"] == 0
    assert len(SpeechDataset.from_config(cfg, "train", fields=())) == 2


def test_require_text_makes_text_less_cache_stale(tmp_path: Path) -> None:
    root = tmp_path / "lj"
    (root / "wavs").mkdir(parents=True)
    for uid in ("a", "b"):
        sf.write(root / "wavs" / f"{uid}.wav", np.full(11025, 0.1), 22050, subtype="PCM_16")
    (root / "metadata.csv").write_text("a|Some text.|Some text.\nb||\n")
    cfg = _cfg(root, "data.eval_utterances=0")
    assert prepare_dataset(cfg, workers=1, progress=False).kept == 2
    assert is_prepared(cfg) is None and "empty text" in (is_prepared(cfg, require_text=True) or "")
    report = ensure_prepared(cfg, require_text=True, workers=1, progress=False)
    assert report is not None and report.kept == 1 and report.skipped == {"empty_text": ["b"]}


def test_worker_processes_give_the_same_cache(corpus: Path, tmp_path: Path) -> None:
    serial = _cfg(corpus, f"data.cache_dir={tmp_path / 'serial'}")
    pooled = _cfg(corpus, f"data.cache_dir={tmp_path / 'pooled'}")
    prepare_dataset(serial, workers=1, progress=False)
    report = prepare_dataset(pooled, workers=2, progress=False)
    assert report.workers == 2 and report.computed == 6
    a, b = SpeechDataset.from_config(serial, "train"), SpeechDataset.from_config(pooled, "train")
    assert a.ids == b.ids and os.path.isdir(tmp_path / "pooled" / "features")
    for i in range(len(a)):
        np.testing.assert_array_equal(a[i]["audio"], b[i]["audio"])
        np.testing.assert_allclose(a[i]["mel"], b[i]["mel"], atol=1e-5)


def test_prepare_during_a_training_keeps_the_files_it_reads(corpus: Path) -> None:
    """Issue 14, defect 5: a prepare run while a training reads the cache deleted feature files in use."""
    import gc

    cfg = _cfg(corpus)
    prepare_dataset(cfg, workers=1, progress=False)
    ds = SpeechDataset.from_config(cfg, "train")  # a training has the cache open
    sub = ds.subset([0, 1])
    wav = sorted((corpus / "wavs").glob("*.wav"))[2]
    data, sr = sf.read(wav, dtype="int16")
    sf.write(wav, data[:sr], sr, subtype="PCM_16")  # the file changes: its old features become garbage
    assert prepare_dataset(cfg, workers=1, progress=False).removed_stale == 0  # in use: kept
    for i in range(len(ds)):
        assert ds[i]["mel"].shape[0] == 80  # FileNotFoundError before
    del ds
    assert sub[0]["mel"].shape[0] == 80  # a subset holds the lease too
    del sub
    gc.collect()
    assert prepare_dataset(cfg, workers=1, progress=False).removed_stale == 2  # released: collected
    assert not list((corpus / ".speechtrain_cache" / "leases").iterdir())


def test_a_lease_of_a_dead_process_is_removed(corpus: Path) -> None:
    cfg = _cfg(corpus)
    prepare_dataset(cfg, workers=1, progress=False)
    leases = corpus / ".speechtrain_cache" / "leases"
    leases.mkdir(exist_ok=True)
    (leases / "999999999-1.keys").write_text("0123456789abcdef01234567\n")  # nobody holds its lock
    prepare_dataset(cfg, workers=1, progress=False)
    assert not (leases / "999999999-1.keys").exists()
