"""What a user who mistyped is told: did-you-mean for commands, recipes and config paths; a run folder that
does not exist apart from one that is no run or is still starting; help screens that list every layout and
export format from their tables; rtf timed on sentences in the run's own language."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from speechtrain.cli.main import main
from speechtrain.config import build_config
from speechtrain.errors import UserError

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, "-m", "speechtrain", *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env
    )


def _one_error_line(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()  # progress lines may come first (rtf: "loading ..."); one error, last
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], out.stderr
    return errors[0]


@pytest.mark.parametrize(
    ("typed", "meant"), [("trian", "train"), ("synth", "synthesize"), ("make_dataset", "make-dataset")]
)
def test_a_mistyped_command_gets_did_you_mean(typed: str, meant: str) -> None:
    line = _one_error_line(_cli("--quiet", typed, "--config", "x.yaml"))
    assert f"unknown command '{typed}': did you mean '{meant}'?" in line, line


def test_an_unknown_command_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["xyzzy"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'xyzzy' (commands: demo," in err and "did you mean" not in err


@pytest.mark.parametrize(
    ("config", "meant"),
    [
        ("recipes/vits_tiny.yml", "recipes/vits_tiny.yaml"),  # the other YAML suffix
        ("vits_tiny", "recipes/vits_tiny.yaml"),  # a recipe by its name
        ("recipes/vits_tinny.yaml", "recipes/vits_tiny.yaml"),  # a typo in the name
    ],
)
def test_a_config_path_that_is_no_file_names_the_recipe_meant(config: str, meant: str) -> None:
    line = _one_error_line(_cli("train", "--config", config))
    assert f"config file not found: {config}; did you mean {meant}?" in line, line


def test_a_config_in_a_missing_folder_says_so(tmp_path: Path) -> None:
    line = _one_error_line(_cli("train", "--config", str(tmp_path / "nope" / "zzzzzz.yaml")))
    assert "does not exist either" in line and "did you mean" not in line, line


def test_a_recipe_name_gets_did_you_mean() -> None:
    from speechtrain.recipes.common import find_recipe

    with pytest.raises(UserError, match="did you mean 'gpt_tts_tiny'"):
        find_recipe("gpt_tts_tinny")


def _fake_run(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text("model:\n  name: toy\n")
    return folder


def test_a_missing_run_folder_does_not_exist_and_names_the_closest_run(tmp_path: Path) -> None:
    _fake_run(tmp_path / "runs" / "vits_uz")
    line = _one_error_line(_cli("synthesize", str(tmp_path / "runs" / "vits_zu"), "--text", "hi", "--out", "x.wav"))
    assert f"{tmp_path / 'runs' / 'vits_zu'} does not exist; did you mean {tmp_path / 'runs' / 'vits_uz'}?" in line
    line = _one_error_line(_cli("synthesize", str(tmp_path / "nope"), "--text", "hi", "--out", "x.wav"))
    assert line.endswith(f"{tmp_path / 'nope'} does not exist"), line
    assert "not a speechtrain run directory" not in line


def test_a_folder_that_is_no_run_and_one_still_starting(tmp_path: Path) -> None:
    other = tmp_path / "photos"
    other.mkdir()
    line = _one_error_line(_cli("rtf", str(other)))
    assert "is not a speechtrain run directory (no config.yaml)" in line
    starting = tmp_path / "starting"
    starting.mkdir()
    from speechtrain.train.rundir import RunLock

    with RunLock(starting):  # what a training holds from its first second, before config.yaml is written
        line = _one_error_line(_cli("rtf", str(starting)))
    assert "is still starting" in line and f"pid {os.getpid()}" in line, line


def test_prepare_and_export_help_list_every_layout_and_format() -> None:
    from speechtrain.data.layouts import names
    from speechtrain.export.formats import FORMATS

    prepare = _cli("prepare", "--help")
    assert prepare.returncode == 0
    flat = " ".join(prepare.stdout.split())
    missing = [n for n in names() if f"{n} (" not in flat]
    assert not missing, f"prepare --help lacks the layouts {missing}"
    export = _cli("export", "--help")
    flat = " ".join(export.stdout.split())
    missing = [k for k in FORMATS if f"{k} (" not in flat]
    assert not missing, f"export --help lacks the formats {missing}"


def test_building_the_parser_imports_no_table() -> None:
    """The tables load torch; other commands' start must not pay for them: they are read when help is shown."""
    code = "import sys; from speechtrain.cli.main import build_parser; build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.stdout.strip() == "False", out.stdout + out.stderr


def _cfg(language: str, **model: object) -> object:
    return build_config({"model": {"name": "vits", **model}, "data": {"language": language}})


def test_rtf_sentences_are_in_the_runs_language() -> None:
    from speechtrain.bench.rtf import DEFAULT_SENTENCES
    from speechtrain.data.speak import SENTENCES
    from speechtrain.recipes.common import language_sentences

    texts, source = language_sentences(_cfg("uz"), 8)
    assert texts == list(SENTENCES["uz"][:8]) and "uz" in source
    texts, _ = language_sentences(_cfg("uz-Cyrl"), 8)
    assert texts == list(SENTENCES["uz-Cyrl"][:8])
    texts, source = language_sentences(_cfg("kk", eval_texts=["Сәлем, әлем."]), 8)
    assert texts == ["Сәлем, әлем."] and source == "model.eval_texts"
    with pytest.raises(UserError, match="--texts"):
        language_sentences(_cfg("kk"), 8)  # no built-ins, no corpus: ask, never English
    texts, _ = language_sentences(_cfg("en"), 8)
    assert texts == list(DEFAULT_SENTENCES)
    texts, _ = language_sentences(_cfg("und"), 8)
    assert texts == list(DEFAULT_SENTENCES)


@pytest.mark.slow
def test_rtf_of_an_uzbek_run_times_uzbek_sentences(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It timed the built-in English sentences and warned about the English letters the run never saw."""
    import json

    pytest.importorskip("espeakng_loader")
    from speechtrain.data.speak import SENTENCES, make_language_corpus

    corpus = make_language_corpus(tmp_path / "uz", "uz", layout="ljspeech")
    run = tmp_path / "run"
    overrides = [f"data.manifest={corpus}", f"data.cache_dir={tmp_path / 'cache'}", "data.language=uz"]
    overrides += ["data.eval_utterances=2", f"train.output_dir={run}", "train.max_steps=1", "train.eval_every=1"]
    overrides += ["train.save_every=1", "train.progress=false", "train.tensorboard=false"]
    assert main(["--quiet", "train", "--config", str(ROOT / "recipes" / "vits_tiny.yaml"), *overrides]) == 0
    capsys.readouterr()
    out = tmp_path / "rtf.json"
    assert main(["rtf", str(run), "--warmup", "0", "--json", str(out)]) == 0
    err = capsys.readouterr().err
    said = [item["input"] for item in json.loads(out.read_text())["items"]]
    assert len(said) == 8 and all(any(s.startswith(x.rstrip(".…")) for s in SENTENCES["uz"]) for x in said), said
    assert "never saw" not in err and "'w'" not in err, err
