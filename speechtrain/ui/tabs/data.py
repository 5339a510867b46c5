"""The Data tab: make the demo corpus, unpack an uploaded zip, prepare (``speechtrain prepare`` as a job) and
show its report: kept and skipped utterances, the durations, the symbols the text front end makes."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import gradio as gr

from speechtrain.errors import UserError
from speechtrain.ui import backend, jobs
from speechtrain.ui.page import POLL_SECONDS, Inputs, Workspace, df, err_line, guarded, ok


@dataclass
class DataTab:
    utterances: Any
    make_demo: Any
    upload: Any
    prepare: Any
    status: Any
    summary: Any
    log: Any
    skipped: Any
    hist: Any
    symbols: Any
    unknown: Any
    hist_bin: Any


def layout(ws: Workspace) -> DataTab:
    with gr.Row():
        utterances = gr.Number(120, label="demo utterances", precision=0, minimum=8, elem_id="utterances")
        make_demo = gr.Button("Make demo corpus", elem_id="make-demo")
        upload = gr.File(
            label="or upload a dataset .zip", file_types=[".zip"], type="filepath", height=120, elem_id="upload"
        )
    prepare = gr.Button("Prepare", variant="primary", elem_id="prepare")
    status = gr.Markdown(elem_id="data-status")
    with gr.Row():
        summary = gr.Textbox(label="report", lines=7, elem_id="data-summary")
        log = gr.Textbox(label="prepare output", lines=7, max_lines=12, autoscroll=True)
    with gr.Row():
        skipped = gr.Dataframe(headers=["reason", "count", "first ids"], label="skipped", interactive=False)
        # a numeric axis binned by the histogram's own width, from zero: bins in order, a bin of one drawn
        hist = gr.BarPlot(
            x="seconds",
            y="utterances",
            x_bin=1.0,
            y_aggregate="sum",
            y_lim=[0, None],
            title="durations",
            label="durations (s)",
            elem_id="durations",
        )
    with gr.Row():
        symbols = gr.Dataframe(
            headers=["symbol", "count", "known"], label="symbol inventory", interactive=False, max_height=300
        )
        unknown = gr.Textbox(label="characters the text front end cannot map", lines=2)
    hist_bin = gr.State(None)
    return DataTab(
        utterances, make_demo, upload, prepare, status, summary, log, skipped, hist, symbols, unknown, hist_bin
    )


def wire(ws: Workspace, tab: DataTab, inputs: Inputs) -> None:
    @guarded(2)
    def do_make_demo(n: float) -> tuple[str, str]:
        out = backend.make_demo_corpus(ws.data / "demo", int(n or 120))
        return ok(f"demo corpus in {out} (format {backend.detect_format(out)}); next: Prepare"), str(out)

    tab.make_demo.click(do_make_demo, [tab.utterances], [tab.status, inputs.data], api_name="make_demo")

    @guarded(3)
    def do_upload(path: str | None) -> tuple[str, str, str]:
        if not path:
            raise UserError("upload a .zip of the dataset folder")
        from gradio.utils import get_upload_folder

        from speechtrain.ui.uploads import handle_upload

        folder, found = handle_upload(path, ws.uploads, get_upload_folder(), ws.limits)  # Gradio's copy removed
        return ok(f"unpacked to {folder}; detected format: {found}"), str(folder), "auto"

    tab.upload.upload(do_upload, [tab.upload], [tab.status, inputs.data, inputs.fmt], api_name="upload_zip")

    @guarded(8)
    def do_prepare(r: str, d: str, f: str, sw: str, ex: str):  # noqa: ANN202 - a generator
        if not d:
            raise UserError("choose a dataset folder or manifest (or make the demo corpus)")
        r = str(ws.recipe(r))  # a listed recipe, or a file under the UI's roots, before anything reads it
        d = str(ws.data_path(d))  # under the data roots, before anything reads it; the job opens what was checked
        if f == "auto":
            backend.detect_format(d)  # the same error as the CLI, before starting anything
        folder = ws.job("prepare")
        report_json = folder / "report.json"
        extra = backend.parse_overrides(sw) + backend.parse_overrides(ex)
        ws.load_config(r, backend.data_overrides(r, d, f) + extra)  # prepare imports the model's family
        argv = backend.prepare_argv(r, d, f, report_json, extra)
        ws.start(folder, argv)
        skip = [gr.skip()] * 6
        while (state := jobs.status(folder)).status == "running":
            yield ok(f"preparing ... (`{state.command}`)"), jobs.log_tail(folder), *skip
            time.sleep(POLL_SECONDS)
        tail = jobs.log_tail(folder)
        if state.status != "done":
            yield err_line(state) + jobs.warnings_text(folder), tail, *skip
            return
        with ws.reading_data():
            rep = backend.data_report(report_json)
        width, bins = backend.histogram(rep.durations)
        hist = df(bins, ["seconds", "utterances"])
        yield (
            ok(f"prepared: kept {rep.kept} utterances") + jobs.warnings_text(folder),
            tail,
            rep.summary,
            df(rep.skipped, ["reason", "count", "first ids"]),
            hist,
            df([[_shown(s), n, k] for s, n, k in rep.symbols], ["symbol", "count", "known"]),
            " ".join(rep.unknown) or "(none)",
            width,
        )

    tab.prepare.click(
        do_prepare,
        inputs.all(),
        [tab.status, tab.log, tab.summary, tab.skipped, tab.hist, tab.symbols, tab.unknown, tab.hist_bin],
        api_name="prepare",
    ).then(_bin_width, [tab.hist_bin], [tab.hist], api_visibility="private", show_progress="hidden")


def _bin_width(width: float | None) -> Any:
    """The histogram's bin width, set after its data (the plot rebuilds for a new ``x_bin``, never for new data)."""
    return gr.update(x_bin=width) if width else gr.skip()


def _shown(symbol: str) -> str:
    return {" ": "(space)", "\t": "(tab)"}.get(symbol, symbol)
