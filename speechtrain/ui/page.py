"""What the tabs of the page share: the workspace, the inputs every tab reads (recipe, dataset, format, the
switches' overrides), and the small helpers of the handlers (status lines, tables, plots).

Each tab is its own module (:mod:`speechtrain.ui.tabs`): ``layout(ws)`` makes its components inside its
``gr.Tab``, ``wire(...)`` attaches its handlers once every tab's components exist (a tab's handler may read
another tab's inputs or update another tab's outputs). :func:`speechtrain.ui.app.build_app` puts them together.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from speechtrain.errors import UserError
from speechtrain.ui import backend, jobs, runs

POLL_SECONDS = 1.0
SWITCH_COLUMNS = ["setting", "recommended", "recipe", "use", "why"]


class Workspace:
    """Where the UI keeps things: run directories under ``runs``, datasets under ``data``; its own
    job folders (prepare, tune, bench, listen) under ``runs/.ui``."""

    def __init__(self, runs_root: str | Path = "runs", data_root: str | Path = "data") -> None:
        self.runs = Path(runs_root).resolve()
        self.data = Path(data_root).resolve()
        self.ui = self.runs / ".ui"
        self.tuned = self.ui / "tuned"
        for d in (self.runs, self.data, self.ui):
            d.mkdir(parents=True, exist_ok=True)
        self.gpu: deque[dict[str, Any]] = deque(maxlen=600)
        self.t0 = time.time()

    def job(self, kind: str) -> Path:
        return self.ui / "jobs" / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 10**6:06d}"

    def last_job(self, kind: str) -> Path | None:
        found = sorted((self.ui / "jobs").glob(f"{kind}-*"))
        return found[-1] if found else None

    def recipes(self) -> list[str]:
        return backend.list_recipes([self.tuned])

    def resolve_run(self, run: str | None) -> Path:
        if not run:
            raise UserError("choose a run (Train or Runs tab)")
        path = Path(run)
        if not path.is_absolute():
            path = self.runs / run
        if not runs.is_run_dir(path):
            raise UserError(f"{path} is not a speechtrain run directory (no config.yaml)")
        return path

    def run_names(self) -> list[str]:
        return [str(r.path.relative_to(self.runs)) for r in runs.list_runs(self.runs)]


@dataclass
class Inputs:
    """The page's header (recipe, dataset folder, format) and the Recipe tab's overrides: what prepare, estimate,
    plan, tune, train and bench all read."""

    recipe: Any
    data: Any
    fmt: Any
    switch_text: Any = None
    extra: Any = None

    def all(self) -> list[Any]:
        """The five components, in the order :func:`all_overrides` takes their values."""
        return [self.recipe, self.data, self.fmt, self.switch_text, self.extra]


def header(ws: Workspace) -> Inputs:
    """The row above the tabs: recipe, dataset folder or manifest, format."""
    with gr.Row():
        recipe = gr.Dropdown(
            ws.recipes(),
            value="gpt_tts_tiny" if "gpt_tts_tiny" in ws.recipes() else None,
            label="recipe",
            allow_custom_value=True,
            elem_id="recipe",
            scale=2,
        )
        data = gr.Textbox(str(ws.data / "demo"), label="dataset folder or manifest", elem_id="data", scale=3)
        fmt = gr.Dropdown(list(backend.FORMATS), value="auto", label="format", elem_id="format", scale=1)
    return Inputs(recipe, data, fmt)


# -------------------------------------------------------------------------------------------- helpers
def ok(text: str) -> str:
    return text


def err(exc: BaseException) -> str:
    return f"error: {exc}"


def guarded(n_outputs: int):  # noqa: ANN201 - a decorator
    """Bad input (UserError, including the config's ValidationError texts) becomes the status line;
    the other outputs are left as they are."""

    def wrap(fn):  # noqa: ANN001, ANN202
        if inspect.isgeneratorfunction(fn):

            @functools.wraps(fn)
            def gen(*args: Any):  # noqa: ANN202
                try:
                    yield from fn(*args)
                except UserError as exc:
                    yield (err(exc), *[gr.skip()] * (n_outputs - 1)) if n_outputs > 1 else err(exc)

            return gen

        @functools.wraps(fn)
        def call(*args: Any):  # noqa: ANN202
            try:
                return fn(*args)
            except UserError as exc:
                return (err(exc), *[gr.skip()] * (n_outputs - 1)) if n_outputs > 1 else err(exc)

        return call

    return wrap


def df(rows: list[Any], columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=columns)


def series_df(series: list[tuple[Any, str, float]], x: str = "step") -> pd.DataFrame | None:
    """(x, series, value) rows as a frame with numeric x and value columns, or None while there are
    none: the page's plot fixes its axis types and series colours from the first frame it gets, so an
    empty frame first would leave the later curves undrawn (seen in headless Chromium, Gradio 6.31)."""
    if not series:
        return None
    frame = pd.DataFrame(series, columns=[x, "series", "value"])
    return frame.astype({x: "float64", "series": object, "value": "float64"})


def _switch_rows(table: Any) -> list[list[Any]]:
    """Rows of the switches table as the page sends them (DataFrame, dict or list)."""
    if table is None:
        return []
    if isinstance(table, pd.DataFrame):
        return table.values.tolist()
    if isinstance(table, dict):
        return list(table.get("data") or [])
    return list(table)


def switch_overrides(table: Any) -> list[str]:
    """``key=value`` for each switch whose 'use' differs from the recipe's value."""
    out = []
    for row in _switch_rows(table):
        if len(row) < 4:
            continue
        key, _rec, recipe, use = (str(c).strip() if c is not None else "" for c in row[:4])
        if key.startswith("note.") or not key or not use or use == recipe:
            continue
        out.append(f"{key}={use}")
    return out


def all_overrides(recipe: str, data: str, fmt: str, switches: str, extra: str) -> list[str]:
    return (
        backend.data_overrides(recipe, data, fmt) + backend.parse_overrides(switches) + backend.parse_overrides(extra)
    )


def err_line(state: jobs.JobState) -> str:
    return state.error or f"error: the command ended with exit code {state.exit_code} (see its output)"
