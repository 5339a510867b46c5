"""Dataset layouts (XTTS/Coqui CSV, Common Voice, VCTK, LJSpeech, JSONL) and metadata encodings:
each read with the right texts, speakers and split; each misuse a clear DataError; nothing good dropped."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from speechtrain.config import DataConfig
from speechtrain.data.dataset import SpeechDataset
from speechtrain.data.manifest import detect_format, read_manifest
from speechtrain.data.prepare import prepare_dataset
from speechtrain.errors import DataError

UZ = ["Oʻzbekiston katta", "Men choy ichaman", "Gʻalaba bizniki", "Toshkent shahri"]


def _wav(path: Path, seconds: float = 0.6, sr: int = 22050) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(seconds * sr)) / sr
    sf.write(path, 0.3 * np.sin(2 * np.pi * 220 * t), sr, subtype="PCM_16")


def _xtts(root: Path, rows: list[tuple[str, str, str]], name: str = "train.csv") -> Path:
    lines = ["audio_file|text|speaker_name"]
    for audio, text, speaker in rows:
        _wav(root / audio)
        lines.append(f"{audio}|{text}|{speaker}")
    (root / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def test_xtts_pair_is_the_split_with_texts_and_speakers(tmp_path: Path) -> None:
    root = tmp_path / "xtts"
    _xtts(root, [(f"wavs/t{i}.wav", UZ[i], f"spk{i % 2}") for i in range(3)])
    _xtts(root, [("wavs/e0.wav", UZ[3], "spk1")], "eval.csv")
    assert detect_format(root) == "xtts"
    entries, problems = read_manifest(root)
    assert (
        not problems
        and [e.text for e in entries] == UZ[:3]
        and [e.speaker for e in entries] == ["spk0", "spk1", "spk0"]
    )
    assert all(Path(e.audio_path).is_file() for e in entries)
    data = DataConfig(manifest=str(root), cache_dir=str(tmp_path / "cache"), language="uz")
    report = prepare_dataset(data)
    assert (report.train, report.eval, report.problems) == (3, 1, [])
    evaluation = SpeechDataset.from_config(data, "eval")
    assert evaluation.texts == [UZ[3]] and evaluation.speakers == ["spk0", "spk1"]


def test_misread_layouts_are_named_errors(tmp_path: Path) -> None:
    # an XTTS csv read as LJSpeech: the header is the error, not an item
    root = _xtts(tmp_path / "a", [("wavs/a.wav", "salom", "s")], "metadata.csv")
    assert detect_format(root) == "xtts"
    with pytest.raises(DataError, match="data.format=xtts"):
        read_manifest(root / "metadata.csv", "ljspeech")
    # XTTS without a header: the columns are named
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "train.csv").write_text("wavs/a.wav|salom|s\n", encoding="utf-8")
    with pytest.raises(DataError, match="header row with the columns audio_file"):
        read_manifest(tmp_path / "b", "xtts")
    # XTTS rows without their header: the speaker column would become the transcript
    (tmp_path / "b" / "metadata.csv").write_text("wavs/a.wav|salom dunyo|spk1\n", encoding="utf-8")
    with pytest.raises(DataError, match="without its header row.*data.format=xtts"):
        read_manifest(tmp_path / "b" / "metadata.csv")
    # two layouts in one folder: both named, nothing guessed
    both = _xtts(tmp_path / "c", [("wavs/a.wav", "salom", "s")])
    (both / "metadata.csv").write_text("a|salom\n", encoding="utf-8")
    with pytest.raises(DataError, match="several dataset layouts.*data.format=ljspeech or data.format=xtts"):
        detect_format(both)


def test_ljspeech_paths_as_ids_resolve(tmp_path: Path) -> None:
    _wav(tmp_path / "wavs" / "x.wav")
    (tmp_path / "metadata.csv").write_text("wavs/x.wav|salom\n", encoding="utf-8")
    entries, problems = read_manifest(tmp_path)
    assert not problems and entries[0].id == "x" and entries[0].audio_path == str((tmp_path / "wavs/x.wav").absolute())


def test_common_voice_tsv(tmp_path: Path) -> None:
    header = "client_id\tpath\tsentence\tup_votes"
    rows = [f"c{i % 2}\tclip{i}.wav\t{UZ[i]}\t2" for i in range(3)]
    for i in range(3):
        _wav(tmp_path / "clips" / f"clip{i}.wav")
    (tmp_path / "validated.tsv").write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    assert detect_format(tmp_path) == "commonvoice"
    entries, problems = read_manifest(tmp_path)
    assert not problems and [e.text for e in entries] == UZ[:3] and [e.speaker for e in entries] == ["c0", "c1", "c0"]
    assert [e.id for e in entries] == ["clip0", "clip1", "clip2"]


def test_vctk_folders(tmp_path: Path) -> None:
    for spk, uid, text in (("p225", "p225_001", UZ[0]), ("p226", "p226_001", UZ[1])):
        (tmp_path / "txt" / spk).mkdir(parents=True)
        (tmp_path / "txt" / spk / f"{uid}.txt").write_text(text + "\n", encoding="utf-8")
        _wav(tmp_path / "wav48_silence_trimmed" / spk / f"{uid}_mic1.wav")
        _wav(tmp_path / "wav48_silence_trimmed" / spk / f"{uid}_mic2.wav")
    _wav(tmp_path / "wav48_silence_trimmed" / "p226" / "p226_002_mic1.wav")  # audio without a transcript: kept
    assert detect_format(tmp_path) == "vctk"
    entries, problems = read_manifest(tmp_path)
    got = {(e.id, e.speaker, e.text, Path(e.audio_path).name) for e in entries}
    assert not problems and got == {
        ("p225_001", "p225", UZ[0], "p225_001_mic1.wav"),
        ("p226_001", "p226", UZ[1], "p226_001_mic1.wav"),
        ("p226_002", "p226", "", "p226_002_mic1.wav"),
    }


def _vctk_with_one_bad_transcript(root: Path) -> None:
    for spk, uid, text in (("p225", "p225_001", UZ[0]), ("p226", "p226_001", UZ[1]), ("p226", "p226_002", UZ[3])):
        (root / "txt" / spk).mkdir(parents=True, exist_ok=True)
        (root / "txt" / spk / f"{uid}.txt").write_text(text + "\n", encoding="utf-8")
        _wav(root / "wav48_silence_trimmed" / spk / f"{uid}_mic1.wav")
    _wav(root / "wav48_silence_trimmed" / "p226" / "x_mic1.wav")
    (root / "txt" / "p226" / "x.txt").write_bytes("caf\u00e9 cr\u00e8me\n".encode("latin-1"))  # not UTF-8


def test_vctk_skips_and_reports_one_undecodable_transcript(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """One latin-1 txt/p226/x.txt among UTF-8 ones stopped the corpus ("not UTF-8 text", exit 2, nothing prepared;
    with data.encoding=utf-8: "cannot be decoded as data.encoding=utf-8"): now it is that item's problem."""
    from speechtrain.cli.main import main

    _vctk_with_one_bad_transcript(tmp_path / "vctk")
    for encoding in (None, "utf-8"):
        entries, problems = read_manifest(tmp_path / "vctk", encoding=encoding)
        assert sorted(e.id for e in entries) == ["p225_001", "p226_001", "p226_002"]
        assert [(p.reason, p.id) for p in problems] == [("unreadable_text", "x")]
        assert (
            problems[0].where == f"{tmp_path / 'vctk' / 'txt' / 'p226' / 'x.txt'}:1"
            and "byte 0xe9" in problems[0].detail
        )
    with pytest.raises(DataError, match="data.encoding='klingon' is not a known text encoding"):
        read_manifest(tmp_path / "vctk", encoding="klingon")
    args = ["prepare", str(tmp_path / "vctk"), "--no-progress", f"data.cache_dir={tmp_path / 'cache'}"]
    assert main(args) == 0
    out = capsys.readouterr()
    assert "kept      3 of 4" in out.out and "unreadable_text 1" in out.out and "x.txt" in out.out + out.err
    assert main([*args, "--strict"]) == 2
    err = capsys.readouterr().err
    assert "unreadable_text: x" in err and "x.txt" in err and "Traceback" not in err


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16"])
def test_metadata_with_a_byte_order_mark_is_read(tmp_path: Path, encoding: str) -> None:
    _wav(tmp_path / "wavs" / "a.wav")
    (tmp_path / "metadata.csv").write_text("a|Ўзбекистон\n", encoding=encoding)
    entries, problems = read_manifest(tmp_path)
    assert not problems and entries[0].text == "Ўзбекистон" and entries[0].id == "a"


def test_metadata_not_in_utf8_is_one_clear_error_or_read_as_declared(tmp_path: Path) -> None:
    _wav(tmp_path / "wavs" / "a.wav")
    _wav(tmp_path / "wavs" / "b.wav")
    (tmp_path / "metadata.csv").write_bytes("a|plain\nb|caf\u00e9 cr\u00e8me\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"metadata.csv:2: not UTF-8.*data.encoding"):
        read_manifest(tmp_path)
    entries, problems = read_manifest(tmp_path, encoding="latin-1")
    assert not problems and [e.text for e in entries] == ["plain", "caf\u00e9 cr\u00e8me"]
    (tmp_path / "metadata.csv").write_bytes("a|plain\n".encode("utf-16-le"))  # no byte-order mark
    with pytest.raises(DataError, match="UTF-16 without a byte-order mark.*data.encoding=utf-16-le"):
        read_manifest(tmp_path)
    with pytest.raises(ValueError, match="unknown text encoding"):
        DataConfig(manifest=str(tmp_path), encoding="no-such-codec")
