"""The web UI as a person sees it, in headless Chromium: what it shows is true, and it is safe to serve.

One app is served for the module over a workspace of made-up runs (no training here: tests/test_ui_e2e.py trains),
a small dataset whose durations span 0.6 to 11 s, a finished ablation ladder and a run where `speechtrain demo` writes
its run (reports/demo/run); a second app is served off this machine, behind a password. Each test names the defect it
guards. A missing browser fails with what to install, unless SPEECHTRAIN_BROWSER_TESTS=skip (tests/test_ui_e2e.py).
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.doors import RECIPES
from tests.peers import need

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:::gradio.queueing")]

EVIL = "st_evil_probe"  # a module on the import path: importing it writes a marker file
DURATIONS = [0.6, 0.7, 0.7, 1.3, 2.2, 2.2, 2.3, 10.5, 11.0]  # seconds: bins of one, and labels past 9.x


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fake_run(run: Path, series: list[str], steps: int, eval_steps: list[int], max_steps: int) -> Path:
    """A finished run directory: config, a checkpoint file, ``series`` logged every step, eval rows, one sample."""
    import soundfile as sf

    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(f"model:\n  name: gpt_tts\ntrain:\n  max_steps: {max_steps}\n")
    rows: list[dict[str, Any]] = []
    for step in range(1, steps + 1):
        rows.append({"split": "train", "step": step, **{k: (i + 2.0) / step for i, k in enumerate(series)}})
    rows += [{"split": "eval", "step": s, "loss": 1.5} for s in eval_steps]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "checkpoints" / f"step_{steps:08d}.pt").write_bytes(b"weights nobody may download")
    (run / "samples" / f"step_{steps:08d}").mkdir(parents=True)
    sf.write(str(run / "samples" / f"step_{steps:08d}" / "a.wav"), np.zeros(2205, dtype=np.float32), 22050)
    return run


def _durations_corpus(folder: Path) -> Path:
    import soundfile as sf

    (folder / "wavs").mkdir(parents=True)
    lines = []
    for i, seconds in enumerate(DURATIONS):
        t = np.arange(int(22050 * seconds)) / 22050
        sf.write(str(folder / "wavs" / f"u{i}.wav"), (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 22050)
        lines.append(f"u{i}|a short sentence number {i}|a short sentence number {i}")
    (folder / "metadata.csv").write_text("\n".join(lines) + "\n")
    return folder


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, demo_data: list[str]) -> Iterator[Path]:
    """The served folders, and a module ``EVIL`` on the import path (removed afterwards)."""
    root = tmp_path_factory.mktemp("ui_browser")
    _fake_run(root / "runs" / "tts", ["loss", "text_ce"], 12, [12], 12)
    _fake_run(root / "runs" / "gan", ["gen_loss", "disc_loss", "mel_loss"], 12, [12], 12)
    _fake_run(root / "reports" / "demo" / "run", ["loss"], 4, [4], 4)
    _durations_corpus(root / "data" / "durations")
    from speechtrain.bench.ablate import RUNGS
    from speechtrain.cli.main import main

    bench = root / "runs" / ".ui" / "jobs" / "bench-20260101-000000-000000"  # a finished ladder of the page's
    keep = ("baseline", "engine", "bucketing", "loader", "precision", "all")
    skips = [a for rung in RUNGS if rung not in keep for a in ("--skip", rung)]
    fast = ["--in-process", "--steps", "1", "--warmup", "0", "--min-seconds", "0", "--repeat", "1"]
    args = ["bench", "--config", str(RECIPES / "gpt_tts_tiny.yaml"), *demo_data, "train.device=cpu", "--ablate"]
    assert main([*args, *fast, *skips, "--json", str(bench / "bench.json"), "--quiet"]) == 0
    probe = root / "importable"
    probe.mkdir()
    (probe / f"{EVIL}.py").write_text(
        f"open({str(root / 'IMPORTED')!r}, 'w').write('ran')\ndef build_task(model, data):\n    raise SystemExit\n"
    )
    sys.path.insert(0, str(probe))
    yield root
    sys.path.remove(str(probe))


@pytest.fixture(scope="module")
def served(workspace: Path) -> Iterator[str]:
    from speechtrain.ui.app import launch

    app, url = launch(
        port=_free_port(),
        runs_root=workspace / "runs",
        data_root=workspace / "data",
        also=[workspace / "reports"],
        block=False,
        quiet=True,
    )
    yield url
    from speechtrain.ui import jobs, runs

    for folder in [*(workspace / "runs" / ".ui" / "jobs").glob("*"), *runs.find_runs(workspace / "runs")]:
        jobs.stop(runs.job_folder(folder) if runs.is_run_dir(folder) else folder)
    app.close()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    if os.environ.get("SPEECHTRAIN_BROWSER_TESTS") == "skip":
        pytest.skip("no headless Chromium on this machine (scripts/run.sh said how to install one)")
    need("playwright", "browser")  # skipped outside CI when missing, an error in CI
    from playwright.sync_api import sync_playwright

    from speechtrain.ui.browser import find_chromium, launch_browser

    with sync_playwright() as pw:
        try:
            find_chromium(pw)
        except RuntimeError as exc:
            pytest.fail(f"cannot run the browser tests: {exc}")
        browser = launch_browser(pw)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def page(chromium: Any, served: str) -> Iterator[Any]:
    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(served)
    page.wait_for_selector("#prepare", timeout=60_000)
    yield page
    page.close()
    assert not errors, errors


# ------------------------------------------------------------------------------------------- helpers
def _text(page: Any, selector: str) -> str:
    return page.locator(selector).first.inner_text()


def _wait_text(page: Any, selector: str, text: str, timeout_s: float = 60) -> str:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        shown = _text(page, selector)
        if text in shown:
            return shown
        time.sleep(0.3)
    raise AssertionError(f"'{text}' never showed in {selector}: {_text(page, selector)!r}")


def _fill(page: Any, selector: str, value: str, enter: bool = False) -> None:
    box = page.locator(f"{selector} input, {selector} textarea").first
    box.fill(value)
    box.press("Enter") if enter else box.blur()


def _pick_run(page: Any, name: str) -> None:
    _fill(page, "#run-pick", name, enter=True)


def _marks(page: Any, selector: str, layer: str = "plot") -> list[tuple[float, float]]:
    """Width and height of each data mark Vega drew in a plot's layer ``layer`` (Gradio's plots: 'plot'; the Train
    tab's charts: 'lines' and 'points', speechtrain.ui.charts)."""
    return [
        tuple(size)
        for size in page.evaluate(
            f"""() => Array.from(document.querySelectorAll('{selector} svg g.{layer}_marks path'))
                .map(p => {{ const b = p.getBBox(); return [b.width, b.height]; }})"""
        )
    ]


def _legend(page: Any, selector: str) -> list[str]:
    return page.evaluate(
        f"() => Array.from(document.querySelectorAll('{selector} svg g.role-legend-label text'))"
        ".map(t => t.textContent)"
    )


def _axis_labels(page: Any, selector: str) -> list[list[str]]:
    return page.evaluate(
        f"""() => Array.from(document.querySelectorAll('{selector} svg g.role-axis'))
            .map(g => Array.from(g.querySelectorAll('g.role-axis-label text')).map(t => t.textContent))
            .filter(labels => labels.length)"""
    )


def _pixels_of(png: bytes, rgb: tuple[int, int, int], tol: int = 40) -> int:
    import io

    import matplotlib.image as mpimg

    img = (mpimg.imread(io.BytesIO(png), format="png")[..., :3] * 255).astype(np.int32)
    return int((np.abs(img - np.asarray(rgb)).max(axis=-1) < tol).sum())


def _tab(page: Any, name: str) -> None:
    page.get_by_role("tab", name=name).click()


# ------------------------------------------------------------------------------------------- the Train tab
def test_an_error_in_the_train_tab_stays_until_the_next_click(page: Any, workspace: Path) -> None:
    """The view's two-second refresh overwrote a button's error within a tick (a run name of ``../evil`` showed
    no error at all): the buttons' line is not the view's."""
    _tab(page, "Train")
    _fill(page, "#run-name", "../evil")
    page.locator("#start").click()
    shown = _wait_text(page, "#train-status", "error: run name '../evil'", 20)
    page.wait_for_timeout(5_000)  # two ticks of the view's timer
    assert _text(page, "#train-status") == shown
    assert not (workspace / "evil").exists()
    _fill(page, "#run-name", "")


def test_switching_runs_shows_the_new_runs_curves_and_legend(page: Any) -> None:
    """The loss plot kept the first run's legend and drew none of the next run's series (Gradio draws the series it
    had when the chart was built): each run shows its own legend and curves."""
    _tab(page, "Train")
    _pick_run(page, "tts")
    _wait_text(page, "#run-head", "tts", 20)
    end = time.monotonic() + 20
    while set(_legend(page, "#loss-plot")) != {"loss", "text_ce"} and time.monotonic() < end:
        time.sleep(0.5)
    assert set(_legend(page, "#loss-plot")) == {"loss", "text_ce"}
    _pick_run(page, "gan")
    _wait_text(page, "#run-head", "gan", 20)
    end = time.monotonic() + 20
    while set(_legend(page, "#loss-plot")) != {"gen_loss", "disc_loss", "mel_loss"} and time.monotonic() < end:
        time.sleep(0.5)
    assert set(_legend(page, "#loss-plot")) == {"gen_loss", "disc_loss", "mel_loss"}
    page.wait_for_timeout(2_500)  # a tick after the switch: the curves stay drawn
    lines = _marks(page, "#loss-plot", "lines")
    assert len(lines) == 3 and all(w > 50 and h > 5 for w, h in lines), lines
    shot = page.locator("#loss-plot").first.screenshot()
    for colour in ((76, 120, 168), (245, 133, 24), (228, 87, 86)):  # the three series' own colours
        assert _pixels_of(shot, colour) > 150, colour


def test_a_single_eval_point_is_drawn_and_no_gpu_plot_without_a_gpu(page: Any) -> None:
    """An eval every N steps is one point per series at first, which a line plot did not draw; and a machine
    without a GPU showed an empty NVML plot."""
    from speechtrain.ui import backend

    _tab(page, "Train")
    _pick_run(page, "gan")
    _wait_text(page, "#run-head", "gan", 20)
    end = time.monotonic() + 20
    while not _marks(page, "#eval-plot", "points") and time.monotonic() < end:
        time.sleep(0.5)
    points = _marks(page, "#eval-plot", "points")
    assert len(points) == 1 and points[0][0] > 2 and points[0][1] > 2, points
    if backend.gpu_stats() is None:
        assert not page.locator("#gpu-plot").first.is_visible()
    else:
        assert page.locator("#gpu-plot").first.is_visible()


# ------------------------------------------------------------------------------------------- Data and Tune
def test_the_durations_histogram_and_a_tune_bounded_by_the_buckets(page: Any, workspace: Path) -> None:
    """The histogram sorted its x axis as text ('10.50' before '2.30') and hid bins of one utterance (its y axis
    started at the smallest count); the tuner wrote 1024 items for buckets of 13 to 41."""
    _tab(page, "Data")
    _fill(page, "#data", str(workspace / "data" / "durations"))
    page.locator("#prepare").click()
    _wait_text(page, "#data-status", "prepared:", 180)
    page.wait_for_timeout(1_500)  # the chart is drawn after its data
    bars = _marks(page, "#durations")
    # 0.6-0.7 s, 1.3 s, 2.2-2.3 s, 10.5 s and 11.0 s are at least five bins, three of them of one utterance each
    assert len(bars) >= 5 and all(h > 5 for _, h in bars), bars
    x_labels = [float(v) for v in _axis_labels(page, "#durations")[0]]
    assert x_labels == sorted(x_labels) and x_labels[-1] >= 11.0, x_labels

    _tab(page, "Recipe & switches")
    _fill(page, "#extra", "tune.steps_per_trial=1 tune.objective=memory")
    _tab(page, "Tune")
    page.locator("#tune").click()
    _wait_text(page, "#tune-status", "wrote", 300)
    report = json.loads(sorted((workspace / "runs" / ".ui" / "jobs").glob("tune-*/tune.json"))[-1].read_text())
    assert report["buckets"] and all(b["batch_size"] <= max(1, b["items"]) for b in report["buckets"]), report
    assert "bucket_size" in page.locator("#tune-table textarea").first.input_value()
    _tab(page, "Recipe & switches")
    _fill(page, "#extra", "")


# ------------------------------------------------------------------------------------------- Bench and Runs
def test_the_bench_table_keeps_each_number_on_one_line(page: Any) -> None:
    """The ladder's table broke numbers across lines ('95.' over '8'); a reloaded page shows the last ladder."""
    page.reload()
    page.wait_for_selector("#prepare", timeout=60_000)
    _tab(page, "Bench")
    _wait_text(page, "#bench-status", "ladder done", 30)
    cells = page.evaluate(
        """() => Array.from(document.querySelectorAll('#bench-table td, #bench-table th')).map(td => {
            const range = document.createRange(); range.selectNodeContents(td);
            const tops = new Set(Array.from(range.getClientRects()).map(r => Math.round(r.top)));
            return [td.textContent.trim(), tops.size]; })"""
    )
    numbers = [(text, lines) for text, lines in cells if re.fullmatch(r"[-+]?[\d.]+\s*(x|%|GiB|s)?", text)]
    assert len(numbers) > 20, cells
    broken = [(text, lines) for text, lines in numbers if lines != 1]
    assert not broken, broken


def test_the_runs_tab_lists_the_demos_run(page: Any, workspace: Path) -> None:
    """`speechtrain demo` writes its run to reports/demo/run, which the Runs tab never listed."""
    _tab(page, "Runs")
    page.locator("#runs-refresh").click()
    demo = str((workspace / "reports" / "demo" / "run").resolve())
    table = _wait_text(page, "#runs-table", demo, 20)
    assert re.search(re.escape(demo) + r"\s+finished", table), table


# ------------------------------------------------------------------------------------------- security
def test_an_uploaded_module_and_model_name_run_nothing(page: Any, served: str, workspace: Path) -> None:
    """An uploaded zip with a .py file was left on disk although rejected, and ``model.name=data.uploads.<...>:
    build_task`` then imported it in the server: the zip is refused and leaves nothing, and no door of the page
    imports a model the person who started it did not name."""
    from gradio_client import Client

    evil_zip = workspace / "evil.zip"
    with zipfile.ZipFile(evil_zip, "w") as zf:
        zf.writestr("evil/metadata.csv", "a|hello|hello\n")
        zf.writestr("evil/evil.py", "import os\n")
    _tab(page, "Data")
    page.locator("#upload input[type=file]").first.set_input_files(str(evil_zip))
    _wait_text(page, "#data-status", "error: evil.zip: holds 1 file(s) of code", 30)
    assert not list((workspace / "runs" / ".ui" / "uploads").glob("*")), "the rejected upload is on disk"
    assert not [p for p in workspace.rglob("evil.py")], "the rejected upload is on disk"

    attack = f"model.name={EVIL}:build_task"
    _tab(page, "Recipe & switches")
    _fill(page, "#extra", attack)
    page.locator("#estimate").click()
    assert "--allow-model" in _wait_text(page, "#recipe-status", f"error: model.name={EVIL}:build_task", 30)
    _tab(page, "Train")
    _fill(page, "#run-name", "attack")
    page.locator("#start").click()
    _wait_text(page, "#train-status", f"error: model.name={EVIL}:build_task", 30)
    _fill(page, "#run-name", "")
    _tab(page, "Recipe & switches")
    _fill(page, "#extra", "")

    client = Client(served, verbose=False)
    data = str(workspace / "data" / "durations")
    for api in ("/prepare", "/plan", "/tune", "/estimate"):
        status = client.predict("gpt_tts_tiny", data, "auto", "", attack, api_name=api)[0]
        assert status.startswith(f"error: model.name={EVIL}:build_task"), (api, status)
    status = client.predict("gpt_tts_tiny", data, "auto", "", attack, "x", 0, api_name="/start_train")[0]
    assert status.startswith(f"error: model.name={EVIL}"), status
    assert client.predict("gan", attack, api_name="/resume_train").startswith(f"error: model.name={EVIL}")
    started = [json.loads(p.read_text())["command"] for p in (workspace / "runs").rglob("process.json")]
    assert not [c for c in started if EVIL in c], started
    assert not (workspace / "IMPORTED").exists() and EVIL not in sys.modules


def test_the_server_serves_what_the_page_shows_only(served: str, workspace: Path) -> None:
    """Every checkpoint and dataset under runs/ and data/ was served to whoever reached the page: only the copies of
    what the page shows are."""
    import httpx
    from gradio_client import Client

    view = Client(served, verbose=False).predict("gan", api_name="/run_view")
    assert view[7] is not None  # the latest eval audio, as the page plays it
    for secret in (
        workspace / "runs" / "gan" / "checkpoints" / "step_00000012.pt",
        workspace / "runs" / "gan" / "metrics.jsonl",
        workspace / "data" / "durations" / "metadata.csv",
        workspace / "runs" / ".ui" / "jobs" / "bench-20260101-000000-000000" / "bench.json",
    ):
        assert httpx.get(f"{served}gradio_api/file={secret}").status_code == 403, secret
    shown = sorted((workspace / "runs" / ".ui" / "shown").glob("*-a.wav"))
    assert shown and httpx.get(f"{served}gradio_api/file={shown[0]}").status_code == 200


def test_off_this_machine_the_page_asks_for_a_password(chromium: Any, workspace: Path) -> None:
    """Off this machine there was no authentication: the page, its API and its files need the password."""
    import httpx
    from gradio_client import Client

    from speechtrain.ui.app import launch

    port = _free_port()
    app, _ = launch(
        host="0.0.0.0",
        port=port,
        runs_root=workspace / "runs",
        data_root=workspace / "data",
        password="a-long-password",
        block=False,
        quiet=True,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        assert httpx.get(f"{url}config").status_code in (401, 403)
        with pytest.raises(Exception):  # noqa: B017 - gradio_client's own error types vary by version
            Client(url, verbose=False).predict(api_name="/runs")
        assert Client(url, auth=("speechtrain", "a-long-password"), verbose=False).predict(api_name="/runs")
        page = chromium.new_page(viewport={"width": 1000, "height": 800})
        page.goto(url)
        page.locator("input[type=password]").first.wait_for(state="visible", timeout=30_000)
        assert page.locator("#prepare").count() == 0
        for password in ("wrong", "a-long-password"):  # a refused login clears the form
            page.wait_for_timeout(1_500)
            assert page.locator("#prepare").count() == 0
            page.locator("input[type=text]").first.fill("speechtrain")
            page.locator("input[type=password]").first.fill(password)
            page.keyboard.press("Enter")
        page.wait_for_selector("#prepare", timeout=60_000)
        page.close()
    finally:
        app.close()
