"""``speechtrain score``: a folder (or list) of generated audio against its recordings, every metric of the kind
beside its ceiling (the same metric on the recordings themselves), printed and written as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from speechtrain.cli.main import main
from speechtrain.quality.catalog import KINDS


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """An espeak-ng corpus of 3 recordings, and a generated folder: the first recording as is, the second with
    noise at 10 dB SNR, the third missing."""
    from speechtrain.data.speak import make_language_corpus

    root = tmp_path_factory.mktemp("score")
    corpus = Path(make_language_corpus(root / "en", "en", utterances=3, seed=0, eval_count=0))
    wavs = sorted((corpus / "wavs").glob("*.wav"))
    gen = root / "generated"
    gen.mkdir()
    audio, rate = sf.read(str(wavs[0]), dtype="float32")
    sf.write(str(gen / wavs[0].name), audio, rate)
    audio, rate = sf.read(str(wavs[1]), dtype="float32")
    noise = np.random.default_rng(0).normal(0.0, float(np.std(audio)) / np.sqrt(10.0), audio.shape)
    sf.write(str(gen / wavs[1].name), (audio + noise).astype(np.float32), rate)
    return corpus, gen


@pytest.mark.parametrize("kind", ["vocoder", "tts"])
def test_score_two_folders_gives_every_metric_beside_its_ceiling(
    folders: tuple[Path, Path], kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus, gen = folders
    out = tmp_path / "score.json"
    assert main(["score", str(gen), "--references", str(corpus), "--kind", kind, "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    rows = {r["metric"]: r for r in result["rows"]}
    assert set(rows) == set(KINDS[kind])  # every metric of the kind (their packages are installed here)
    assert result["items"] == 2 and len(result["missing_files"]) == 1  # the third is listed, not scored
    for name, row in rows.items():
        assert row["model"] is not None and row["recordings"] is not None, name
        if row["unit"] == "dB":  # a recording against itself: no distortion; the generated pair: some
            assert row["recordings"] == pytest.approx(0.0, abs=1e-6) and row["model"] > 0.1
    if kind == "vocoder":
        assert rows["pesq"]["recordings"] > 4.4 > rows["pesq"]["model"]
    printed = capsys.readouterr().out
    assert "recordings" in printed and "no generated file for 1 references" in printed


def test_score_takes_a_list_file_and_names_a_missing_path(folders: tuple[Path, Path], tmp_path: Path) -> None:
    from speechtrain.recipes.score import score_audio

    corpus, gen = folders
    listing = tmp_path / "list.txt"
    first = sorted(gen.glob("*.wav"))[0]
    listing.write_text(f"{first.stem}|{first}\n")
    result = score_audio(listing, corpus, "vocoder")
    assert len(result.missing_files) == 2 and {r.metric for r in result.rows} == set(KINDS["vocoder"])
    listing.write_text("nowhere.wav\n")
    with pytest.raises(Exception, match=r"list.txt:1: nowhere.wav not found"):
        score_audio(listing, corpus, "vocoder")


def test_asr_pocketsphinx_absent_is_one_line_with_the_install_hint(
    folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util

    from speechtrain.quality import pocketsphinx_asr

    real = importlib.util.find_spec
    monkeypatch.setattr(
        pocketsphinx_asr.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "pocketsphinx" else real(name, *a),
    )
    corpus, gen = folders
    assert main(["score", str(gen), "--references", str(corpus), "--asr", "pocketsphinx"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    assert "--asr=pocketsphinx needs the pocketsphinx package" in err[0] and "pip install pocketsphinx" in err[0]


@pytest.mark.slow
def test_asr_pocketsphinx_reads_cer_beside_the_recordings(folders: tuple[Path, Path], tmp_path: Path) -> None:
    pytest.importorskip("pocketsphinx")
    from speechtrain.recipes.score import score_audio

    corpus, gen = folders
    result = score_audio(gen, corpus, "tts", asr="pocketsphinx")
    cer = {r.metric: r for r in result.rows}["cer"]
    assert cer.model is not None and cer.recordings is not None and 0.0 <= cer.recordings
    assert [r.metric for r in result.rows if r.metric.startswith("cer")] == ["cer"]  # its ceiling beside it, no row


def test_score_folds_case_and_reads_numbers_by_the_language(
    folders: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--language reaches cer: Turkish folds I to ı (so an ASR writing "ILIK" read "ılık" right), elsewhere to i."""
    import speechtrain.recipes.score as score

    corpus, _ = folders
    refs, gen = tmp_path / "refs", tmp_path / "gen"
    refs.mkdir(), gen.mkdir()
    audio, rate = sf.read(str(sorted((corpus / "wavs").glob("*.wav"))[0]), dtype="float32")
    for folder in (refs, gen):
        sf.write(str(folder / "clip.wav"), audio, rate)
    (refs / "clip.txt").write_text("ılık\n", encoding="utf-8")
    monkeypatch.setattr(score, "_asr", lambda *_: lambda audio, rate: "ILIK")

    def cer(language: str) -> float:
        result = score.score_audio(gen, refs, "tts", asr="stub", fmt="pairs", language=language)
        return {r.metric: r.model for r in result.rows}["cer"]

    assert cer("tr") == 0.0
    assert cer("und") == pytest.approx(0.5)
