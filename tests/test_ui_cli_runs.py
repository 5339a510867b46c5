"""A run started on the command line with a dataset outside the page's data roots (issue 50): picking it put its
dataset into the page's header, where every next action was refused, and Resume started a job that then failed.
The page now shows such a run read-only, keeps the header as it was, and refuses Resume before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from speechtrain.errors import UserError
from speechtrain.ui import runs
from speechtrain.ui.page import Workspace
from speechtrain.ui.tabs.runs import header_for
from speechtrain.ui.tabs.train import read_run_view, resume


def _cli_run(path: Path, manifest: Path) -> Path:
    (path / "checkpoints").mkdir(parents=True)
    (path / "config.yaml").write_text(
        f"data:\n  manifest: {manifest}\n  format: ljspeech\nmodel:\n  name: gpt_tts\ntrain:\n  max_steps: 8\n"
        f"  output_dir: {path}\n"
    )
    (path / "metrics.jsonl").write_text(json.dumps({"split": "train", "step": 4, "loss": 1.0}) + "\n")
    (path / "checkpoints" / "step_00000004.pt").write_bytes(b"weights")
    return path


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    (tmp_path / "data" / "inside").mkdir(parents=True)
    return Workspace(tmp_path / "runs", tmp_path / "data")


def test_a_run_reading_data_outside_the_roots_is_shown_read_only(ws: Workspace, tmp_path: Path) -> None:
    _cli_run(ws.runs / "cli", tmp_path / "elsewhere" / "corpus")
    assert runs.run_info(ws.runs / "cli").status == "stopped"
    assert header_for(ws, "cli") is None  # the header keeps its dataset (was: set to the outside one)
    head = read_run_view(ws, "cli")[0]
    assert "read-only" in head and "speechtrain train --resume" in head and str(tmp_path / "elsewhere") in head
    with pytest.raises(UserError, match=r"cli cannot be resumed from the page: its data.manifest .* outside") as exc:
        resume(ws, "cli", "")
    assert "\n" not in str(exc.value)
    assert not (ws.runs / "cli" / ".ui").exists() and not runs.job_folder(ws.runs / "cli").exists()  # nothing started


def test_a_run_reading_data_inside_the_roots_sets_the_header(ws: Workspace) -> None:
    _cli_run(ws.runs / "own", ws.data / "inside")
    head = header_for(ws, "own")
    assert head is not None and head.data == str(ws.data / "inside") and head.fmt == "ljspeech"
    assert "read-only" not in read_run_view(ws, "own")[0]
