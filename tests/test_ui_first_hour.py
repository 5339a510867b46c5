"""The page for a newcomer (issue 40), without a browser: the login page names the server and where its password
is; a run that is still starting is said to be starting (not "not a speechtrain run directory"); the header row
follows the run being viewed (after a reload it showed the defaults beside the user's run)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("gradio")

from speechtrain.errors import UserError  # noqa: E402
from speechtrain.ui import runs  # noqa: E402
from speechtrain.ui.app import login_message  # noqa: E402
from speechtrain.ui.page import Workspace  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def job_pid() -> Iterator[int]:
    """A live process that the page takes for one of its jobs (its command line names the job runner)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "speechtrain.cli.jobrunner"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def _starting(run: Path, command: str, pid: int) -> Path:
    """A run the page has just started: its job's process is alive, its config not yet written."""
    (run / "ui").mkdir(parents=True)
    (run / "ui" / "process.json").write_text(json.dumps({"pid": pid, "command": command, "started": 1.0}))
    return run


def test_the_login_page_names_the_server_and_where_the_password_is(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "runs", tmp_path / "data")
    text = login_message("speechtrain", ws, "the one printed once in the terminal where `speechtrain ui` started")
    assert "speechtrain ui" in text and socket.gethostname() in text and str(ws.runs) in text
    assert "User <code>speechtrain</code>" in text and "printed once in the terminal" in text


def test_a_starting_run_is_said_to_be_starting(tmp_path: Path, job_pid: int) -> None:
    ws = Workspace(tmp_path / "runs", tmp_path / "data")
    run = _starting(ws.runs / "mine", "speechtrain train --config recipes/vits_tiny.yaml", job_pid)
    assert runs.run_info(run).status == "starting"
    with pytest.raises(UserError, match="mine is starting: its config"):  # was: not a speechtrain run directory
        ws.load_run_config(run)


def test_the_header_follows_the_viewed_run(tmp_path: Path, job_pid: int) -> None:
    ws = Workspace(tmp_path / "runs", tmp_path / "data")
    command = (
        f"speechtrain train --config {ROOT / 'recipes' / 'vits_tiny.yaml'} data.manifest={tmp_path / 'uz'} "
        f"data.format=ljspeech train.output_dir={ws.runs / 'mine'}"
    )
    run = _starting(ws.runs / "mine", command, job_pid)
    head = runs.header_of(runs.run_info(run), ws.recipes())
    assert head == runs.RunHeader("vits_tiny", str(tmp_path / "uz"), "ljspeech")  # from the command while starting
    (run / "config.yaml").write_text(f"data:\n  manifest: {tmp_path / 'other'}\n  format: pairs\n")
    head = runs.header_of(runs.run_info(run), ws.recipes())
    assert (head.data, head.fmt) == (str(tmp_path / "other"), "pairs")  # then from its saved config


def test_eval_series_each_on_its_own_scale_and_steps_are_whole() -> None:
    """The eval loss (~95) shared one linear axis with the other eval series, which lay flat at 0; the step axis
    read 4.000000 and 1.5. Each eval series keeps its own units on an axis of its own (issue 50: relative to the
    first value hid a quality change); the step axis ticks at whole steps (its chart's own tick values;
    tests/test_ui_browser_charts.py reads them in the page)."""
    from speechtrain.ui.charts import chart, whole_ticks

    rows = [
        {"split": "eval", "step": 4, "loss": 95.0, "mel_l1": 0.8, "zero": 0.0},
        {"split": "eval", "step": 8, "loss": 76.0, "mel_l1": 0.6, "zero": 0.5},
    ]
    series = runs.eval_series(rows)
    assert series == [
        (4, "loss", 95.0),
        (4, "mel_l1", 0.8),
        (4, "zero", 0.0),
        (8, "loss", 76.0),
        (8, "mel_l1", 0.6),
        (8, "zero", 0.5),
    ]
    assert json.loads(chart(series, "eval", panels=True).plot)["resolve"]["scale"]["y"] == "independent"  # type: ignore[union-attr]
    plot = chart(series, "eval")
    assert plot is not None
    x = json.loads(plot.plot)["encoding"]["x"]["axis"]
    assert x["values"] == [4, 5, 6, 7, 8] and x["format"] == "d"
    assert whole_ticks(8, 8) == [8] and whole_ticks(1, 2) == [1, 2]
    assert whole_ticks(0, 1000) == list(range(0, 1001, 200))
    gpu = chart([(0.5, "gpu0 util %", 3.0)], "GPU", x="seconds")
    assert gpu is not None
    seconds = json.loads(gpu.plot)["encoding"]["x"]["axis"]
    assert "values" not in seconds  # seconds are no steps


def test_the_train_head_shows_the_step_a_running_run_has_reached(tmp_path: Path) -> None:
    """The Train tab's head read "step 0 of 8" while the job's log showed 3/8: its step came from metrics rows
    (every train.log_every steps) and checkpoints only. The trainer now says the step it has reached after each
    step (progress.json), and the head of a running run shows it."""
    from speechtrain.ui.tabs.train import read_run_view
    from tests.test_train_engine import ListLoader, cfg_for, make_batch, trainer_for

    ws = Workspace(tmp_path / "runs", tmp_path / "data")
    run = ws.runs / "short"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("model:\n  name: gpt_tts\ntrain:\n  max_steps: 8\n")
    seen: dict[int, tuple[int, str]] = {}

    class Watched(ListLoader):
        """Looks at the run as the page does each time the trainer asks for the next batch."""

        def __iter__(self):  # type: ignore[no-untyped-def]
            for batch in super().__iter__():
                info = runs.run_info(run)
                seen[self.pos - 1] = (info.step, read_run_view(ws, "short")[0])
                yield batch

    cfg = cfg_for("train.max_steps=8", "train.log_every=100", "train.save_every=100", "train.eval_every=100")
    trainer_for(cfg, Watched([make_batch(i, [10, 8]) for i in range(2)]), run_dir=run).fit()
    assert seen[3][0] == 3, seen  # asked for the 4th batch after three steps: was 0
    assert "running, step 3 of 8" in seen[3][1], seen[3][1]
    assert [seen[k][0] for k in sorted(seen)] == list(range(len(seen)))
    assert runs.run_info(run).status == "finished" and runs.run_info(run).step == 8
