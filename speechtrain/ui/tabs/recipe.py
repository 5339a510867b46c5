"""The Recipe & switches tab: the probe's recommended accelerations for this machine (edit 'use' to override),
more ``key=value`` overrides, and the memory estimate and batch plan of the recipe with them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr
import pandas as pd

from speechtrain.ui import backend
from speechtrain.ui.page import SWITCH_COLUMNS, Inputs, Workspace, all_overrides, df, guarded, ok, switch_overrides


@dataclass
class RecipeTab:
    probe: Any
    probe_head: Any
    switches: Any
    switch_text: Any
    extra: Any
    estimate: Any
    plan: Any
    status: Any
    estimate_out: Any
    plan_out: Any


def layout(ws: Workspace) -> RecipeTab:
    probe = gr.Button("Probe this machine", variant="primary", elem_id="probe")
    probe_head = gr.Markdown(elem_id="probe-head")
    switches = gr.Dataframe(
        headers=SWITCH_COLUMNS,
        label="accelerations: the probe's recommendation for this machine; edit 'use' to override",
        interactive=True,
        wrap=True,
        static_columns=[0, 1, 2, 4],
        # the page's width shared out, the reason given the most (it was cut off past the right edge)
        column_widths=["26%", "12%", "8%", "9%", "45%"],
        elem_id="switches",
    )
    switch_text = gr.Textbox(
        label="overrides from the switches (passed to prepare, estimate, plan, tune, train, bench)",
        interactive=False,
        elem_id="switch-overrides",
    )
    extra = gr.Textbox(
        elem_id="extra",
        label="more overrides (key=value, one per line)",
        lines=2,
        placeholder="train.max_steps=100",
    )
    with gr.Row():
        estimate = gr.Button("Estimate memory", elem_id="estimate")
        plan = gr.Button("Plan batches", elem_id="plan")
    status = gr.Markdown(elem_id="recipe-status")
    with gr.Row():
        # tables of aligned columns: a monospace font keeps them aligned (a proportional one scattered them)
        estimate_out = gr.Textbox(label="estimate", lines=10, elem_id="estimate-out", elem_classes=["st-mono"])
        plan_out = gr.Textbox(label="plan", lines=10, elem_id="plan-out", elem_classes=["st-mono"])
    return RecipeTab(probe, probe_head, switches, switch_text, extra, estimate, plan, status, estimate_out, plan_out)


def wire(ws: Workspace, tab: RecipeTab, inputs: Inputs) -> None:
    @guarded(3)
    def do_probe(r: str) -> tuple[str, str, pd.DataFrame]:
        cfg = ws.load_config(r, [], reads_data=False) if r else None  # the probe reads no data
        head, rows = backend.probe_switches(cfg)
        table = df([[s.key, s.recommended, s.recipe, s.recommended, s.reason] for s in rows], SWITCH_COLUMNS)
        return ok("probed; 'use' starts at the recommendation, edit it to override"), f"**{head}**", table

    tab.probe.click(do_probe, [inputs.recipe], [tab.status, tab.probe_head, tab.switches], api_name="probe")
    tab.switches.change(
        lambda t: " ".join(switch_overrides(t)), [tab.switches], [tab.switch_text], api_visibility="private"
    )

    @guarded(2)
    def do_estimate(r: str, d: str, f: str, sw: str, ex: str) -> tuple[str, str]:
        r = str(ws.recipe(r))  # a listed recipe, or a file under the UI's roots, before anything reads it
        cfg = ws.load_config(r, all_overrides(r, d, f, sw, ex))
        with ws.reading_data():
            return ok("estimate done (`speechtrain estimate`)"), backend.estimate_text(cfg)

    tab.estimate.click(do_estimate, inputs.all(), [tab.status, tab.estimate_out], api_name="estimate")

    @guarded(2)
    def do_plan(r: str, d: str, f: str, sw: str, ex: str) -> tuple[str, str]:
        r = str(ws.recipe(r))
        cfg = ws.load_config(r, all_overrides(r, d, f, sw, ex))
        with ws.reading_data():
            return ok("plan done (`speechtrain plan`)"), backend.plan_text(cfg)

    tab.plan.click(do_plan, inputs.all(), [tab.status, tab.plan_out], api_name="plan")
