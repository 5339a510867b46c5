"""The per-file layouts ``pairs`` and ``libritts`` skip and report a transcript file that cannot be read or decoded
(``unreadable_text``, the file named), as VCTK does, and read the rest; each file's encoding is its own (a
byte-order mark in one file decides for that file only); ``prepare --strict`` fails on it."""

from __future__ import annotations

import codecs
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from speechtrain.cli.main import main
from speechtrain.data.manifest import detect_format, read_manifest

TEXTS = ["Oʻzbekiston katta", "Men choy ichaman", "Gʻalaba bizniki", "Toshkent shahri"]


def _wav(path: Path, seconds: float = 0.6, sr: int = 22050) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(seconds * sr)) / sr
    sf.write(str(path), (0.2 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), sr)


def _pairs(root: Path) -> None:
    """Four good pairs (one with a UTF-8 byte-order mark, one in UTF-16 with its mark), one binary .txt and one
    Latin-1 .txt."""
    for i, text in enumerate(TEXTS):
        _wav(root / f"clip{i}.wav")
        (root / f"clip{i}.txt").write_text(text + "\n", encoding="utf-8")
    (root / "clip1.txt").write_bytes(codecs.BOM_UTF8 + (TEXTS[1] + "\n").encode("utf-8"))
    (root / "clip2.txt").write_text(TEXTS[2] + "\n", encoding="utf-16")
    _wav(root / "binary.wav")
    (root / "binary.txt").write_bytes(b"\x00\x01\x02\xff\xfe" * 10)
    _wav(root / "latin.wav")
    (root / "latin.txt").write_bytes("caf\u00e9 cr\u00e8me\n".encode("latin-1"))


def _libritts(root: Path) -> None:
    """LibriTTS ``<speaker>/<chapter>/`` files, one .normalized.txt with a UTF-16 mark and an odd byte (undecodable),
    one with a UTF-8 mark (good)."""
    chapter = root / "19" / "198"
    for i, text in enumerate(TEXTS):
        _wav(chapter / f"19_198_000000_00000{i}.wav")
        (chapter / f"19_198_000000_00000{i}.normalized.txt").write_text(text, encoding="utf-8")
    (chapter / "19_198_000000_000001.normalized.txt").write_bytes(codecs.BOM_UTF8 + TEXTS[1].encode("utf-8"))
    _wav(chapter / "19_198_000000_000009.wav")
    (chapter / "19_198_000000_000009.normalized.txt").write_bytes(codecs.BOM_UTF16_LE + b"\x00\xd8a")


def test_pairs_skip_and_report_a_bad_transcript(tmp_path: Path) -> None:
    _pairs(tmp_path / "p")
    assert detect_format(tmp_path / "p") == "pairs"
    entries, problems = read_manifest(tmp_path / "p")
    assert {e.id: e.text for e in entries} == {f"clip{i}": t for i, t in enumerate(TEXTS)}
    assert sorted((p.reason, p.id) for p in problems) == [("unreadable_text", "binary"), ("unreadable_text", "latin")]
    named = {p.id: p.where for p in problems}
    assert named["binary"].startswith(str(tmp_path / "p" / "binary.txt"))
    assert named["latin"].startswith(str(tmp_path / "p" / "latin.txt"))


def test_libritts_skips_and_reports_a_bad_transcript(tmp_path: Path) -> None:
    _libritts(tmp_path / "l")
    assert detect_format(tmp_path / "l") == "libritts"
    entries, problems = read_manifest(tmp_path / "l")
    assert {e.id: e.text for e in entries} == {f"19_198_000000_00000{i}": t for i, t in enumerate(TEXTS)}
    assert [(p.reason, p.id) for p in problems] == [("unreadable_text", "19_198_000000_000009")]
    assert problems[0].where.startswith(str(tmp_path / "l" / "19" / "198" / "19_198_000000_000009.normalized.txt"))


@pytest.mark.parametrize("make", [_pairs, _libritts])
def test_prepare_keeps_the_rest_and_strict_fails(tmp_path: Path, make: object, capsys: pytest.CaptureFixture) -> None:
    make(tmp_path / "corpus")  # type: ignore[operator]
    args = ["prepare", str(tmp_path / "corpus"), "--no-progress", f"data.cache_dir={tmp_path / 'cache'}"]
    assert main(args) == 0
    out = capsys.readouterr()
    assert "unreadable_text" in out.out and "Traceback" not in out.err
    bad = 2 if make is _pairs else 1
    assert f"kept      4 of {4 + bad}" in out.out, out.out
    assert main([*args, "--strict"]) == 2
    err = capsys.readouterr().err
    assert "unreadable_text" in err and "Traceback" not in err
