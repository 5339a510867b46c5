"""The Gradio page: Data, Recipe & switches, Tune, Train, Bench, Listen, Runs.

Every handler is a thin wrapper: library calls go through :mod:`speechtrain.ui.backend`, long work
is started as the ordinary CLI in a background process (:mod:`speechtrain.ui.jobs`), runs are read
back from their directories (:mod:`speechtrain.ui.runs`). Each handler's first output is a status
line; bad input shows the same ``error: ...`` text as the CLI. Event ``api_name``s are the HTTP API
that the tests drive with gradio_client (``/prepare``, ``/start_train``, ``/run_view`` ...).
"""

from __future__ import annotations

import functools
import time
from collections import deque
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from speechtrain.errors import UserError
from speechtrain.logs import get_logger
from speechtrain.train.rundir import lock_holder
from speechtrain.ui import backend, jobs, runs

log = get_logger(__name__)

POLL_SECONDS = 1.0
SWITCH_COLUMNS = ["setting", "recommended", "recipe", "use", "why"]
CSS = ".st-error {color: #b00020; font-weight: 600}"


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


# -------------------------------------------------------------------------------------------- helpers
def ok(text: str) -> str:
    return text


def err(exc: BaseException) -> str:
    return f"error: {exc}"


def guarded(n_outputs: int):  # noqa: ANN201 - a decorator
    """Bad input (UserError, including the config's ValidationError texts) becomes the status line;
    the other outputs are left as they are."""

    def wrap(fn):  # noqa: ANN001, ANN202
        if _is_generator(fn):

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


def _is_generator(fn: Any) -> bool:
    import inspect

    return inspect.isgeneratorfunction(fn)


def _df(rows: list[Any], columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=columns)


def _series_df(series: list[tuple[Any, str, float]], x: str = "step") -> pd.DataFrame | None:
    """(x, series, value) rows as a frame with numeric x and value columns, or None while there are
    none: the page's plot fixes its axis types and series colours from the first frame it gets, so an
    empty frame first would leave the later curves undrawn (seen in headless Chromium, Gradio 6.31)."""
    if not series:
        return None
    df = pd.DataFrame(series, columns=[x, "series", "value"])
    return df.astype({x: "float64", "series": object, "value": "float64"})


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


# -------------------------------------------------------------------------------------------- the app
def build_app(ws: Workspace) -> gr.Blocks:  # noqa: PLR0915 - one page, built top to bottom
    with gr.Blocks(title="speechtrain") as app:
        gr.Markdown("## speechtrain\nPrepare data, choose switches, tune, train, watch, benchmark and listen.")
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

        # ------------------------------------------------------------------------------------- Data
        with gr.Tab("Data", id="data"):
            with gr.Row():
                utterances = gr.Number(120, label="demo utterances", precision=0, minimum=8, elem_id="utterances")
                make_demo = gr.Button("Make demo corpus", elem_id="make-demo")
                upload = gr.File(label="or upload a dataset .zip", file_types=[".zip"], type="filepath", height=120)
            prepare_btn = gr.Button("Prepare", variant="primary", elem_id="prepare")
            data_status = gr.Markdown(elem_id="data-status")
            with gr.Row():
                data_summary = gr.Textbox(label="report", lines=7, elem_id="data-summary")
                data_log = gr.Textbox(label="prepare output", lines=7, max_lines=12, autoscroll=True)
            with gr.Row():
                skipped = gr.Dataframe(headers=["reason", "count", "first ids"], label="skipped", interactive=False)
                hist = gr.BarPlot(x="seconds", y="utterances", title="durations", label="durations (s)")
            with gr.Row():
                symbols = gr.Dataframe(
                    headers=["symbol", "count", "known"], label="symbol inventory", interactive=False, max_height=300
                )
                unknown = gr.Textbox(label="characters the text front end cannot map", lines=2)

        # ---------------------------------------------------------------------------------- Recipe
        with gr.Tab("Recipe & switches", id="recipe"):
            probe_btn = gr.Button("Probe this machine", variant="primary", elem_id="probe")
            probe_head = gr.Markdown(elem_id="probe-head")
            switches = gr.Dataframe(
                headers=SWITCH_COLUMNS,
                label="accelerations: the probe's recommendation for this machine; edit 'use' to override",
                interactive=True,
                wrap=True,
                static_columns=[0, 1, 2, 4],
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
                estimate_btn = gr.Button("Estimate memory", elem_id="estimate")
                plan_btn = gr.Button("Plan batches", elem_id="plan")
            recipe_status = gr.Markdown(elem_id="recipe-status")
            with gr.Row():
                estimate_out = gr.Textbox(label="estimate", lines=10)
                plan_out = gr.Textbox(label="plan", lines=10)

        # ------------------------------------------------------------------------------------ Tune
        with gr.Tab("Tune", id="tune"):
            tune_btn = gr.Button("Tune batch sizes per bucket", variant="primary", elem_id="tune")
            tune_status = gr.Markdown(elem_id="tune-status")
            tune_trials = gr.Dataframe(
                headers=["bucket", "batch", "padded frames", "result", "detail"], label="trials", interactive=False
            )
            tune_table = gr.Textbox(label="tuned per-bucket table", lines=8)

        # ----------------------------------------------------------------------------------- Train
        with gr.Tab("Train", id="train"):
            with gr.Row():
                run_name = gr.Textbox(label="new run name (default: recipe-time)", elem_id="run-name")
                max_steps = gr.Number(0, label="max steps (0: the recipe's)", precision=0, elem_id="max-steps")
                start_btn = gr.Button("Start", variant="primary", elem_id="start")
            with gr.Row():
                run_pick = gr.Dropdown([], label="run", allow_custom_value=True, elem_id="run-pick", scale=3)
                resume_extra = gr.Textbox(label="on resume (key=value)", placeholder="train.max_steps=400", scale=2)
                stop_btn = gr.Button("Stop", elem_id="stop")
                resume_btn = gr.Button("Resume", elem_id="resume")
            train_status = gr.Markdown(elem_id="train-status")
            with gr.Row():
                loss_plot = gr.LinePlot(
                    x="step", y="value", color="series", title="train losses", height=260, elem_id="loss-plot"
                )
                eval_plot = gr.LinePlot(x="step", y="value", color="series", title="eval", height=260)
            with gr.Row():
                speed_plot = gr.LinePlot(
                    x="step", y="value", color="series", title="audio-s/s and data wait %", height=260
                )
                mem_plot = gr.LinePlot(x="step", y="value", color="series", title="memory (GiB)", height=260)
            gpu_plot = gr.LinePlot(x="seconds", y="value", color="series", title="GPU (NVML)", height=220)
            with gr.Row():
                events_df = gr.Dataframe(headers=["step", "event", "detail"], label="events", interactive=False)
                eval_audio = gr.Audio(label="latest eval audio", type="filepath", interactive=False)
            train_log = gr.Textbox(label="output", lines=8, max_lines=14, autoscroll=True)
            timer = gr.Timer(2.0)

        # ----------------------------------------------------------------------------------- Bench
        with gr.Tab("Bench", id="bench"):
            with gr.Row():
                bench_steps = gr.Number(
                    20, label="timed steps per configuration", precision=0, minimum=2, elem_id="bench-steps"
                )
                bench_limit = gr.Number(10, label="seconds per configuration (cap)", minimum=1, elem_id="bench-limit")
                bench_skip = gr.Textbox(
                    "" if backend.has_gpu() else "compile",
                    label="rungs to leave out (space separated)",
                    placeholder="compile",
                )
                bench_btn = gr.Button("Run the ablation ladder", variant="primary", elem_id="bench")
            bench_status = gr.Markdown(elem_id="bench-status")
            bench_log = gr.Textbox(label="progress", lines=5, autoscroll=True)
            bench_table = gr.Markdown()
            bench_plot = gr.Image(label="ladder", type="filepath", interactive=False)
            bench_diag = gr.Textbox(label="diagnosis", lines=6)

        # ---------------------------------------------------------------------------------- Listen
        with gr.Tab("Listen", id="listen"):
            listen_run = gr.Dropdown([], label="finished run", allow_custom_value=True, elem_id="listen-run")
            with gr.Row():
                text = gr.Textbox("the quick brown fox", label="text", scale=3, elem_id="text")
                synth_btn = gr.Button("Synthesize", variant="primary", elem_id="synthesize")
            with gr.Row():
                audio_in = gr.Audio(label="audio in (vocode / classify)", type="filepath")
                vocode_btn = gr.Button("Vocode")
                classify_btn = gr.Button("Classify")
            listen_status = gr.Markdown(elem_id="listen-status")
            audio_out = gr.Audio(label="output", type="filepath", interactive=False)
            labels = gr.Dataframe(headers=["label", "probability"], label="classes", interactive=False)

        # ------------------------------------------------------------------------------------ Runs
        with gr.Tab("Runs", id="runs"):
            runs_btn = gr.Button("Refresh", elem_id="runs-refresh")
            runs_df = gr.Dataframe(headers=runs.COLUMNS, label="runs", interactive=False, wrap=True)

        # ============================================================================= handlers
        @guarded(2)
        def do_make_demo(n: float) -> tuple[str, str]:
            out = backend.make_demo_corpus(ws.data / "demo", int(n or 120))
            return ok(f"demo corpus in {out} (format {backend.detect_format(out)}); next: Prepare"), str(out)

        make_demo.click(do_make_demo, [utterances], [data_status, data], api_name="make_demo")

        @guarded(3)
        def do_upload(path: str | None) -> tuple[str, str, str]:
            if not path:
                raise UserError("upload a .zip of the dataset folder")
            folder = backend.extract_zip(path, ws.data / "uploads")
            found = backend.detect_format(folder)
            return ok(f"unpacked to {folder}; detected format: {found}"), str(folder), "auto"

        upload.upload(do_upload, [upload], [data_status, data, fmt], api_name="upload_zip")

        @guarded(7)
        def do_prepare(r: str, d: str, f: str, sw: str, ex: str):  # noqa: ANN202 - a generator
            if not d:
                raise UserError("choose a dataset folder or manifest (or make the demo corpus)")
            if f == "auto":
                backend.detect_format(d)  # the same error as the CLI, before starting anything
            folder = ws.job("prepare")
            report_json = folder / "report.json"
            argv = backend.prepare_argv(r, d, f, report_json, backend.parse_overrides(sw) + backend.parse_overrides(ex))
            jobs.start(folder, argv)
            skip = [gr.skip()] * 5
            while (state := jobs.status(folder)).status == "running":
                yield ok(f"preparing ... (`{state.command}`)"), jobs.log_tail(folder), *skip
                time.sleep(POLL_SECONDS)
            tail = jobs.log_tail(folder)
            if state.status != "done":
                yield err_line(state), tail, *skip
                return
            rep = backend.data_report(report_json)
            hist_df = _df(backend.histogram(rep.durations), ["seconds", "utterances"])
            yield (
                ok(f"prepared: kept {rep.kept} utterances"),
                tail,
                rep.summary,
                _df(rep.skipped, ["reason", "count", "first ids"]),
                hist_df,
                _df([[_shown(s), n, k] for s, n, k in rep.symbols], ["symbol", "count", "known"]),
                " ".join(rep.unknown) or "(none)",
            )

        prepare_btn.click(
            do_prepare,
            [recipe, data, fmt, switch_text, extra],
            [data_status, data_log, data_summary, skipped, hist, symbols, unknown],
            api_name="prepare",
        )

        @guarded(3)
        def do_probe(r: str) -> tuple[str, str, pd.DataFrame]:
            cfg = backend.load_config(r, []) if r else None
            head, rows = backend.probe_switches(cfg)
            table = _df([[s.key, s.recommended, s.recipe, s.recommended, s.reason] for s in rows], SWITCH_COLUMNS)
            return ok("probed; 'use' starts at the recommendation, edit it to override"), f"**{head}**", table

        probe_btn.click(do_probe, [recipe], [recipe_status, probe_head, switches], api_name="probe")
        switches.change(lambda t: " ".join(switch_overrides(t)), [switches], [switch_text], api_visibility="private")

        @guarded(2)
        def do_estimate(r: str, d: str, f: str, sw: str, ex: str) -> tuple[str, str]:
            cfg = backend.load_config(r, all_overrides(r, d, f, sw, ex))
            return ok("estimate done (`speechtrain estimate`)"), backend.estimate_text(cfg)

        estimate_btn.click(
            do_estimate, [recipe, data, fmt, switch_text, extra], [recipe_status, estimate_out], api_name="estimate"
        )

        @guarded(2)
        def do_plan(r: str, d: str, f: str, sw: str, ex: str) -> tuple[str, str]:
            cfg = backend.load_config(r, all_overrides(r, d, f, sw, ex))
            return ok("plan done (`speechtrain plan`)"), backend.plan_text(cfg)

        plan_btn.click(do_plan, [recipe, data, fmt, switch_text, extra], [recipe_status, plan_out], api_name="plan")

        @guarded(4)
        def do_tune(r: str, d: str, f: str, sw: str, ex: str):  # noqa: ANN202 - a generator
            overrides = all_overrides(r, d, f, sw, ex)
            backend.load_config(r, overrides)  # bad overrides fail here, with the CLI's message
            folder = ws.job("tune")
            out_yaml = ws.tuned / f"{Path(r).stem}-tuned-{time.strftime('%H%M%S')}.yaml"
            jobs.start(folder, backend.tune_argv(r, overrides, out_yaml, folder / "tune.json"))
            while (state := jobs.status(folder)).status == "running":
                yield (
                    ok("tuning ..."),
                    _df(parse_trials(jobs.log_tail(folder, 400)), TRIAL_COLUMNS),
                    gr.skip(),
                    gr.skip(),
                )
                time.sleep(POLL_SECONDS)
            trials = _df(parse_trials(jobs.log_tail(folder, 400)), TRIAL_COLUMNS)
            if state.status != "done":
                yield err_line(state), trials, jobs.log_tail(folder), gr.skip()
                return
            table = backend.tune_table(folder / "tune.json")
            note = f"wrote {out_yaml}: choose it as the recipe to train with the tuned sizes"
            yield ok(note), trials, table, gr.update(choices=ws.recipes(), value=str(out_yaml))

        tune_btn.click(
            do_tune,
            [recipe, data, fmt, switch_text, extra],
            [tune_status, tune_trials, tune_table, recipe],
            api_name="tune",
        )

        @guarded(2)
        def do_start(r: str, d: str, f: str, sw: str, ex: str, name: str, steps: float) -> tuple[str, Any]:
            overrides = all_overrides(r, d, f, sw, ex)
            name = (name or "").strip() or f"{Path(r).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
            if "/" in name or name.startswith("."):
                raise UserError(f"run name '{name}': use a plain folder name (no '/', not starting with '.')")
            run_dir = ws.runs / name
            if runs.is_run_dir(run_dir):
                raise UserError(f"{run_dir} already exists: pick it in 'run' and Resume, or choose another name")
            overrides += [f"train.output_dir={run_dir}"]
            if steps and int(steps) > 0:
                overrides.append(f"train.max_steps={int(steps)}")
            backend.load_config(r, overrides)  # config errors before any process starts
            jobs.start(runs.job_folder(run_dir), backend.train_argv(r, overrides))
            return ok(f"started {name}"), gr.update(choices=run_names(), value=name)

        start_btn.click(
            do_start,
            [recipe, data, fmt, switch_text, extra, run_name, max_steps],
            [train_status, run_pick],
            api_name="start_train",
        )

        @guarded(1)
        def do_stop(run: str) -> str:
            path = ws.resolve_run(run)
            state = jobs.stop(runs.job_folder(path))
            if state.status != "running":
                raise UserError(f"{path.name} is not running (status: {runs.run_info(path).status})")
            return ok(f"asked {path.name} to stop (SIGTERM): it saves a checkpoint and exits")

        stop_btn.click(do_stop, [run_pick], [train_status], api_name="stop_train")

        @guarded(1)
        def do_resume(run: str, more: str) -> str:
            path = ws.resolve_run(run)
            info = runs.run_info(path)
            holder = lock_holder(path)
            if holder is not None and info.status != "starting":
                who = (
                    f"pid {holder.get('pid')} on {holder.get('host', '?')}" if holder.get("pid") else "another process"
                )
                raise UserError(f"{path.name} is being trained by {who} (it holds the run's lock): stop that one first")
            if info.status in ("running", "starting"):
                raise UserError(f"{path.name} is already running")
            jobs.start(runs.job_folder(path), backend.resume_argv(path, backend.parse_overrides(more)))
            return ok(f"resuming {path.name} from step {info.step}")

        resume_btn.click(do_resume, [run_pick, resume_extra], [train_status], api_name="resume_train")

        def run_view(run: str | None):  # noqa: ANN202 - many outputs
            sample = backend.gpu_stats()
            if sample is not None:
                ws.gpu.append({"t": time.time() - ws.t0, "gpus": sample})
            gpu_df = _series_df(gpu_series(ws.gpu), x="seconds")
            empty = _series_df([])
            if not run:
                return (
                    "no run selected",
                    empty,
                    empty,
                    empty,
                    empty,
                    gpu_df,
                    _df([], ["step", "event", "detail"]),
                    None,
                    "",
                )
            try:
                path = ws.resolve_run(run)
            except UserError as exc:
                return err(exc), empty, empty, empty, empty, gpu_df, gr.skip(), None, ""
            info = runs.run_info(path)
            rows = backend.read_metrics(path)
            samples = backend.eval_samples(path)
            steps = f"step {info.step}" + (f" of {info.max_steps}" if info.max_steps else "")
            head = f"**{info.name}**: {info.status}, {steps}" + (f"; `{info.command}`" if info.command else "")
            if info.error:
                head += f"\n\n{info.error}"
            return (
                head,
                _series_df(runs.loss_series(rows)),
                _series_df(runs.eval_series(rows)),
                _series_df(runs.speed_series(rows)),
                _series_df(runs.memory_series(rows)),
                gpu_df,
                _df(runs.events(rows), ["step", "event", "detail"]),
                str(samples[-1]) if samples else None,
                jobs.log_tail(runs.job_folder(path), 30),
            )

        view_outputs = [
            train_status,
            loss_plot,
            eval_plot,
            speed_plot,
            mem_plot,
            gpu_plot,
            events_df,
            eval_audio,
            train_log,
        ]
        timer.tick(run_view, [run_pick], view_outputs, api_name="run_view", show_progress="hidden")
        run_pick.change(run_view, [run_pick], view_outputs, api_visibility="private")

        def run_names() -> list[str]:
            return [str(r.path.relative_to(ws.runs)) for r in runs.list_runs(ws.runs)]

        @guarded(4)
        def do_bench(r: str, d: str, f: str, sw: str, ex: str, steps: float, limit: float, leave_out: str):  # noqa: ANN202
            overrides = all_overrides(r, d, f, sw, ex)
            backend.load_config(r, overrides)
            folder = ws.job("bench")
            jobs.start(
                folder,
                backend.bench_argv(
                    r, overrides, folder, int(steps or 20), float(limit or 10), (leave_out or "").split()
                ),
            )
            skip = [gr.skip()] * 3
            while (state := jobs.status(folder)).status == "running":
                yield ok("running the ladder ..."), jobs.log_tail(folder, 8), *skip
                time.sleep(POLL_SECONDS)
            if state.status != "done":
                yield err_line(state), jobs.log_tail(folder), *skip
                return
            table, diagnosis = backend.bench_outputs(folder / "bench.json")
            png = folder / "bench.png"
            yield (
                ok(f"ladder done: {folder}"),
                jobs.log_tail(folder, 8),
                table,
                str(png) if png.is_file() else None,
                diagnosis,
            )

        bench_btn.click(
            do_bench,
            [recipe, data, fmt, switch_text, extra, bench_steps, bench_limit, bench_skip],
            [bench_status, bench_log, bench_table, bench_plot, bench_diag],
            api_name="bench",
        )

        @guarded(2)
        def do_synthesize(run: str, sentence: str) -> tuple[str, str]:
            path = ws.resolve_run(run)
            out = ws.ui / "listen" / f"{path.name}-{time.strftime('%H%M%S')}-{time.time_ns() % 1000:03d}.wav"
            res = backend.synthesize(path, sentence, out)
            return ok(_rtf_line("synthesized", res)), str(res.audio_path)

        synth_btn.click(do_synthesize, [listen_run, text], [listen_status, audio_out], api_name="synthesize")

        @guarded(2)
        def do_vocode(run: str, wav: str | None) -> tuple[str, str]:
            if not wav:
                raise UserError("give an audio file to vocode")
            path = ws.resolve_run(run)
            out = ws.ui / "listen" / f"{path.name}-vocoded-{time.strftime('%H%M%S')}.wav"
            res = backend.vocode(path, wav, out)
            return ok(_rtf_line("vocoded", res)), str(res.audio_path)

        vocode_btn.click(do_vocode, [listen_run, audio_in], [listen_status, audio_out], api_name="vocode")

        @guarded(2)
        def do_classify(run: str, wav: str | None) -> tuple[str, pd.DataFrame]:
            if not wav:
                raise UserError("give an audio file to classify")
            label, probs, seconds = backend.classify(ws.resolve_run(run), wav)
            rows = sorted(probs.items(), key=lambda kv: -kv[1])
            return ok(f"label **{label}** ({probs[label]:.3f}) in {seconds * 1000:.0f} ms"), _df(
                [[k, round(v, 4)] for k, v in rows], ["label", "probability"]
            )

        classify_btn.click(do_classify, [listen_run, audio_in], [listen_status, labels], api_name="classify")

        def do_runs() -> pd.DataFrame:
            return _df([r.row() for r in runs.list_runs(ws.runs)], runs.COLUMNS)

        runs_btn.click(do_runs, None, [runs_df], api_name="runs")

        def on_load():  # noqa: ANN202
            """Reattach: list the runs found on disk and pick the running one (else the newest)."""
            found = runs.list_runs(ws.runs)
            names = [str(r.path.relative_to(ws.runs)) for r in found]
            live = [n for n, r in zip(names, found) if r.status in ("running", "starting")]
            done = [n for n, r in zip(names, found) if r.status in ("finished", "stopped")]
            pick = live[0] if live else (names[0] if names else None)
            return (
                gr.update(choices=names, value=pick),
                gr.update(choices=names, value=done[0] if done else pick),
                _df([r.row() for r in found], runs.COLUMNS),
            )

        app.load(on_load, None, [run_pick, listen_run, runs_df], api_name="reattach")
    return app


TRIAL_COLUMNS = ["bucket", "batch", "padded frames", "result", "detail"]


def parse_trials(text: str) -> list[list[Any]]:
    """The tuner's trial lines (``  bucket K: B x F frames: fits, peak ..., N audio s/s``) as rows,
    so that the table fills in while the tuner runs."""
    import re

    pat = re.compile(r"^\s*bucket (\d+): (\d+) x (\d+) frames: ([^,]+)(?:, (.*))?$")
    rows = []
    for line in text.splitlines():
        m = pat.match(line)
        if m:
            rows.append([int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4), m.group(5) or ""])
    return rows


def gpu_series(samples: Any) -> list[tuple[float, str, float]]:
    out = []
    for s in samples:
        for g in s["gpus"]:
            for key, label in (("util_pct", "util %"), ("mem_gib", "mem GiB"), ("temp_c", "temp C"), ("power_w", "W")):
                out.append((round(s["t"], 1), f"gpu{g['gpu']} {label}", g[key]))
    return out


def _shown(symbol: str) -> str:
    return {" ": "(space)", "\t": "(tab)"}.get(symbol, symbol)


def err_line(state: jobs.JobState) -> str:
    return state.error or f"error: the command ended with exit code {state.exit_code} (see its output)"


def _rtf_line(what: str, res: backend.Inference) -> str:
    return f"{what} {res.seconds:.2f} s of audio in {res.compute_seconds:.2f} s: RTF {res.rtf:.3f}"


def launch(
    host: str = "127.0.0.1",
    port: int | None = None,
    runs_root: str | Path = "runs",
    data_root: str | Path = "data",
    block: bool = True,
    quiet: bool = False,
) -> tuple[gr.Blocks, str]:
    """Build and start the page; returns the app and its local URL (``block=False`` returns at once)."""
    ws = Workspace(runs_root, data_root)
    app = build_app(ws)
    app.queue(default_concurrency_limit=4)
    _, url, _ = app.launch(
        server_name=host,
        server_port=port,
        prevent_thread_lock=True,
        allowed_paths=[str(ws.runs), str(ws.data)],
        quiet=quiet,
        show_error=True,
        css=CSS,
        footer_links=["api"],
    )
    log.info("speechtrain ui on %s (runs in %s, data in %s)", url, ws.runs, ws.data)
    if block:
        app.block_thread()
    return app, url
