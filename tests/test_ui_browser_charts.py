"""The chart test (issue 40) for the web UI's Train tab, in headless Chromium: the plots of a short finished run as a
person sees them. Its step axes read `4.000000` and `1.5`, and at the end of an 8-step run three plots showed axes
and a legend and no marks (one logged row per series: a line of one point draws nothing). Each plot with data now
has whole-number step ticks (each once), a drawn mark for every series of its legend, and no two of its texts
(title, axis labels and titles, legend labels) overlap. What is checked is read back from the SVG the page drew.
Skipped like tests/test_ui_browser.py when there is no Chromium (SPEECHTRAIN_BROWSER_TESTS=skip)."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.test_ui_browser import _free_port, _tab, _wait_text, chromium  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:::gradio.queueing")]

PLOTS = ("#loss-plot", "#eval-plot", "#speed-plot", "#mem-plot")

#: what each plot drew, read from its SVG: the x axis' labels, each text with its box, the colours of the marks
#: drawn (a line of one point draws nothing), the legend's labels and colours
READ_PLOT = """(sel) => {
    const svg = document.querySelector(sel + ' svg.marks');  // what Vega drew (not an icon)
    if (!svg) return null;
    const box = e => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
    const xAxis = Array.from(svg.querySelectorAll('g.role-axis'))
        .filter(g => (g.getAttribute('aria-label') || '').startsWith('X-axis'));
    const texts = Array.from(svg.querySelectorAll('text'))
        .filter(t => t.textContent.trim() && t.getAttribute('opacity') !== '0')
        .map(t => [t.textContent, box(t)]);
    const colour = p => {
        const f = p.getAttribute('fill');
        return f && f !== 'none' && f !== 'transparent' ? f : p.getAttribute('stroke');
    };
    const drawn = Array.from(svg.querySelectorAll('g.role-mark path'))
        .filter(p => p.getAttribute('opacity') !== '0')
        .filter(p => { const b = p.getBBox(); return b.width > 1 || b.height > 1; }).map(colour);
    const yAxes = Array.from(svg.querySelectorAll('g.role-axis'))
        .filter(g => (g.getAttribute('aria-label') || '').startsWith('Y-axis'));
    return {
        y_axes: yAxes.map(g => Array.from(g.querySelectorAll('g.role-axis-label text')).map(t => t.textContent)),
        x_labels: xAxis.flatMap(g => Array.from(g.querySelectorAll('g.role-axis-label text')).map(t => t.textContent)),
        x_axes: xAxis.length,
        texts: texts,
        drawn: drawn,
        legend: Array.from(svg.querySelectorAll('g.role-legend-label text')).map(t => t.textContent),
        legend_colours: Array.from(svg.querySelectorAll('g.role-legend-symbol path')).map(colour),
    };
}"""


def _rows(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _run(root: Path, name: str, max_steps: int, train_steps: list[int], eval_steps: list[int]) -> None:
    """A finished run: ``train_steps`` logged (losses, speed, memory), eval rows (a loss of ~95 beside quality
    scores near 1) at ``eval_steps``, a checkpoint at ``max_steps``."""
    run = root / "runs" / name
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(f"model:\n  name: gpt_tts\ntrain:\n  max_steps: {max_steps}\n")
    train = [
        {
            "split": "train",
            "step": s,
            "loss": 3.0 / s**0.3,
            "text_ce": 2.0 / s**0.2,
            "audio_seconds_per_second": 11.5 + s % 3,
            "data_wait_fraction": 0.04,
            "mem_allocated": 0.52 * 2**30,
            "mem_reserved": 0.8 * 2**30,
        }
        for s in train_steps
    ]
    evals = [
        {"split": "eval", "step": s, "loss": 95.2 - s, "pesq": 1.1 + s / 100, "mcd": 12.0 - s / 10} for s in eval_steps
    ]
    _rows(run / "metrics.jsonl", train + evals)
    (run / "checkpoints" / f"step_{max_steps:08d}.pt").write_bytes(b"weights")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    from speechtrain.ui.app import launch

    root = tmp_path_factory.mktemp("ui_charts")
    _run(root, "short", 8, [8], [8])  # train.log_every=10 of an 8-step run: one row (and one eval), at its end
    _run(root, "long", 60, list(range(1, 61)), [20, 40, 60])
    (root / "data").mkdir()
    app, url = launch(port=_free_port(), runs_root=root / "runs", data_root=root / "data", block=False, quiet=True)
    yield url, root
    app.close()


@pytest.fixture
def page(chromium: Any) -> Iterator[Any]:  # noqa: F811
    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    yield page
    page.close()
    assert not errors, errors


def _overlaps(texts: list[tuple[str, list[float]]]) -> list[tuple[str, str]]:
    """Pairs of texts whose boxes share more than one square pixel."""
    out = []
    for i, (a, (l1, t1, r1, b1)) in enumerate(texts):
        for b, (l2, t2, r2, b2) in texts[i + 1 :]:
            if max(0.0, min(r1, r2) - max(l1, l2)) * max(0.0, min(b1, b2) - max(t1, t2)) > 1.0:
                out.append((a, b))
    return out


def _drawn(page: Any, served: tuple[str, Path], run: str) -> dict[str, Any]:
    """What each of the Train tab's plots drew for ``run``: the page is loaded with ``run`` the newest run (which it
    picks on load), so that no other run's chart was ever drawn, and read once every plot has drawn its legend."""
    url, root = served
    newest = time.time() + 60 * len(list((root / "runs").glob("*/metrics.jsonl")))
    os.utime(root / "runs" / run / "metrics.jsonl", (newest, newest))
    page.goto(url)
    page.wait_for_selector("#prepare", timeout=60_000)
    _tab(page, "Train")
    _wait_text(page, "#run-head", f"{run}: finished", 30)
    page.wait_for_function(
        f"() => {json.dumps(PLOTS)}.every(s => document.querySelector(s + ' svg.marks g.role-legend-label text'))",
        timeout=30_000,
    )
    page.wait_for_timeout(1_000)  # the last of them laid out
    return {sel: page.evaluate(READ_PLOT, sel) for sel in PLOTS}


@pytest.mark.parametrize("run", ["short", "long"])
def test_the_train_plots_read_at_a_glance(page: Any, served: tuple[str, Path], run: str) -> None:
    for sel, plot in _drawn(page, served, run).items():
        assert plot is not None, f"{sel} drew no chart"
        assert plot["x_axes"] >= 1 and plot["x_labels"], (sel, plot)
        assert all(re.fullmatch(r"\d+", v) for v in plot["x_labels"]), (sel, plot["x_labels"])  # was 4.000000, 1.5
        assert len(set(plot["x_labels"])) == len(plot["x_labels"]) // plot["x_axes"], (sel, plot["x_labels"])
        # y ticks of at most 4 significant digits (one eval point's axis read 1.000000)
        assert not [v for axis in plot["y_axes"] for v in axis if re.search(r"\.\d{5,}", v)], (sel, plot["y_axes"])
        # every series of the legend has a mark drawn in its colour (was: a legend and no marks)
        assert plot["legend"] and len(plot["legend_colours"]) == len(plot["legend"]), (sel, plot)
        assert set(plot["legend_colours"]) <= set(plot["drawn"]), (sel, plot["legend_colours"], plot["drawn"])
        assert not _overlaps(plot["texts"]), (sel, _overlaps(plot["texts"]))


@pytest.mark.parametrize("run", ["short", "long"])
def test_each_eval_metric_is_read_in_its_own_units(page: Any, served: tuple[str, Path], run: str) -> None:
    """The eval chart draws each series on an axis of its own in its units: mcd's change (12 -> 6 dB in the long
    run) is read off its ticks; the loss of ~95 does not flatten it (was: each series divided by its first value,
    a quality change a line at 1)."""
    plot = _drawn(page, served, run)["#eval-plot"]
    series = {"loss", "pesq", "mcd"}
    assert len(plot["y_axes"]) == len(series) == len(plot["legend"]), plot
    spans = [sorted(float(v) for v in axis) for axis in plot["y_axes"]]
    assert any(s[-1] >= 30 for s in spans), spans  # the eval loss (35 to 87), in its own units (was near 1)
    if run == "long":
        assert any(s[0] <= 6.5 and s[-1] >= 9.5 for s in spans), spans  # mcd 10 -> 8 -> 6 dB
    loss = _drawn(page, served, run)["#loss-plot"]
    assert len(loss["y_axes"]) == 2  # loss and text_ce, each its own axis


def test_the_plan_and_output_boxes_are_in_a_monospace_font(page: Any, served: tuple[str, Path]) -> None:
    """The plan's table of aligned columns was set in a proportional font (its columns scattered)."""
    url, _ = served
    page.goto(url)
    page.wait_for_selector("#prepare", timeout=60_000)
    read = "(sels) => sels.map(s => getComputedStyle(document.querySelector(s + ' textarea')).fontFamily)"
    _tab(page, "Recipe & switches")
    page.wait_for_selector("#plan-out textarea", timeout=30_000)
    fonts = page.evaluate(read, ["#plan-out", "#estimate-out"])
    _tab(page, "Train")
    page.wait_for_selector("#train-log textarea", timeout=30_000)
    fonts += page.evaluate(read, ["#train-log"])
    assert all("monospace" in f for f in fonts), fonts
