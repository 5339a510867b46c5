"""Recordings as people keep them (issue 40): ``clipNN.wav`` + ``clipNN.txt`` pairs (``.lab``,
``.normalized.txt``), a LibriTTS speaker/chapter tree (never read as a classifier ``folder``), and an
audiofolder whose transcript column has another name (``data.text_column``, named in the refusal).
Each prepares with every transcript read, from the CLI and through the web UI's Data tab functions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from speechtrain.cli.main import main
from speechtrain.config import DataConfig, load_config
from speechtrain.data.dataset import SpeechDataset
from speechtrain.data.manifest import detect_format, read_manifest
from speechtrain.data.prepare import prepare_dataset
from speechtrain.errors import DataError

SR = 22050
RECIPES = Path(__file__).resolve().parents[1] / "recipes"
WORDS = ["the first take", "a second reading", "number three here", "and the fourth", "five is last"]


def _wav(path: Path, seconds: float = 0.5) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(seconds * SR)) / SR
    sf.write(path, (0.2 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), SR)


def _clips(root: Path, n: int = 5) -> Path:
    for i in range(n):
        _wav(root / f"clip{i + 1:02d}.wav")
        (root / f"clip{i + 1:02d}.txt").write_text(WORDS[i % len(WORDS)] + "\n", encoding="utf-8")
    return root


def _libritts(root: Path) -> Path:
    """Two speakers, one chapter each, two utterances: ``.normalized.txt`` and ``.original.txt`` beside each."""
    for speaker, chapter in (("84", "121123"), ("174", "50561")):
        for k in range(2):
            stem = f"{speaker}_{chapter}_{k:06d}_000001"
            folder = root / speaker / chapter
            _wav(folder / f"{stem}.wav")
            (folder / f"{stem}.normalized.txt").write_text(f"Normalized words {speaker} {k}.", encoding="utf-8")
            (folder / f"{stem}.original.txt").write_text(f"ORIGINAL {speaker}-{k}", encoding="utf-8")
        (root / speaker / chapter / f"{speaker}_{chapter}.trans.tsv").write_text("", encoding="utf-8")
    return root


def test_a_folder_of_clip_and_txt_pairs_prepares_from_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = _clips(tmp_path / "my_recordings")
    assert detect_format(root) == "pairs"  # was: "cannot tell the dataset format"
    report = tmp_path / "report.json"
    argv = ["prepare", str(root), "--require-text", "--no-progress", "--json", str(report)]
    argv += [f"data.cache_dir={tmp_path / 'cache'}", "data.eval_utterances=1"]
    assert main(argv) == 0
    got = json.loads(report.read_text())
    assert (got["format"], got["kept"], got["skipped_total"], got["empty_text_kept"]) == ("pairs", 5, 0, 0)
    # prepared with the data settings of the recipe a transcribed corpus trains with (recipes/vits_tiny.yaml)
    data = load_config(RECIPES / "vits_tiny.yaml", [f"data.manifest={root}", f"data.cache_dir={tmp_path / 'cache'}",
                                                   "data.eval_utterances=1"]).data  # fmt: skip
    texts = SpeechDataset.from_config(data, "train").texts + SpeechDataset.from_config(data, "eval").texts
    assert sorted(texts) == sorted(WORDS)


def test_nested_pairs_prefer_normalized_text_and_report_a_transcript_without_audio(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    _wav(root / "anna" / "day1" / "a.wav")
    (root / "anna" / "day1" / "a.txt").write_text("plain a", encoding="utf-8")
    (root / "anna" / "day1" / "a.normalized.txt").write_text("normalized a", encoding="utf-8")
    _wav(root / "bob" / "b.wav")
    (root / "bob" / "b.lab").write_text("aligner label b", encoding="utf-8")
    _wav(root / "bob" / "untranscribed.wav")
    (root / "bob" / "orphan.txt").write_text("no audio for me", encoding="utf-8")
    entries, problems = read_manifest(root)
    by_id = {e.id: e for e in entries}
    assert {k: (e.text, e.speaker) for k, e in by_id.items()} == {
        "a": ("normalized a", "anna"),
        "b": ("aligner label b", "bob"),
        "untranscribed": ("", "bob"),
    }
    assert [(p.reason, p.id) for p in problems] == [("missing_file", "orphan")]


def test_a_libritts_tree_is_not_a_classifier_folder(tmp_path: Path) -> None:
    root = _libritts(tmp_path / "train-clean-100")
    assert detect_format(root) == "libritts"  # was: folder (speakers as labels, every transcript dropped)
    entries, problems = read_manifest(root)
    assert not problems and len(entries) == 4
    assert all(e.text.startswith("Normalized words") for e in entries)
    assert {e.speaker for e in entries} == {"84", "174"} and all(e.label is None for e in entries)
    report = prepare_dataset(DataConfig(manifest=str(root), cache_dir=str(tmp_path / "cache"), eval_utterances=1))
    assert (report.kept, report.empty_text_kept) == (4, 0)  # was: "4 kept items have empty text"


def test_a_libritts_root_with_subsets_trains_on_train_and_evaluates_on_dev(tmp_path: Path) -> None:
    root = tmp_path / "LibriTTS"
    _libritts(root / "train-clean-100")
    _libritts(root / "dev-clean")
    assert detect_format(root) == "libritts"
    report = prepare_dataset(DataConfig(manifest=str(root), cache_dir=str(tmp_path / "cache")))
    assert (report.train, report.eval, report.empty_text_kept) == (4, 4, 0)


def test_the_ui_data_tab_prepares_pairs_and_libritts(tmp_path: Path) -> None:
    from speechtrain.ui import backend

    for name, root in (
        ("pairs", _clips(tmp_path / "clips")),
        ("libritts", _libritts(tmp_path / "LibriTTS" / "train-clean-100")),
    ):
        fmt = backend.detect_format(root)
        assert fmt == name
        report = tmp_path / f"{name}.json"
        extra = [f"data.cache_dir={tmp_path / 'cache' / name}", "data.eval_utterances=1"]
        assert main(backend.prepare_argv("vits_tiny", str(root), fmt, report, extra)) == 0
        shown = backend.data_report(report)
        assert shown.kept == 5 if name == "pairs" else shown.kept == 4
        assert not shown.skipped and shown.report["empty_text_kept"] == 0


def _audiofolder(root: Path, column: str) -> Path:
    lines = [f"file_name,{column},speaker_id"]
    for i, words in enumerate(WORDS):
        _wav(root / f"c{i}.wav")
        lines.append(f"c{i}.wav,{words},s0")
    (root / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def test_a_transcript_column_named_otherwise_is_named_in_the_refusal(tmp_path: Path) -> None:
    root = _audiofolder(tmp_path / "hf", "raw_text")
    data = DataConfig(manifest=str(root), cache_dir=str(tmp_path / "cache"), eval_utterances=1)
    with pytest.raises(DataError, match=r"columns are file_name, raw_text, speaker_id.*data\.text_column=raw_text"):
        prepare_dataset(data, require_text=True)  # was: "empty_text 5" without naming the column
    data.text_column = "raw_text"
    report = prepare_dataset(data, require_text=True)
    assert (report.kept, report.empty_text_kept) == (5, 0)
    texts = SpeechDataset.from_config(data, "train").texts + SpeechDataset.from_config(data, "eval").texts
    assert sorted(texts) == sorted(WORDS)
    data.text_column = "transcrption"
    with pytest.raises(DataError, match=r"text_column=transcrption is not a column.*file_name, raw_text, speaker_id"):
        prepare_dataset(data, require_text=True)
    with pytest.raises(DataError, match="data.format=pairs has no named columns"):
        read_manifest(_clips(tmp_path / "clips"), "pairs", text_column="raw_text")


@pytest.mark.slow
def test_prepare_then_plan_then_train_of_pairs_prepares_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new user's first commands on a folder of own recordings: `prepare DATA` (no --config), then `plan` and
    `train` with the README's recipe. The cache is computed once (it was three times: prepare's defaults had
    fmax 8000, the recipe None), and prepare says which recipe's settings it prepared with."""
    root = _clips(tmp_path / "my_recordings", n=8)
    cache, recipe = f"data.cache_dir={tmp_path / 'cache'}", str(RECIPES / "vits_tiny.yaml")
    assert main(["prepare", str(root), "--no-progress", cache]) == 0
    assert "preparing with the data settings of vits_tiny.yaml" in capsys.readouterr().err
    assert main(["plan", "--config", recipe, f"data.manifest={root}", cache]) == 0
    plan = capsys.readouterr()
    run = ["train", "--config", recipe, f"data.manifest={root}", cache, "train.max_steps=1", "train.progress=false"]
    assert main([*run, f"train.output_dir={tmp_path / 'run'}", "train.eval_every=1000"]) == 0
    train = capsys.readouterr()
    for said in (plan.out + plan.err, train.out + train.err):
        assert "preparing" not in said and "prepared the feature cache" not in said
    # another recipe's data settings prepare again, and say why in one line
    assert main(["plan", "--config", recipe, f"data.manifest={root}", cache, "data.fmax=8000"]) == 0
    why = [line for line in capsys.readouterr().err.splitlines() if "preparing" in line]
    assert len(why) == 1 and "stale (settings changed: fmax None -> 8000.0)" in why[0], why
