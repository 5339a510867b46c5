"""A recipe that pins data.symbols while the run's text front end makes other symbols is refused before step 1,
on the command line and from the page's job (both run `speechtrain train`), with one `error:` line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from speechtrain.cli.main import main
from speechtrain.data.text.inventory import pinned_mismatch


def _recipe(tmp_path: Path, demo_data: list[str], symbols: list[str], model: str = "toy") -> Path:
    data = dict(item.split("=", 1) for item in demo_data)
    raw = {
        "data": {"manifest": data["data.manifest"], "cache_dir": data["data.cache_dir"], "symbols": symbols},
        "model": {"name": "toy", "channels": 8, "blocks": 1} if model == "toy" else {"name": model},
        "train": {"device": "cpu", "output_dir": str(tmp_path / "run"), "max_steps": 1, "tensorboard": False},
    }
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=True))
    return path


def test_pinned_mismatch_counts_the_symbols_outside_the_set() -> None:
    found = pinned_mismatch(["abca", "xx"], ["a", "b"])
    assert found.total == 6 and found.unknown == [("x", 2), ("c", 1)]
    assert found.unknown_share == pytest.approx(0.5) and found.refused
    assert not pinned_mismatch(["abab"], ["a", "b"]).refused


def test_train_refuses_pinned_symbols_its_front_end_does_not_make(
    tmp_path: Path, demo_data: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = _recipe(tmp_path, demo_data, ["a", "e", " "])  # most letters of the transcripts are not in the set
    assert main(["train", "--config", str(recipe)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "data.symbols pins 3 symbols" in err[0] and "data.symbols=null" in err[0]
    assert not (tmp_path / "run" / "checkpoints").exists() and not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.slow
def test_the_pages_train_job_refuses_them_too(tmp_path: Path, demo_data: list[str]) -> None:
    from speechtrain.ui import backend, jobs

    recipe = _recipe(tmp_path, demo_data, ["a", "e", " "], model="vits")  # the job cannot see the tests' toy
    folder = tmp_path / "run" / "ui"
    jobs.start(folder, backend.train_argv(str(recipe), []))
    state = jobs.wait(folder, timeout=300)
    assert state.status == "failed" and state.exit_code == 2
    assert state.error.startswith("error: data.symbols pins 3 symbols")
