"""Bad input: every broken item is skipped with its id and reason, every good one kept, --strict fails."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from speechtrain.cli.main import main
from speechtrain.config import DataConfig, load_config
from speechtrain.data.dataset import SpeechDataset
from speechtrain.data.manifest import read_manifest
from speechtrain.data.prepare import prepare_dataset
from speechtrain.errors import DataError


def _tone(seconds: float, sr: int = 22050, channels: int = 1) -> np.ndarray:
    t = np.arange(int(seconds * sr)) / sr
    wave = 0.3 * np.sin(2 * np.pi * 220 * t)
    return np.stack([wave, -wave], axis=1) if channels == 2 else wave


def _broken_ljspeech(root: Path) -> Path:
    """An LJSpeech folder with 5 good items (2 needing conversion) and one of each kind of breakage."""
    wavs = root / "wavs"
    wavs.mkdir(parents=True)
    for i in range(3):
        sf.write(wavs / f"good{i}.wav", _tone(0.8 + 0.1 * i), 22050, subtype="PCM_16")
    sf.write(wavs / "hi_rate.wav", _tone(0.7, sr=48000), 48000, subtype="PCM_16")
    sf.write(wavs / "stereo.wav", _tone(0.6, channels=2), 22050, subtype="PCM_16")
    (wavs / "garbage.wav").write_bytes(os.urandom(4000))
    sf.write(wavs / "whole.wav", _tone(1.0), 22050, subtype="PCM_16")
    data = (wavs / "whole.wav").read_bytes()
    (wavs / "truncated.wav").write_bytes(data[: len(data) // 2])
    (wavs / "whole.wav").unlink()
    sf.write(wavs / "zero.wav", np.zeros(0, dtype=np.int16), 22050, subtype="PCM_16")
    sf.write(wavs / "short.wav", _tone(0.1), 22050, subtype="PCM_16")
    sf.write(wavs / "long.wav", _tone(2.5), 22050, subtype="PCM_16")
    sf.write(wavs / "notext.wav", _tone(0.5), 22050, subtype="PCM_16")
    lines = [
        "good0|Good zero.|Good zero.",
        "good1|Good one.|Good one.",
        "good2|Good two|Good two, normalized.",
        "hi_rate|Recorded at forty eight kilohertz.|",
        "stereo|Two channels.|Two channels.",
        "missing|This file does not exist.|This file does not exist.",
        "garbage|Random bytes.|Random bytes.",
        "truncated|Cut in half.|Cut in half.",
        "zero|No samples.|No samples.",
        "short|Too short.|Too short.",
        "long|Too long.|Too long.",
        "notext||",
        "toomany|a|b|c",
        "fieldless",
        "good0|Listed twice.|Listed twice.",
    ]
    (root / "metadata.csv").write_text("\n".join(lines) + "\n")
    return root


EXPECTED = {
    "missing": "missing_file",
    "garbage": "unreadable_audio",
    "truncated": "truncated_audio",
    "zero": "empty_audio",
    "short": "too_short",
    "long": "too_long",
    "notext": "empty_text",
}
GOOD = ["good0", "good1", "good2", "hi_rate", "stereo"]


@pytest.fixture
def broken(tmp_path: Path) -> Path:
    return _broken_ljspeech(tmp_path / "broken")


def _cfg(manifest: Path, *extra: str) -> DataConfig:
    return load_config(
        None, [f"data.manifest={manifest}", "data.max_duration=2.0", "data.eval_utterances=0", *extra]
    ).data


def test_every_broken_item_named_every_good_item_kept(broken: Path) -> None:
    report = prepare_dataset(_cfg(broken), workers=1, progress=False, require_text=True)
    by_id = {p.id: p for p in report.problems if p.id is not None}
    for uid, reason in EXPECTED.items():
        assert by_id[uid].reason == reason, (uid, by_id[uid])
    assert by_id["good0"].reason == "duplicate_id" and by_id["toomany"].reason == "malformed_line"
    malformed = [p for p in report.problems if p.reason == "malformed_line"]
    assert {p.where.rsplit(":", 1)[1] for p in malformed} == {"13", "14"}  # file:line of the bad csv lines
    assert all(str(broken / "metadata.csv") in p.where for p in malformed)
    assert report.kept == len(GOOD) and report.listed == 15
    assert (report.resampled, report.downmixed) == (1, 1)
    assert len(report.problems) == len(EXPECTED) + 3
    counts = report.to_dict()["skipped_counts"]
    assert counts["malformed_line"] == 2 and sum(counts.values()) == len(report.problems)
    ds = SpeechDataset.from_config(_cfg(broken), "train")
    assert sorted(ds.ids) == sorted(GOOD)
    item = ds[ds.ids.index("hi_rate")]
    assert item["audio"].shape == (ds.frames[ds.ids.index("hi_rate")] * 256,)
    assert abs(item["audio"].shape[0] / 22050 - 0.7) < 256 / 22050 + 1e-6  # resampled to 22050 Hz
    assert ds[ds.ids.index("good2")]["text"] == "Good two, normalized."


def test_empty_text_kept_when_text_not_required(broken: Path) -> None:
    report = prepare_dataset(_cfg(broken), workers=1, progress=False)
    assert "notext" not in {p.id for p in report.problems}
    assert report.kept == len(GOOD) + 1 and report.empty_text_kept == 1


def test_strict_fails_before_feature_work(broken: Path) -> None:
    with pytest.raises(DataError, match=r"--strict: 10 problem\(s\).*missing_file"):
        prepare_dataset(_cfg(broken), workers=1, progress=False, strict=True, require_text=True)
    assert not (broken / ".speechtrain_cache" / "features").exists()


def test_cli_exit_codes_and_json_report(broken: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report_path = tmp_path / "r.json"
    args = ["prepare", str(broken), "--no-progress", "--require-text", "--json", str(report_path)]
    assert main([*args, "data.max_duration=2.0", "data.eval_utterances=0"]) == 0
    out = capsys.readouterr().out
    assert "kept      5 of 15" in out and "truncated_audio" in out and "truncated" in out
    report = json.loads(report_path.read_text())
    assert report["kept"] == 5 and report["skipped"]["missing_file"] == ["missing"]
    assert set(report["duration_s"]) == {"min", "median", "p95", "max"} and report["hours"] > 0
    assert main(["prepare", str(broken), "--strict", "--no-progress", "data.max_duration=2.0"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("prepare: ")]  # stages
    assert err[0].startswith("error: --strict") and "Traceback" not in "\n".join(err)
    assert main(["prepare", str(tmp_path / "nowhere"), "--no-progress"]) == 2
    assert "data not found" in capsys.readouterr().err


def test_jsonl_manifest_problems_with_line_numbers(tmp_path: Path) -> None:
    root = tmp_path / "j"
    (root / "audio").mkdir(parents=True)
    sf.write(root / "audio" / "a.wav", _tone(0.5), 22050, subtype="PCM_16")
    absolute = tmp_path / "elsewhere.wav"
    sf.write(absolute, _tone(0.5), 16000, subtype="PCM_16")
    rows = [
        json.dumps({"audio_filepath": "audio/a.wav", "duration": 0.5, "text": "hello", "speaker": "bob"}),
        json.dumps({"audio_filepath": str(absolute), "text": "there", "speaker": "amy", "label": "x"}),
        '{"audio_filepath": "audio/a.wav", "text": ',
        json.dumps({"text": "no audio key"}),
        json.dumps({"audio_filepath": "audio/a.wav", "duration": "long", "id": "typed"}),
        json.dumps(["not", "an", "object"]),
        json.dumps({"audio_filepath": "audio/gone.wav", "text": "missing"}),
    ]
    manifest = root / "train.jsonl"
    manifest.write_text("\n".join(rows) + "\n")
    entries, problems = read_manifest(manifest)
    assert [e.id for e in entries] == ["a", "elsewhere", "gone"]
    assert [p.where.rsplit(":", 1)[1] for p in problems] == ["3", "4", "5", "6"]
    assert "missing key 'audio_filepath'" in problems[1].detail and "'duration' must be" in problems[2].detail
    report = prepare_dataset(_cfg(manifest), workers=1, progress=False)
    assert report.kept == 2 and report.resampled == 1 and report.skipped["missing_file"] == ["gone"]
    ds = SpeechDataset.from_config(_cfg(manifest), "train", fields=("tokens",))
    assert ds.speakers == ["amy", "bob"] and ds[0]["speaker"] == 1 and ds[1]["speaker"] == 0
    assert ds.labels == ["x"] and ds[0]["label"] == -1 and ds[1]["label"] == 0
    assert ds.tokenizer.decode(ds[0]["tokens"]) == "hello" and "mel" not in ds[0]


def test_labelled_folder(tmp_path: Path) -> None:
    root = tmp_path / "classes"
    for label in ("dog", "cat"):
        (root / label).mkdir(parents=True)
        for i in range(2):
            sf.write(root / label / f"{label}{i}.wav", _tone(0.5 + 0.1 * i), 22050, subtype="PCM_16")
    (root / "cat" / "broken.wav").write_bytes(b"RIFF0000WAVEjunk")
    (root / "cat" / "notes.txt").write_text("not audio, ignored")
    report = prepare_dataset(_cfg(root), workers=1, progress=False)
    assert report.format == "folder" and report.kept == 4
    assert report.skipped == {"unreadable_audio": ["cat/broken"]}
    ds = SpeechDataset.from_config(_cfg(root), "train", fields=("mel",))
    assert ds.labels == ["cat", "dog"]
    assert {ds.ids[i]: ds[i]["label"] for i in range(len(ds))}["dog/dog1"] == 1
    assert ds[0]["mel"].shape == (80, ds.frames[0]) and ds[0]["text"] == ""


def test_unexpected_errors_per_file_are_recorded_not_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import speechtrain.data.prepare as prep

    root = tmp_path / "lj"
    (root / "wavs").mkdir(parents=True)
    for uid in ("ok", "boom"):
        sf.write(root / "wavs" / f"{uid}.wav", _tone(0.5), 22050, subtype="PCM_16")
    sf.write(root / "wavs" / "tiny.wav", _tone(0.005), 22050, subtype="PCM_16")  # 110 samples < one hop
    (root / "metadata.csv").write_text("ok|Fine.|Fine.\nboom|Explodes.|Explodes.\ntiny|Tiny.|Tiny.\n")
    real = prep.compute_features

    def flaky(path: str, settings: dict) -> tuple:
        if path.endswith("boom.wav"):
            raise RuntimeError("simulated bug")
        return real(path, settings)

    monkeypatch.setattr(prep, "compute_features", flaky)
    cfg = _cfg(root, "data.min_duration=0")
    report = prepare_dataset(cfg, workers=1, progress=False)
    assert report.kept == 1 and report.skipped == {"feature_error": ["boom"], "too_short": ["tiny"]}
    assert "simulated bug" in report.problems[0].detail or "simulated bug" in report.problems[1].detail
    monkeypatch.setattr(prep, "compute_features", real)
    again = prepare_dataset(cfg, workers=1, progress=False)  # the failure is retried, the file fact is not
    assert again.kept == 2 and again.computed == 1 and again.skipped == {"too_short": ["tiny"]}


def test_truncated_flac_found_when_decoding(tmp_path: Path) -> None:
    sf.write(tmp_path / "whole.flac", _tone(1.0), 22050)
    data = (tmp_path / "whole.flac").read_bytes()
    (tmp_path / "cut.flac").write_bytes(data[: len(data) // 2])  # the header still says 1 s
    rows = [{"audio_filepath": name, "text": "x"} for name in ("whole.flac", "cut.flac")]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = prepare_dataset(_cfg(tmp_path / "m.jsonl"), workers=1, progress=False)
    assert report.kept == 1 and report.skipped == {"truncated_audio": ["cut"]}


# ---------------------------------------------------------------- issue 14, defect 12: said, not silent
def test_float_samples_beyond_full_scale_are_reported(tmp_path: Path) -> None:
    root = tmp_path / "lj"
    (root / "wavs").mkdir(parents=True)
    sf.write(root / "wavs" / "loud.wav", 5 * _tone(0.5), 22050, subtype="FLOAT")  # peaks at 1.5: clipped
    sf.write(root / "wavs" / "fine.wav", 0.5 * _tone(0.5), 22050, subtype="FLOAT")
    (root / "metadata.csv").write_text("loud|Loud.|Loud.\nfine|Fine.|Fine.\n")
    report = prepare_dataset(_cfg(root), workers=1, progress=False)
    assert report.kept == 2 and list(report.clipped) == ["loud"] and report.clipped["loud"] > 0
    assert "clipped   1 float file(s)" in report.summary() and report.to_dict()["clipped"] == report.clipped


def test_m4a_in_a_labelled_folder_is_reported(tmp_path: Path) -> None:
    root = tmp_path / "classes"
    (root / "dog").mkdir(parents=True)
    sf.write(root / "dog" / "a.wav", _tone(0.5), 22050, subtype="PCM_16")
    # mp3 is read (libsndfile >= 1.1); m4a/aac is not: reported, never passed over in silence
    (root / "dog" / "b.m4a").write_bytes(b"ftyp not decoded")
    (root / "cat").mkdir()
    (root / "cat" / "c.m4a").write_bytes(b"ftyp not decoded")  # a folder of m4a only
    entries, problems = read_manifest(str(root), "folder")
    assert [e.id for e in entries] == ["dog/a"]
    assert sorted((p.reason, p.id) for p in problems) == [("unreadable_audio", "cat/c"), ("unreadable_audio", "dog/b")]
    assert "ffmpeg" in problems[0].detail
