"""Demo corpus: byte-identical for a seed, LJSpeech-like durations, audio a function of the text."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import soundfile as sf

from speechtrain.cli.main import main
from speechtrain.data.demo import SAMPLE_RATE, make_demo_corpus, plan_demo_corpus, symbol_samples, synthesize_text
from speechtrain.data.manifest import read_manifest


def _hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_same_seed_byte_identical_other_seed_differs(tmp_path: Path) -> None:
    a = make_demo_corpus(tmp_path / "a", utterances=4, seed=7, labelled=True)
    b = make_demo_corpus(tmp_path / "b", utterances=4, seed=7, labelled=True)
    c = make_demo_corpus(tmp_path / "c", utterances=4, seed=8, labelled=True)
    ha, hb, hc = _hashes(a), _hashes(b), _hashes(c)
    assert ha == hb and len(ha) == 1 + 4 + 8  # metadata + wavs + 4 classes x 2
    assert ha["metadata.csv"] != hc["metadata.csv"]
    assert any(ha[k] != hc.get(k) for k in ha if k.startswith("classes/"))
    make_demo_corpus(c, utterances=2, seed=7, labelled=True)  # rewrite smaller: no leftovers from the old one
    hc2 = _hashes(c)
    assert len(hc2) == 1 + 2 + 8 and all(ha[k] == v for k, v in hc2.items() if k != "metadata.csv")


def test_layout_format_and_plan_match_files(tmp_path: Path) -> None:
    root = make_demo_corpus(tmp_path / "d", utterances=3, seed=1)
    entries, problems = read_manifest(root)
    assert not problems and len(entries) == 3
    for entry, planned in zip(entries, plan_demo_corpus(3, seed=1)):
        info = sf.info(entry.audio_path)
        assert (info.samplerate, info.channels, info.subtype) == (SAMPLE_RATE, 1, "PCM_16")
        assert info.frames == planned.n_samples and entry.text == planned.text and entry.id == planned.id


def test_durations_follow_ljspeech_like_distribution() -> None:
    seconds = np.array([u.duration for u in plan_demo_corpus(300, seed=0)])
    assert 4.0 <= np.median(seconds) <= 8.0
    assert np.mean((seconds >= 1.0) & (seconds <= 10.0)) >= 0.85
    assert seconds.max() > 10.0 and seconds.max() < 12.0 and seconds.min() > 0.5


def test_audio_is_a_function_of_the_text() -> None:
    ab, ba = synthesize_text("ab"), synthesize_text("ba")
    assert np.array_equal(synthesize_text("ab"), ab)  # deterministic per text
    assert len(ab) == len(ba) and not np.array_equal(ab, ba)  # same sounds, other order
    assert symbol_samples(".") > symbol_samples(",") > symbol_samples(" ") > 0
    assert all(0.06 * SAMPLE_RATE - 1 <= symbol_samples(c) <= 0.09 * SAMPLE_RATE + 1 for c in "abcxyz")
    lead = int(0.1 * SAMPLE_RATE)
    a_alone = synthesize_text("a")[lead : lead + symbol_samples("a")]
    assert np.array_equal(ab[lead : lead + symbol_samples("a")], a_alone)  # each symbol maps to one sound


def test_make_dataset_cli(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    assert main(["make-dataset", str(tmp_path / "cli"), "--utterances", "2", "--seed", "3", "--labelled"]) == 0
    assert "speechtrain prepare" in capsys.readouterr().out
    assert len(list((tmp_path / "cli" / "wavs").glob("*.wav"))) == 2
    assert sorted(p.name for p in (tmp_path / "cli" / "classes").iterdir()) == ["clicks", "hiss", "hum", "whistle"]
