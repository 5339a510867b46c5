"""The web UI end to end: the app served on 127.0.0.1, driven through its HTTP API (gradio_client)
as the page drives it, and loaded in a headless Chromium. A missing browser is a failure that says
what to install, not a skip, unless SPEECHTRAIN_BROWSER_TESTS=skip (what `scripts/run.sh test` sets, and
prints, on a machine where it found no Chromium: it installs nothing outside the Python environment)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:::gradio.queueing")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    from speechtrain.ui.app import launch

    root = tmp_path_factory.mktemp("ui")
    app, url = launch(port=_free_port(), runs_root=root / "runs", data_root=root / "data", block=False, quiet=True)
    assert url.startswith("http://127.0.0.1:")
    yield url, root
    from speechtrain.ui import jobs, runs

    for run in runs.find_runs(root / "runs"):  # nothing left running behind the tests
        jobs.stop(runs.job_folder(run))
        jobs.wait(runs.job_folder(run), 30)
    app.close()


def _pixels_of(png: bytes, rgb: tuple[int, int, int], tol: int = 40) -> int:
    """Pixels of a PNG within ``tol`` of colour ``rgb``."""
    import io

    import matplotlib.image as mpimg
    import numpy as np

    img = (mpimg.imread(io.BytesIO(png), format="png")[..., :3] * 255).astype(np.int32)
    return int((np.abs(img - np.asarray(rgb)).max(axis=-1) < tol).sum())


def _chart_rows(plot: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The rows a Train-tab chart (speechtrain.ui.charts) draws, as the API returns it."""
    return [] if plot is None else json.loads(plot["plot"])["data"]["values"]


def _wait_view(client: Any, run: str, done: Any, timeout: float = 240.0) -> tuple:
    end = time.monotonic() + timeout
    view = client.predict(run, api_name="/run_view")
    while not done(view) and time.monotonic() < end:
        time.sleep(1.0)
        view = client.predict(run, api_name="/run_view")
    assert done(view), f"timed out; last view: {view[0]}\n{view[-1]}"
    return view


def test_prepare_train_stop_resume_synthesize_through_the_http_api(served: tuple[str, Path]) -> None:
    from gradio_client import Client

    url, root = served
    c = Client(url, verbose=False)
    status, data = c.predict(40, api_name="/make_demo")
    assert "demo corpus in" in status and Path(data, "metadata.csv").is_file()

    # bad input: the CLI's own message, in the page
    status = c.predict("gpt_tts_tiny", str(root / "data" / "nowhere"), "auto", "", "", api_name="/prepare")[0]
    assert status.startswith("error: data not found:") and "nowhere" in status
    status = c.predict("gpt_tts_tiny", data, "auto", "", "train.max_step=3", "x", 0, api_name="/start_train")[0]
    assert status.startswith("error:") and "max_step" in status and "max_steps" in status  # names the closest key

    out = c.predict("gpt_tts_tiny", data, "auto", "", "", api_name="/prepare")
    assert out[0] == "prepared: kept 40 utterances", out
    assert "kept      40 of 40" in out[2]
    assert sum(n for _, n in out[4]["data"]) == 40  # the durations histogram holds every utterance
    assert out[6] == "(none)"  # no unknown characters in the demo text

    overrides = "train.log_every=2 train.save_every=10 train.eval_every=10 train.eval_batches=1"
    status, _ = c.predict("gpt_tts_tiny", data, "auto", "", overrides, "tiny", 100000, api_name="/start_train")
    assert status == "started tiny"
    view = _wait_view(c, "tiny", lambda v: len(_chart_rows(v[1])) >= 6)  # loss points arrive
    assert "running" in view[0]
    assert {row["series"] for row in _chart_rows(view[1])} >= {"loss"}

    assert "asked tiny to stop" in c.predict("tiny", api_name="/stop_train")
    view = _wait_view(c, "tiny", lambda v: "stopped" in v[0])
    run_dir = root / "runs" / "tiny"
    from speechtrain.ui import backend

    stopped_at = backend.checkpoint_steps(run_dir)[-1]
    assert stopped_at >= 2 and f"step {stopped_at}" in view[0]

    status = c.predict("tiny", f"train.max_steps={stopped_at + 6}", api_name="/resume_train")
    assert status == f"resuming tiny from step {stopped_at}"
    view = _wait_view(c, "tiny", lambda v: "finished" in v[0])
    steps = [r["step"] for r in backend.read_metrics(run_dir) if r.get("split") == "train"]
    assert steps == sorted(set(steps)) and steps[-1] == stopped_at + 6  # continued, not restarted

    status, wav = c.predict("tiny", "hello world", api_name="/synthesize")
    assert "RTF" in status and Path(wav).stat().st_size > 44
    assert c.predict("tiny", "", api_name="/synthesize")[0] == "error: give a sentence to speak"

    # a run made by the CLI is listed beside it (and the UI's run is an ordinary one the CLI can resume)
    cli = [sys.executable, "-m", "speechtrain", "train", "--resume", str(run_dir), f"train.max_steps={stopped_at + 8}"]
    assert subprocess.run(cli, capture_output=True, text=True).returncode == 0
    listed = {row[0]: row for row in c.predict(api_name="/runs")["data"]}
    assert listed["tiny"][1] == "finished" and listed["tiny"][3] == f"{stopped_at + 8}/{stopped_at + 8}"


def test_the_page_in_headless_chromium(served: tuple[str, Path]) -> None:
    if os.environ.get("SPEECHTRAIN_BROWSER_TESTS") == "skip":
        pytest.skip("no headless Chromium on this machine (scripts/run.sh said how to install one)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: pip install -e '.[dev]' (or pip install playwright)")
    from speechtrain.ui.browser import find_chromium, launch_browser

    url, _ = served
    with sync_playwright() as pw:
        try:
            find_chromium(pw)
        except RuntimeError as exc:
            pytest.fail(f"cannot run the browser check: {exc}")
        browser = launch_browser(pw)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(url)
        page.wait_for_selector("#prepare", timeout=60_000)
        for tab in ("Data", "Recipe & switches", "Tune", "Train", "Bench", "Listen", "Runs"):
            assert page.get_by_role("tab", name=tab).count() == 1, tab
        for control in ("#make-demo", "#prepare", "#recipe", "#data"):
            assert page.locator(control).first.is_visible(), control
        page.get_by_role("tab", name="Train").click()
        for control in ("#start", "#stop", "#resume", "#run-pick"):
            page.locator(control).first.wait_for(state="visible", timeout=10_000)
        # the finished run of the API test above: its loss curve is drawn (Vega's first series colour #4c78a8)
        page.locator("#run-pick input").first.fill("tiny")
        page.locator("#run-pick input").first.press("Enter")
        page.wait_for_timeout(5_000)  # a timer tick or two
        shot = page.locator("#loss-plot").first.screenshot()
        assert _pixels_of(shot, (76, 120, 168)) > 150, "the loss plot shows no curve"
        page.get_by_role("tab", name="Listen").click()
        page.locator("#synthesize").wait_for(state="visible", timeout=10_000)
        browser.close()
    assert not errors, errors


def test_a_live_plot_draws_rows_that_arrive_after_an_empty_start() -> None:
    """The Train tab's plots start with no rows and get them on timer ticks. Gradio's LinePlot took its axis types
    and series colours from the first frame it got: an empty frame first left every later curve undrawn (docs/ui
    screenshots, Gradio 6.31). The plots are now charts of their own (speechtrain.ui.charts): None until there are
    rows, then a chart that carries its own scales."""
    import gradio as gr
    from playwright.sync_api import sync_playwright

    from speechtrain.ui.browser import launch_browser
    from speechtrain.ui.charts import chart

    rows = [(i, name, scale / i) for name, scale in (("loss", 1.0), ("mel_loss", 0.5)) for i in range(1, 30)]
    ticks = {"n": 0}

    def view() -> Any:
        ticks["n"] += 1
        return chart([] if ticks["n"] == 1 else rows, "train losses")

    with gr.Blocks() as app:
        plot = gr.Plot(show_label=False, elem_id="plot")
        gr.Timer(1.5).tick(view, None, plot)
    port = _free_port()
    app.launch(server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        with sync_playwright() as pw:
            browser = launch_browser(pw)
            page = browser.new_page(viewport={"width": 900, "height": 500})
            page.goto(f"http://127.0.0.1:{port}")
            page.wait_for_timeout(6_000)  # the empty tick, then a few with rows
            shot = page.locator("#plot").first.screenshot()
            browser.close()
    finally:
        app.close()
    assert ticks["n"] >= 2
    assert _pixels_of(shot, (76, 120, 168)) > 150, "the curve of the first series is not drawn"
