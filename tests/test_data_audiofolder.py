"""The Hugging Face ``audiofolder`` layout (issue 26's demonstration that a layout is one new module):
``metadata.csv`` / ``metadata.jsonl`` with ``file_name`` + transcript, at the top or as train/validation
split folders; detected beside LJSpeech's and NeMo's claims on the same file names, read, prepared."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from speechtrain.config import DataConfig, load_config
from speechtrain.data.dataset import SpeechDataset
from speechtrain.data.manifest import detect_format, read_manifest
from speechtrain.data.prepare import prepare_dataset
from speechtrain.errors import DataError

TEXTS = ["Hello, world", 'She said "yes", twice', "Tashkent|Samarkand", "Plain words here"]


def _wav(path: Path, seconds: float = 0.6, sr: int = 22050) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(seconds * sr)) / sr
    sf.write(path, 0.3 * np.sin(2 * np.pi * 220 * t), sr, subtype="PCM_16")


def _csv(folder: Path, rows: list[tuple[str, str, str]]) -> Path:
    lines = ["file_name,transcription,speaker_id"]
    for audio, text, speaker in rows:
        _wav(folder / audio)
        quoted = '"' + text.replace('"', '""') + '"'
        lines.append(f"{audio},{quoted},{speaker}")
    (folder / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def test_metadata_csv_with_quoted_commas_is_read_with_texts_and_speakers(tmp_path: Path) -> None:
    root = _csv(tmp_path / "hf", [(f"clips/c{i}.wav", TEXTS[i], f"s{i % 2}") for i in range(4)])
    assert detect_format(root) == "audiofolder"  # LJSpeech claims metadata.csv by its name only
    assert detect_format(root / "metadata.csv") == "audiofolder"
    entries, problems = read_manifest(root)
    assert not problems and [e.text for e in entries] == TEXTS
    assert [e.speaker for e in entries] == ["s0", "s1", "s0", "s1"] and [e.id for e in entries] == [
        "c0",
        "c1",
        "c2",
        "c3",
    ]
    assert all(Path(e.audio_path).is_file() for e in entries)
    with pytest.raises(DataError, match="not LJSpeech.*Hugging Face audiofolder; set data.format=audiofolder"):
        read_manifest(root / "metadata.csv", "ljspeech")


def test_split_folders_are_train_and_eval_and_prepare(tmp_path: Path) -> None:
    root = tmp_path / "hf"
    _csv(root / "train", [(f"a{i}.wav", TEXTS[i], "s0") for i in range(3)])
    (root / "validation").mkdir(parents=True)
    _wav(root / "validation" / "v0.wav")
    (root / "validation" / "metadata.jsonl").write_text(
        json.dumps({"file_name": "v0.wav", "text": "eval words", "speaker": "s0"}) + "\n", encoding="utf-8"
    )
    assert detect_format(root) == "audiofolder"
    data = DataConfig(manifest=str(root), cache_dir=str(tmp_path / "cache"))
    report = prepare_dataset(data)
    assert (report.train, report.eval, report.problems) == (3, 1, [])
    assert SpeechDataset.from_config(data, "eval").texts == ["eval words"]
    assert load_config(None, [f"data.manifest={root}", "data.format=audiofolder"]).data.format == "audiofolder"


def test_metadata_jsonl_wins_over_nemo_and_bad_rows_are_problems(tmp_path: Path) -> None:
    _wav(tmp_path / "a.wav")
    rows = [
        {"file_name": "a.wav", "transcription": "one"},
        {"file_name": "", "transcription": "no file"},
        "not an object",
    ]
    text = "\n".join(json.dumps(r) for r in rows) + "\n{broken\n"
    (tmp_path / "metadata.jsonl").write_text(text, encoding="utf-8")
    assert detect_format(tmp_path) == "audiofolder"  # *.jsonl (NeMo) claims it by name only
    entries, problems = read_manifest(tmp_path)
    assert [e.text for e in entries] == ["one"]
    assert [(p.reason, p.where.rsplit(":", 1)[1]) for p in problems] == [
        ("malformed_line", "2"),
        ("malformed_line", "3"),
        ("malformed_line", "4"),
    ]
    csv_root = tmp_path / "csv"
    csv_root.mkdir()
    (csv_root / "metadata.csv").write_text("file_name,text\na.wav,one,extra\n\nb.wav,two\n", encoding="utf-8")
    entries, problems = read_manifest(csv_root)
    assert [e.text for e in entries] == ["two"] and problems[0].where.endswith("metadata.csv:2")
    assert entries[0].where.endswith("metadata.csv:4")  # the file's own line numbers, blank lines counted
