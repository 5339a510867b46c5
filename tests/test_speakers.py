"""Speakers by name (issue 29): a multi-speaker VITS run keeps its speakers' names (``model.speakers`` in the
run's config.yaml, in id order) and ``synthesize --speaker NAME`` takes them (it failed: "must be an integer
id"); an unknown name is a one-line error listing them. GPT-TTS, which has no speaker conditioning, refuses
multi-speaker data instead of pooling the voices silently (``model.pool_speakers=true`` mixes them on purpose)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytest.importorskip("espeakng_loader")
pytestmark = [pytest.mark.usefixtures("one_torch_thread")]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def two_speakers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An XTTS-layout Uzbek corpus whose two espeak voices are the speakers p225 and p226."""
    from speechtrain.data.speak import make_language_corpus

    root = make_language_corpus(tmp_path_factory.mktemp("spk") / "uz", "uz", voices=("", "+f3"), layout="xtts")
    for name in ("train.csv", "eval.csv"):
        text = (root / name).read_text(encoding="utf-8")
        (root / name).write_text(text.replace("|spk0\n", "|p225\n").replace("|spk1\n", "|p226\n"), encoding="utf-8")
    return root


def _train(recipe: str, corpus: Path, tmp: Path, *extra: str) -> int:
    from speechtrain.cli.main import main

    return main(
        [
            "train",
            "--config",
            str(ROOT / "recipes" / f"{recipe}.yaml"),
            f"data.manifest={corpus}",
            f"data.cache_dir={tmp / 'cache'}",
            "data.language=uz",
            f"train.output_dir={tmp / 'run'}",
            "train.max_steps=2",
            "train.eval_every=2",
            "train.save_every=2",
            "train.eval_audio_samples=0",
            "train.progress=false",
            *extra,
        ]
    )


@pytest.mark.slow
def test_vits_keeps_speaker_names_and_synthesize_takes_them(
    two_speakers: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from speechtrain.cli.main import main

    assert _train("vits_tiny", two_speakers, tmp_path, "model.n_speakers=2") == 0
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text(encoding="utf-8"))["model"]
    assert saved["speakers"] == ["p225", "p226"]
    capsys.readouterr()
    for speaker in ("p226", "1", "p225"):
        out = tmp_path / f"{speaker}.wav"
        args = ["synthesize", str(tmp_path / "run"), "--text", "Salom dunyo.", "--speaker", speaker, "--out", str(out)]
        assert main(args) == 0, capsys.readouterr().err
        assert out.stat().st_size > 1000
    bad = [
        "synthesize",
        str(tmp_path / "run"),
        "--text",
        "Salom.",
        "--speaker",
        "p999",
        "--out",
        str(tmp_path / "x.wav"),
    ]
    assert main(bad) == 2
    err = capsys.readouterr().err
    assert "no speaker 'p999'" in err and "0=p225, 1=p226" in err and "Traceback" not in err


@pytest.mark.slow
def test_gpt_tts_refuses_several_speakers_unless_pooled(
    two_speakers: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _train("gpt_tts_tiny", two_speakers, tmp_path / "a") == 2
    err = capsys.readouterr().err
    assert "2 speakers (p225, p226)" in err and "model.pool_speakers=true" in err and "Traceback" not in err
    assert _train("gpt_tts_tiny", two_speakers, tmp_path / "b", "model.pool_speakers=true") == 0


def test_a_speaker_name_maps_to_its_id_without_training() -> None:
    from speechtrain.config import load_config
    from speechtrain.errors import UserError
    from speechtrain.recipes.common import build_task

    cfg = load_config(ROOT / "recipes" / "vits_tiny.yaml", ["model.n_speakers=3", "model.speakers=[a,b,c]"])
    task = build_task(cfg)
    assert [task.speaker_id(s) for s in ("a", "c", "1", 2, None)] == [0, 2, 1, 2, 0]
    with pytest.raises(UserError, match="no speaker 'd'.*0=a, 1=b, 2=c"):
        task.speaker_id("d")
    with pytest.raises(UserError, match="out of range"):
        task.speaker_id(7)
