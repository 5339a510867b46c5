"""The Runs tab: every run directory under the workspace (started by the UI or the command line), and the
page's reattach on load (the run lists filled, the running run picked)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr
import pandas as pd

from speechtrain.errors import UserError
from speechtrain.ui import runs
from speechtrain.ui.page import Inputs, Workspace, df


@dataclass
class RunsTab:
    refresh: Any
    table: Any


def layout(ws: Workspace) -> RunsTab:
    refresh = gr.Button("Refresh", elem_id="runs-refresh")
    table = gr.Dataframe(headers=runs.COLUMNS, label="runs", interactive=False, wrap=True, elem_id="runs-table")
    return RunsTab(refresh, table)


def wire(ws: Workspace, tab: RunsTab) -> None:
    def do_runs() -> pd.DataFrame:
        return df([_row(ws, r) for r in ws.list_runs()], runs.COLUMNS)

    tab.refresh.click(do_runs, None, [tab.table], api_name="runs")


def reattach(app: gr.Blocks, ws: Workspace, train_run: Any, listen_run: Any, tab: RunsTab) -> None:
    """On page load: list the runs found on disk and pick the running one (else the newest)."""

    def on_load():  # noqa: ANN202
        found = ws.list_runs()
        names = [ws.run_name(r.path) for r in found]
        live = [n for n, r in zip(names, found) if r.status in ("running", "starting")]
        done = [n for n, r in zip(names, found) if r.status in ("finished", "stopped")]
        pick = live[0] if live else (names[0] if names else None)
        return (
            gr.update(choices=names, value=pick),
            gr.update(choices=names, value=done[0] if done else pick),
            df([_row(ws, r) for r in found], runs.COLUMNS),
        )

    app.load(on_load, None, [train_run, listen_run, tab.table], api_name="reattach")


def follow(ws: Workspace, train_run: Any, inputs: Inputs) -> None:
    """The header row (recipe, dataset, format) follows the run the Train tab shows: after a reload it showed the
    defaults (gpt_tts_tiny, data/demo) beside the user's run."""

    def on_pick(run: str | None) -> tuple[Any, Any, Any]:
        head = header_for(ws, run)
        if head is None:
            return gr.skip(), gr.skip(), gr.skip()
        recipe, data, fmt = (gr.skip() if v is None else gr.update(value=v) for v in (head.recipe, head.data, head.fmt))
        return recipe, data, fmt

    train_run.change(
        on_pick, [train_run], [inputs.recipe, inputs.data, inputs.fmt], api_name="run_header", show_progress="hidden"
    )


def header_for(ws: Workspace, run: str | None) -> runs.RunHeader | None:
    """What the header row takes from the picked run: None (the header is kept) when the page does not list it, or
    when it reads a dataset outside the page's data roots (a run of the command line: put in the header, that dataset
    made every next action of the page refused; the Train tab shows such a run read-only)."""
    from speechtrain.ui.tabs.train import read_only

    try:
        path = ws.resolve_run(run)
    except UserError:
        return None
    if read_only(ws, path) is not None:
        return None
    return runs.header_of(runs.run_info(path), ws.recipes())


def _row(ws: Workspace, info: runs.RunInfo) -> list[Any]:
    """The run's table row, named as the run lists name it (``reports/demo/run`` for the demo's)."""
    return [ws.run_name(info.path), *info.row()[1:]]
