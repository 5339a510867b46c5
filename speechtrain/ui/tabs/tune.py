"""The Tune tab: ``speechtrain tune`` as a job, its trials filling a table as they run, then the tuned per-bucket
table; the tuned config becomes the page's recipe."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from speechtrain.ui import backend, jobs
from speechtrain.ui.page import POLL_SECONDS, Inputs, Workspace, all_overrides, df, err_line, guarded, ok

TRIAL_COLUMNS = ["bucket", "batch", "padded frames", "result", "detail"]


@dataclass
class TuneTab:
    tune: Any
    status: Any
    trials: Any
    table: Any


def layout(ws: Workspace) -> TuneTab:
    tune = gr.Button("Tune batch sizes per bucket", variant="primary", elem_id="tune")
    status = gr.Markdown(elem_id="tune-status")
    trials = gr.Dataframe(headers=TRIAL_COLUMNS, label="trials", interactive=False)
    table = gr.Textbox(label="tuned per-bucket table", lines=8, elem_id="tune-table")
    return TuneTab(tune, status, trials, table)


def wire(ws: Workspace, tab: TuneTab, inputs: Inputs) -> None:
    @guarded(4)
    def do_tune(r: str, d: str, f: str, sw: str, ex: str):  # noqa: ANN202 - a generator
        r = str(ws.recipe(r))  # a listed recipe, or a file under the UI's roots, before anything reads it
        overrides = all_overrides(r, d, f, sw, ex)
        ws.load_config(r, overrides)  # bad overrides (and what the UI refuses) fail here, with the CLI's message
        folder = ws.job("tune")
        out_yaml = ws.tuned / f"{Path(r).stem}-tuned-{time.strftime('%H%M%S')}.yaml"
        ws.start(folder, backend.tune_argv(r, overrides, out_yaml, folder / "tune.json"))
        while (state := jobs.status(folder)).status == "running":
            yield (
                ok("tuning ..."),
                df(parse_trials(jobs.log_tail(folder, 400)), TRIAL_COLUMNS),
                gr.skip(),
                gr.skip(),
            )
            time.sleep(POLL_SECONDS)
        trials = df(parse_trials(jobs.log_tail(folder, 400)), TRIAL_COLUMNS)
        if state.status != "done":
            yield err_line(state) + jobs.warnings_text(folder), trials, jobs.log_tail(folder), gr.skip()
            return
        table = backend.tune_table(folder / "tune.json")
        note = f"wrote {out_yaml}: choose it as the recipe to train with the tuned sizes"
        yield ok(note) + jobs.warnings_text(folder), trials, table, gr.update(choices=ws.recipes(), value=str(out_yaml))

    tab.tune.click(do_tune, inputs.all(), [tab.status, tab.trials, tab.table, inputs.recipe], api_name="tune")


def parse_trials(text: str) -> list[list[Any]]:
    """The tuner's trial lines (``  bucket K: B x F frames: fits, peak ..., N audio s/s``) as rows,
    so that the table fills in while the tuner runs."""
    pat = re.compile(r"^\s*bucket (\d+): (\d+) x (\d+) frames: ([^,]+)(?:, (.*))?$")
    rows = []
    for line in text.splitlines():
        m = pat.match(line)
        if m:
            rows.append([int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4), m.group(5) or ""])
    return rows
