"""The page shows every warning a job logs where the user looks (issue 50): the tuner's "other processes loaded the
machine" warning was printed by the job and written into the tuned YAML, and the page said only "wrote ...". A job
run by the page keeps its warnings (speechtrain.cli.jobrunner writes them to warnings.txt) and the tab's status
line lists them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from speechtrain.ui import jobs
from tests.test_ui_browser import _free_port

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


def test_a_jobs_warnings_are_kept_apart_from_its_output(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    jobs.start(folder, ["prepare", str(tmp_path / "nowhere"), "--config", str(RECIPES / "gpt_tts_tiny.yaml")])
    assert jobs.wait(folder, timeout=120).status == "failed"
    assert jobs.warnings(folder) == []  # an error is not a warning
    (folder / "warnings.txt").write_text("warning: a\nb c\nwarning: a\n")
    assert jobs.warnings(folder) == ["warning: a", "warning: b c"]
    assert "**warning: b c**" in jobs.warnings_text(folder)


@pytest.mark.slow
def test_the_tune_tabs_status_shows_the_tuners_load_warning(
    tmp_path: Path, demo_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from gradio_client import Client

    from speechtrain.ui.app import launch

    shutil.copytree(demo_corpus, tmp_path / "data" / "demo")
    loaded = tmp_path / "loaded"  # the job's Python sees a host loaded far beyond its cores
    loaded.mkdir()
    (loaded / "sitecustomize.py").write_text("import os\nos.getloadavg = lambda: (64.0, 64.0, 64.0)\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(loaded), os.environ.get("PYTHONPATH", "")]))
    app, url = launch(
        port=_free_port(), runs_root=tmp_path / "runs", data_root=tmp_path / "data", block=False, quiet=True
    )
    try:
        client = Client(url, verbose=False)
        extra = "tune.objective=throughput tune.steps_per_trial=1 tune.max_batch_size=2 train.device=cpu"
        status = client.predict("gpt_tts_tiny", str(tmp_path / "data" / "demo"), "auto", "", extra, api_name="/tune")[0]
    finally:
        app.close()
    assert status.startswith("wrote "), status
    assert "other processes loaded the machine" in status and "unreliable" in status, status
