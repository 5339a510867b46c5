"""Layouts that never take a column for the text (issue 41): a speaker column is found by its statistics in
any script, and quotes are read as CSV reads them (a quoted ``|``, a quoted line break) in the LJSpeech and
XTTS readers, while LJSpeech's own unclosed quotes stay text. Each on a corpus written here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from speechtrain.cli.main import main
from speechtrain.data.manifest import read_manifest
from speechtrain.errors import DataError

SR = 22050


def _tone(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, (0.1 * np.sin(2 * np.pi * 220 * np.arange(SR // 2) / SR)).astype(np.float32), SR)


def _lj(root: Path, body: str, ids: list[str]) -> Path:
    for uid in ids:
        _tone(root / "wavs" / f"{uid}.wav")
    (root / "metadata.csv").write_text(body, encoding="utf-8")
    return root


SPEAKER_COLUMNS = {
    "th": (
        ["แม่ทำอาหารอร่อย", "เขาไปโรงเรียน", "ฉันชอบกินข้าว", "วันนี้อากาศดี", "พรุ่งนี้ฝนตก", "น้องนอนหลับ"],
        ["สมชาย", "สมหญิง"],
    ),
    "ja": (
        ["東京に住んでいます", "今日は晴れです", "本を読みました", "駅まで歩きます", "雨が降ります", "猫が好きです"],
        ["田中", "佐藤"],
    ),
}


@pytest.mark.parametrize("language", list(SPEAKER_COLUMNS))
def test_a_speaker_column_without_a_header_is_refused_in_any_script(tmp_path: Path, language: str) -> None:
    texts, speakers = SPEAKER_COLUMNS[language]
    ids = [f"{language}{i:02d}" for i in range(len(texts))]
    body = "".join(f"{uid}|{t}|{speakers[i % 2]}\n" for i, (uid, t) in enumerate(zip(ids, texts)))
    root = _lj(tmp_path / language, body, ids)
    with pytest.raises(DataError, match="third column looks like speaker names.*id\\|text\\|speaker"):
        read_manifest(root)
    args = ["prepare", str(root), f"data.cache_dir={tmp_path / 'c'}", f"data.language={language}", "--strict"]
    assert main(args) == 2
    (root / "metadata.csv").write_text("id|text|speaker\n" + body, encoding="utf-8")
    entries, _ = read_manifest(root)
    assert [e.text for e in entries] == texts and {e.speaker for e in entries} == set(speakers)


def test_a_quoted_bar_keeps_the_whole_text(tmp_path: Path) -> None:
    body = 'sw05|"Alisema | habari yako" kisha akaondoka.\nsw06|Habari za asubuhi.\n'
    entries, problems = read_manifest(_lj(tmp_path / "sw", body, ["sw05", "sw06"]))
    assert not problems and [e.id for e in entries] == ["sw05", "sw06"]
    assert entries[0].text == "Alisema | habari yako kisha akaondoka."


def test_a_quoted_line_break_is_one_ljspeech_text(tmp_path: Path) -> None:
    body = 'sw07|"Alisema habari\nyako" kisha akaondoka.\nsw08|Habari za asubuhi.\n'
    entries, problems = read_manifest(_lj(tmp_path / "sw", body, ["sw07", "sw08"]))
    assert not problems and [e.id for e in entries] == ["sw07", "sw08"]
    assert entries[0].text == "Alisema habari\nyako kisha akaondoka."


def test_ljspeechs_own_quotes_stay_text(tmp_path: Path) -> None:
    body = (
        'LJ1|"The earliest book," he said|"The earliest book," he said\n'
        'LJ2|He said "go on|He said "go on\n'
        'LJ3|"An open quote|"An open quote\n'
        'LJ4|and its close."|and its close."\n'
        'LJ5|"Two fields, open\n'
        'LJ6|and closed."\n'
    )
    ids = ["LJ1", "LJ2", "LJ3", "LJ4", "LJ5", "LJ6"]
    entries, problems = read_manifest(_lj(tmp_path / "lj", body, ids))
    assert not problems and [e.id for e in entries] == ids
    assert [e.text for e in entries] == [
        '"The earliest book," he said',
        'He said "go on',
        '"An open quote',
        'and its close."',
        '"Two fields, open',
        'and closed."',
    ]


def test_an_xtts_comma_csv_with_a_quoted_line_break_keeps_the_row(tmp_path: Path) -> None:
    for name in ("a", "b"):
        _tone(tmp_path / "wavs" / f"{name}.wav")
    body = 'audio_file,text,speaker_name\nwavs/a.wav,"Line one,\nline two.",spk1\nwavs/b.wav,Plain text.,spk2\n'
    (tmp_path / "metadata.csv").write_text(body, encoding="utf-8")
    entries, problems = read_manifest(tmp_path / "metadata.csv", "xtts")
    assert not problems and [e.text for e in entries] == ["Line one,\nline two.", "Plain text."]
    assert [e.speaker for e in entries] == ["spk1", "spk2"]
