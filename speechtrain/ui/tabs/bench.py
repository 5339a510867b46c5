"""The Bench tab: the ablation ladder (``speechtrain bench --ablate`` as a job): its table, chart and diagnosis."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from speechtrain.ui import backend, jobs
from speechtrain.ui.page import POLL_SECONDS, Inputs, Workspace, all_overrides, err_line, guarded, ok


@dataclass
class BenchTab:
    steps: Any
    limit: Any
    skip: Any
    bench: Any
    status: Any
    log: Any
    table: Any
    plot: Any
    diagnosis: Any


def layout(ws: Workspace) -> BenchTab:
    with gr.Row():
        steps = gr.Number(20, label="timed steps per configuration", precision=0, minimum=2, elem_id="bench-steps")
        limit = gr.Number(10, label="seconds per configuration (cap)", minimum=1, elem_id="bench-limit")
        skip = gr.Textbox(
            "" if backend.has_gpu() else "compile",
            label="rungs to leave out (space separated)",
            placeholder="compile",
        )
        bench = gr.Button("Run the ablation ladder", variant="primary", elem_id="bench")
    status = gr.Markdown(elem_id="bench-status")
    log = gr.Textbox(label="progress", lines=5, autoscroll=True)
    table = gr.Markdown(elem_id="bench-table")  # its numbers never wrap (app.CSS)
    plot = gr.Image(label="ladder", type="filepath", interactive=False, elem_id="bench-plot")
    diagnosis = gr.Textbox(label="diagnosis", lines=6)
    return BenchTab(steps, limit, skip, bench, status, log, table, plot, diagnosis)


def wire(ws: Workspace, tab: BenchTab, inputs: Inputs) -> None:
    @guarded(5)  # status, log, table, plot, diagnosis: a refusal answered 4 and the page showed gradio's error
    def do_bench(r: str, d: str, f: str, sw: str, ex: str, steps: float, limit: float, leave_out: str):  # noqa: ANN202
        r = str(ws.recipe(r))  # a listed recipe, or a file under the UI's roots, before anything reads it
        overrides = all_overrides(r, d, f, sw, ex)
        ws.load_config(r, overrides)
        folder = ws.job("bench")
        ws.start(
            folder,
            backend.bench_argv(r, overrides, folder, int(steps or 20), float(limit or 10), (leave_out or "").split()),
        )
        skip = [gr.skip()] * 3
        while (state := jobs.status(folder)).status == "running":
            yield ok("running the ladder ..."), jobs.log_tail(folder, 8), *skip
            time.sleep(POLL_SECONDS)
        if state.status != "done":
            yield err_line(state), jobs.log_tail(folder), *skip
            return
        yield (
            ok(f"ladder done: {folder}") + jobs.warnings_text(folder),
            jobs.log_tail(folder, 8),
            *_results(ws, folder),
        )

    tab.bench.click(
        do_bench,
        [*inputs.all(), tab.steps, tab.limit, tab.skip],
        [tab.status, tab.log, tab.table, tab.plot, tab.diagnosis],
        api_name="bench",
    )


def _results(ws: Workspace, folder: Path) -> tuple[str, str | None, str]:
    """The ladder's table, chart (a copy the page may show) and diagnosis of a finished bench job."""
    table, diagnosis = backend.bench_outputs(folder / "bench.json")
    png = folder / "bench.png"
    return table, ws.show(png) if png.is_file() else None, diagnosis


def reattach(app: gr.Blocks, ws: Workspace, tab: BenchTab) -> None:
    """On page load: the newest finished ladder, as the page showed it when it ended (a reloaded page or a
    restarted UI loses nothing)."""

    def on_load() -> tuple[Any, ...]:
        done = [f for f in sorted((ws.ui / "jobs").glob("bench-*")) if (f / "bench.json").is_file()]
        if not done:
            return gr.skip(), gr.skip(), gr.skip(), gr.skip()
        return (ok(f"ladder done: {done[-1]}"), *_results(ws, done[-1]))

    app.load(on_load, None, [tab.status, tab.table, tab.plot, tab.diagnosis], api_visibility="private")
