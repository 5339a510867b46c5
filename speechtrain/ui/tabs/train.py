"""The Train tab: start a run (``speechtrain train`` as a job in its run directory), stop it (SIGTERM: it saves a
checkpoint), resume it, and watch it: losses, eval, speed, memory and (on a machine with a GPU) GPU plots, events,
the latest eval audio and its output, refreshed every two seconds from the run directory (so a reloaded page sees
the same).

What the buttons say (``status``) and what the run view shows (``head``) are two lines: the view's refresh never
overwrites a button's message, so an error stays until the next click."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from speechtrain.errors import UserError
from speechtrain.train.rundir import lock_holder
from speechtrain.ui import backend, charts, jobs, runs
from speechtrain.ui.page import Inputs, Workspace, all_overrides, df, err, guarded, ok

EVENT_COLUMNS = ["step", "event", "detail"]


@dataclass
class TrainTab:
    run_name: Any
    max_steps: Any
    start: Any
    run_pick: Any
    resume_extra: Any
    stop: Any
    resume: Any
    status: Any
    head: Any
    loss_plot: Any
    eval_plot: Any
    speed_plot: Any
    mem_plot: Any
    gpu_plot: Any
    events: Any
    eval_audio: Any
    log: Any
    timer: Any
    shown: Any  # what each plot shows now (charts.digest): a tick redraws only the plots whose data changed

    def view(self) -> list[Any]:
        """What :func:`read_run_view` fills, in its order."""
        return [
            self.head,
            self.loss_plot,
            self.eval_plot,
            self.speed_plot,
            self.mem_plot,
            self.gpu_plot,
            self.events,
            self.eval_audio,
            self.log,
        ]


def layout(ws: Workspace) -> TrainTab:
    with gr.Row():
        run_name = gr.Textbox(label="new run name (default: recipe-time)", elem_id="run-name")
        max_steps = gr.Number(0, label="max steps (0: the recipe's)", precision=0, elem_id="max-steps")
        start = gr.Button("Start", variant="primary", elem_id="start")
    with gr.Row():
        run_pick = gr.Dropdown([], label="run", allow_custom_value=True, elem_id="run-pick", scale=3)
        resume_extra = gr.Textbox(label="on resume (key=value)", placeholder="train.max_steps=400", scale=2)
        stop = gr.Button("Stop", elem_id="stop")
        resume = gr.Button("Resume", elem_id="resume")
    status = gr.Markdown(elem_id="train-status")
    head = gr.Markdown(elem_id="run-head")
    with gr.Row():
        loss_plot = gr.Plot(show_label=False, elem_id="loss-plot")
        eval_plot = gr.Plot(show_label=False, elem_id="eval-plot")
    with gr.Row():
        speed_plot = gr.Plot(show_label=False, elem_id="speed-plot")
        mem_plot = gr.Plot(show_label=False, elem_id="mem-plot")
    # no GPU (or no NVML): no plot that can only stay empty
    gpu_plot = gr.Plot(show_label=False, visible=backend.gpu_stats() is not None, elem_id="gpu-plot")
    with gr.Row():
        events = gr.Dataframe(headers=EVENT_COLUMNS, label="events", interactive=False)
        eval_audio = gr.Audio(label="latest eval audio", type="filepath", interactive=False)
    log = gr.Textbox(
        label="output", lines=8, max_lines=14, autoscroll=True, elem_id="train-log", elem_classes=["st-mono"]
    )
    timer = gr.Timer(2.0)
    shown = gr.State([])
    return TrainTab(
        run_name,
        max_steps,
        start,
        run_pick,
        resume_extra,
        stop,
        resume,
        status,
        head,
        loss_plot,
        eval_plot,
        speed_plot,
        mem_plot,
        gpu_plot,
        events,
        eval_audio,
        log,
        timer,
        shown,
    )


def wire(ws: Workspace, tab: TrainTab, inputs: Inputs) -> None:
    @guarded(2)
    def do_start(r: str, d: str, f: str, sw: str, ex: str, name: str, steps: float) -> tuple[str, Any]:
        r = str(ws.recipe(r))  # a listed recipe, or a file under the UI's roots, before anything reads it
        overrides = all_overrides(r, d, f, sw, ex)
        name = (name or "").strip() or f"{Path(r).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
        if "/" in name or "\\" in name or name.startswith("."):
            raise UserError(f"run name '{name}': use a plain folder name (no '/', not starting with '.')")
        run_dir = ws.runs / name
        if runs.is_run_dir(run_dir):
            raise UserError(f"{run_dir} already exists: pick it in 'run' and Resume, or choose another name")
        overrides += [f"train.output_dir={run_dir}"]
        if steps and int(steps) > 0:
            overrides.append(f"train.max_steps={int(steps)}")
        ws.load_config(r, overrides)  # config errors (and what the UI refuses) before any process starts
        ws.start(runs.job_folder(run_dir), backend.train_argv(r, overrides))
        return ok(f"started {name}"), gr.update(choices=ws.run_names(), value=name)

    tab.start.click(
        do_start, [*inputs.all(), tab.run_name, tab.max_steps], [tab.status, tab.run_pick], api_name="start_train"
    )

    @guarded(1)
    def do_stop(run: str) -> str:
        path = ws.resolve_run(run)
        state = jobs.stop(runs.job_folder(path))
        if state.status != "running":
            raise UserError(f"{path.name} is not running (status: {runs.run_info(path).status})")
        return ok(f"asked {path.name} to stop (SIGTERM): it saves a checkpoint and exits")

    tab.stop.click(do_stop, [tab.run_pick], [tab.status], api_name="stop_train")

    @guarded(1)
    def do_resume(run: str, more: str) -> str:
        return resume(ws, run, more)

    tab.resume.click(do_resume, [tab.run_pick, tab.resume_extra], [tab.status], api_name="resume_train")

    def run_view(run: str | None) -> tuple[Any, ...]:
        """Everything, every plot drawn anew: a picked run (and the HTTP API's ``/run_view``)."""
        view = read_run_view(ws, run)
        return (*view, [charts.digest(p) for p in view[1:6]])

    def run_ticks(run: str | None, shown: list[str | None]) -> tuple[Any, ...]:
        """The timer's refresh: a plot gets its chart only when its data changed (each chart sent is drawn anew,
        its hover lost)."""
        view = read_run_view(ws, run)
        now = [charts.digest(p) for p in view[1:6]]
        plots = [gr.skip() if i < len(shown) and d == shown[i] else p for i, (d, p) in enumerate(zip(now, view[1:6]))]
        return (view[0], *plots, *view[6:], now)

    outputs = [*tab.view(), tab.shown]
    tab.timer.tick(run_ticks, [tab.run_pick, tab.shown], outputs, api_visibility="private", show_progress="hidden")
    tab.run_pick.change(run_view, [tab.run_pick], outputs, api_name="run_view")


def resume(ws: Workspace, run: str, more: str) -> str:
    """Resume ``run`` as a job (``train --resume``), checked before it starts: a UserError when it runs, another
    process holds it, or it reads a dataset outside the page's data roots (a run of the command line: the job would
    start and then fail)."""
    path = ws.resolve_run(run)
    overrides = backend.parse_overrides(more)
    info = runs.run_info(path)
    if info.status in ("running", "starting"):
        raise UserError(f"{path.name} is already {info.status}")
    why = read_only(ws, path)
    if why is not None:
        raise UserError(f"{path.name} cannot be resumed from the page: {why}")
    ws.load_run_config(path, overrides)  # what `train --resume` reads, checked before it starts
    holder = lock_holder(path)
    if holder is not None and info.status != "starting":
        who = f"pid {holder.get('pid')} on {holder.get('host', '?')}" if holder.get("pid") else "another process"
        raise UserError(f"{path.name} is being trained by {who} (it holds the run's lock): stop that one first")
    if info.status in ("running", "starting"):
        raise UserError(f"{path.name} is already running")
    ws.start(runs.job_folder(path), backend.resume_argv(path, overrides))
    return ok(f"resuming {path.name} from step {info.step}")


def read_only(ws: Workspace, path: Path) -> str | None:
    """Why the page can only show the run ``path`` (None: it may act on it): its saved config reads a dataset
    outside the page's data roots (a run started on the command line), which every job of the page refuses."""
    data = backend.run_config(path).get("data") or {}
    for key in ws.DATA_KEYS:
        value = data.get(key.split(".", 1)[1])
        if value:
            try:
                ws.data_path(str(value), key)
            except UserError:
                return (
                    f"its {key} {value} lies outside the page's data roots ({', '.join(map(str, ws.data_roots()))}): "
                    f"the page shows it read-only; continue it on the command line: `speechtrain train --resume {path}`"
                )
    return None


def read_run_view(ws: Workspace, run: str | None) -> tuple[Any, ...]:
    """Everything the Train tab shows of ``run``, read from its directory (and NVML's GPU samples)."""
    sample = backend.gpu_stats()
    if sample is not None:
        ws.gpu.append({"t": time.time() - ws.t0, "gpus": sample})
    gpu = charts.chart(gpu_series(ws.gpu), "GPU (NVML)", x="seconds", height=160)
    empty = None
    if not run:
        return "no run selected", empty, empty, empty, empty, gpu, df([], EVENT_COLUMNS), None, ""
    try:
        path = ws.resolve_run(run)
    except UserError as exc:
        return err(exc), empty, empty, empty, empty, gpu, gr.skip(), None, ""
    info = runs.run_info(path)
    rows = backend.read_metrics(path)
    samples = backend.eval_samples(path)
    steps = f"step {info.step}" + (f" of {info.max_steps}" if info.max_steps else "")
    head = f"**{info.name}**: {info.status}, {steps}" + (f"; `{info.command}`" if info.command else "")
    if info.error:
        head += f"\n\n{info.error}"
    why = read_only(ws, path)
    if why is not None:
        head += f"\n\nread-only: {why}"
    head += jobs.warnings_text(runs.job_folder(path))  # what it warned of (prepare, step 0) scrolled past the output
    return (
        head,
        charts.chart(runs.loss_series(rows), "train losses (each on its own axis)", panels=True),
        charts.chart(runs.eval_series(rows), "eval (each metric in its own units)", panels=True),
        charts.chart(runs.speed_series(rows), "audio-s/s and data wait %"),
        charts.chart(runs.memory_series(rows), "memory (GiB)"),
        gpu,
        df(runs.events(rows), EVENT_COLUMNS),
        ws.show(samples[-1]) if samples else None,
        jobs.log_tail(runs.job_folder(path), 30),
    )


def gpu_series(samples: Any) -> list[tuple[float, str, float]]:
    out = []
    for s in samples:
        for g in s["gpus"]:
            for key, label in (("util_pct", "util %"), ("mem_gib", "mem GiB"), ("temp_c", "temp C"), ("power_w", "W")):
                out.append((round(s["t"], 1), f"gpu{g['gpu']} {label}", g[key]))
    return out
