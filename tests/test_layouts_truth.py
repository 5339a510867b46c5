"""Layouts that never misread silently (issue 29): a speaker column is never the transcript, NeMo
segments are segments, normalized text is preferred where a layout has it, Coqui's css10 layout reads, and
a manifest that yields nothing is an error (prepare exits non-zero). Each on a corpus written here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from speechtrain.config import DataConfig
from speechtrain.data.dataset import SpeechDataset
from speechtrain.data.manifest import detect_format, read_manifest
from speechtrain.data.prepare import prepare_dataset
from speechtrain.errors import DataError

SR = 22050


def _tone(path: Path, seconds: float, hz: float = 220.0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(seconds * SR)) / SR
    sf.write(path, (0.1 * np.sin(2 * np.pi * hz * t)).astype(np.float32), SR)


def _lj(root: Path, lines: list[str]) -> Path:
    for line in lines:
        uid = line.split("|")[0]
        if uid.lower() not in ("id",):
            _tone(root / "wavs" / f"{uid}.wav", 1.0)
    (root / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def test_id_text_speaker_without_a_header_is_never_read_as_the_transcript(tmp_path: Path) -> None:
    lines = [f"u{i}|a sentence number {i} here|spk_{'ab'[i % 2]}" for i in range(12)]
    root = _lj(tmp_path / "lj", lines)
    with pytest.raises(DataError, match="third column looks like speaker names.*id\\|text\\|speaker"):
        read_manifest(root)
    # with LJSpeech's optional header the third column is the speaker, and the transcript stays the text
    (root / "metadata.csv").write_text("id|text|speaker\n" + "\n".join(lines) + "\n", encoding="utf-8")
    entries, problems = read_manifest(root)
    assert not problems and len(entries) == 12
    assert {e.speaker for e in entries} == {"spk_a", "spk_b"}
    assert all(e.text.startswith("a sentence number") for e in entries)


def test_real_normalized_text_is_still_preferred(tmp_path: Path) -> None:
    root = _lj(
        tmp_path / "lj",
        ["u1|Dr. Smith paid $5.|Doctor Smith paid five dollars.", "u2|It was 1999.|It was nineteen ninety nine."],
    )
    entries, _ = read_manifest(root)
    assert [e.text for e in entries] == ["Doctor Smith paid five dollars.", "It was nineteen ninety nine."]


def test_nemo_segments_are_segments_and_normalized_text_is_preferred(tmp_path: Path) -> None:
    _tone(tmp_path / "book.wav", 13.5)
    rows = [
        {
            "audio_filepath": "book.wav",
            "offset": 2.25 * i,
            "duration": 2.25,
            "text": f"Part {i}.",
            "normalized_text": f"part {i}",
        }
        for i in range(6)
    ]
    for i, r in enumerate(rows):
        r["normalized_text"] = f"part {i}"
    (tmp_path / "m.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    data = DataConfig(manifest=str(tmp_path / "m.jsonl"), cache_dir=str(tmp_path / "cache"), eval_utterances=1)
    report = prepare_dataset(data)
    assert report.kept == 6 and abs(report.hours * 3600 - 13.5) < 0.1  # six 2.25 s segments, not six 13.5 s files
    ds = SpeechDataset.from_config(data, "train")
    assert np.allclose(ds.durations, 2.25, atol=0.02)
    assert all(t.startswith("part ") for t in ds.texts)
    # each segment's audio is its own stretch of the file
    full, _ = sf.read(tmp_path / "book.wav", dtype="float32")
    item = ds.with_fields(["audio"])[1]
    start = int(round(float(ds.ids[1].rsplit("_", 1)[1]) * SR))
    n = min(item["audio"].size, 2000)
    assert np.allclose(item["audio"][:n], full[start : start + n], atol=1e-4)


def test_a_segment_beyond_the_file_is_a_named_problem(tmp_path: Path) -> None:
    _tone(tmp_path / "short.wav", 3.0)
    rows = [
        {"audio_filepath": "short.wav", "offset": 0.0, "duration": 1.5, "text": "ok"},
        {"audio_filepath": "short.wav", "offset": 2.0, "duration": 4.0, "text": "too far"},
    ]
    (tmp_path / "m.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    report = prepare_dataset(
        DataConfig(manifest=str(tmp_path / "m.jsonl"), cache_dir=str(tmp_path / "c"), eval_utterances=0)
    )
    assert report.kept == 1
    problem = report.problems[0]
    assert problem.reason == "truncated_audio" and "beyond the file" in problem.detail


def test_css10_reads_and_prefers_normalized_text(tmp_path: Path) -> None:
    root = tmp_path / "css10_de"
    lines = []
    for i in range(6):
        _tone(root / "buch" / f"buch_{i:04d}.wav", 1.2)
        lines.append(f"buch/buch_{i:04d}.wav|Kapitel {i}, Teil 1.|Kapitel {i}, Teil eins.|1.2")
    (root / "transcript.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert detect_format(root) == "css10" and detect_format(root / "transcript.txt") == "css10"
    entries, problems = read_manifest(root)
    assert not problems and len(entries) == 6 and entries[0].text == "Kapitel 0, Teil eins."
    report = prepare_dataset(DataConfig(manifest=str(root), cache_dir=str(tmp_path / "cache"), eval_utterances=1))
    assert report.kept == 6


def test_a_manifest_that_yields_nothing_fails_prepare(tmp_path: Path) -> None:
    from speechtrain.cli.main import main

    root = tmp_path / "bad"
    lines = [f"wavs/x{i}.wav|one|two|three|four" for i in range(4)]  # every line malformed for LJSpeech
    root.mkdir()
    (root / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    data = DataConfig(manifest=str(root), cache_dir=str(tmp_path / "cache"), format="ljspeech")
    with pytest.raises(DataError, match="none of its 4 listed utterance\\(s\\) can be used.*malformed_line 4"):
        prepare_dataset(data)
    assert main(["prepare", str(root), f"data.cache_dir={tmp_path / 'c2'}", "data.format=ljspeech"]) == 2
