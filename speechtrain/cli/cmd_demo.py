"""speechtrain demo [--minutes M] [--out DIR]: the whole tour on the built-in demo corpus.

Makes the demo corpus when missing (data/demo), prepares it, probes the hardware, tunes the
per-bucket batch sizes, trains a tiny recipe for a bounded time, runs the ablation ladder, and
writes a report folder (markdown, JSON, PNG, the run directory). Training and the ladder share the
``--minutes`` budget; what the other stages take depends on the machine, so once they have run the demo
prints its own estimate of the whole, from what it measured here.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_RECIPE = "gpt_tts_tiny"
#: the rungs a demo on the CPU leaves out: torch.compile's C++ build takes minutes on a small CPU
CPU_SKIPS = ("compile", "all_compile")
STAGES = ("demo corpus", "prepare", "probe", "tune", "train", "ablation ladder", "report")


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "demo",
        help="the whole tour on built-in demo data: prepare, probe, tune, train, ablate, report",
        description=__doc__.split("\n\n")[1].replace("\n", " "),
    )
    p.add_argument(
        "--minutes",
        type=float,
        default=4.0,
        help="time budget of the demo (default 4): training and the ladder get what the first stages leave; a slow "
        "or loaded machine takes longer, and the demo prints its estimate once it has measured this one",
    )
    p.add_argument("--out", default="reports/demo", help="report folder (default reports/demo)")
    p.add_argument("--data", default="data/demo", help="demo corpus folder, made when missing (default data/demo)")
    p.add_argument("--utterances", type=int, default=120, help="utterances in a newly made demo corpus")
    p.add_argument("--recipe", default=DEFAULT_RECIPE, help=f"recipe name or YAML (default {DEFAULT_RECIPE})")
    p.add_argument("--skip", action="append", default=None, metavar="RUNG", help="ladder rung to leave out")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides for the recipe")
    return p


class Stages:
    """Prints numbered stage headers with the elapsed time."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.index = 0

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def header(self, name: str, note: str = "") -> None:
        self.index += 1
        bar = f"[{self.index}/{len(STAGES)}] {name}"
        print(f"\n=== {bar} {note}".rstrip() + f"  (t={self.elapsed():.0f}s)", flush=True)


def _corpus(data: Path, utterances: int) -> None:
    from speechtrain.data.demo import make_demo_corpus

    if (data / "metadata.csv").is_file():
        print(f"using the demo corpus in {data}")
        return
    t0 = time.perf_counter()
    make_demo_corpus(data, utterances=utterances, seed=0, labelled=True)
    print(f"wrote {utterances} utterances to {data} in {time.perf_counter() - t0:.1f}s")


def _fresh_run_dir(run_dir: Path) -> None:
    """The demo's own run directory is replaced on every demo; anything else there is an error."""
    import shutil

    from speechtrain.errors import UserError

    if not run_dir.exists():
        return
    from speechtrain.train.rundir import RunDir

    if not RunDir(run_dir).is_run():
        raise UserError(f"{run_dir} exists and is not a speechtrain run directory; choose another --out")
    shutil.rmtree(run_dir)


def _budget(args: argparse.Namespace) -> dict[str, float]:
    total = args.minutes * 60.0
    # shares of the whole budget; the ladder gets what the earlier stages leave
    return {"total": total, "train": min(90.0, 0.2 * total), "reserve": min(20.0, 0.06 * total)}


def run(args: argparse.Namespace) -> int:  # noqa: PLR0915 - one stage after another
    from speechtrain.errors import UserError

    if args.minutes <= 0:
        raise UserError(f"--minutes must be > 0, got {args.minutes}")
    if args.utterances < 8:
        raise UserError(f"--utterances must be >= 8 (the demo holds some out for evaluation), got {args.utterances}")
    from speechtrain.recipes.common import find_recipe

    find_recipe(args.recipe)  # a bad name fails before any work
    stages = Stages()
    budget = _budget(args)
    out, data = Path(args.out), Path(args.data)
    out.mkdir(parents=True, exist_ok=True)

    stages.header("demo corpus")
    _corpus(data, args.utterances)

    cfg = _demo_config(args, data, out)
    from speechtrain.recipes import build_task
    from speechtrain.recipes.data import DataRecipe

    stages.header("prepare")
    needs = build_task(cfg).needs()
    report = DataRecipe(cfg).ensure_prepared(require_text=needs.text)
    print("feature cache is up to date" if report is None else getattr(report, "summary", lambda: str(report))())

    stages.header("probe")
    from speechtrain.accel.probe import probe_hardware, recommend

    info = probe_hardware(measure=True)
    where = info.gpu_name or info.cpu_name or "CPU"
    print(f"device: {info.device_type} ({where}), {info.cpu_cores} cores, torch {info.torch_version}")
    if info.measured_matmul_tflops:
        print(f"measured matmul: {info.measured_matmul_tflops:.3f} TFLOP/s ({info.measured_matmul_dtype})")
    for rec in recommend(info):
        print(f"  {rec.key} = {rec.value}: {rec.reason}")

    stages.header("tune")
    tuned = _tune(cfg)

    print(_estimate(stages.elapsed(), budget, cfg, info, tuned, args), flush=True)
    stages.header("train", f"(bounded to {budget['train']:.0f}s)")
    run_dir = _train(cfg, tuned, out, budget["train"])
    # revised with the training's measured time (the first estimate took the training's bound)
    print("revised " + _estimate(stages.elapsed(), {**budget, "train": 0.0}, cfg, info, tuned, args), flush=True)

    left = budget["total"] - stages.elapsed() - budget["reserve"]
    stages.header("ablation ladder", f"({max(left, 0):.0f}s left)")
    report = _ladder(cfg, tuned, args, info, left)

    stages.header("report")
    from speechtrain.bench.report import diagnosis_text, markdown_table, write_json, write_markdown, write_plot

    report["demo"] = {"run_dir": str(run_dir), "recipe": str(args.recipe), "seconds": stages.elapsed()}
    paths = [write_json(report, out / "bench.json"), write_markdown(report, out / "bench.md", "speechtrain demo")]
    try:
        paths.append(write_plot(report, out / "bench.png"))
    except UserError as exc:
        print(f"no chart: {exc}")
    print(markdown_table(report))
    if report.get("headline"):
        print(f"headline: {report['headline']['text']}")
    for note in report.get("notes", []):
        if note.startswith(("headline inconclusive", "other processes loaded")):
            print(f"note: {note}")
    print(diagnosis_text(report))
    print("\nwrote " + ", ".join(str(p) for p in paths) + f"; run directory {run_dir}")
    print(f"demo finished in {stages.elapsed():.0f}s")
    return 0


def _demo_config(args: argparse.Namespace, data: Path, out: Path) -> Any:
    from speechtrain.config import load_config, read_yaml
    from speechtrain.recipes.common import find_recipe

    path = find_recipe(args.recipe)
    manifest = (read_yaml(path).get("data") or {}).get("manifest")
    # recipes point into data/demo (the LJSpeech layout, or data/demo/classes for classifiers)
    if manifest and Path(manifest).parts[:2] == ("data", "demo"):
        manifest = str(data.joinpath(*Path(manifest).parts[2:]))
    base = [
        f"data.manifest={manifest or data}",
        f"train.output_dir={out / 'run'}",
        "train.tensorboard=false",
        "train.progress=true",
    ]
    return load_config(path, base + list(args.overrides))


def _tune(cfg: Any) -> dict[str, Any] | None:
    """The tuner's per-bucket sizes as overrides (None when the tuner is unavailable or fails)."""
    from speechtrain.bench.ablate import tuned_overrides
    from speechtrain.errors import UserError
    from speechtrain.recipes.tune import TuneRecipe

    # bounded for the demo: one timed step per trial, batches up to the recipe's item cap, coarse bisection
    cap = min(cfg.tune.max_batch_size, cfg.data.max_batch_size, 4 * cfg.data.batch_size)
    limits = {"steps_per_trial": 1, "max_batch_size": cap}
    limits["tolerance"] = max(cfg.tune.tolerance, 0.25)
    small = cfg.model_copy(update={"tune": cfg.tune.model_copy(update=limits)})
    print(f"tuner limits for the demo: {limits}")
    try:
        report = TuneRecipe(small).run()
    except UserError as exc:
        print(f"tuning failed: {exc}; the tuned-batch rung will be skipped")
        return None
    print(report.table())
    return tuned_overrides(report.config.data, cfg.data)


def _train(cfg: Any, tuned: dict[str, Any] | None, out: Path, seconds: float) -> Path:
    from speechtrain.bench.ablate import set_dotted
    from speechtrain.config import build_config
    from speechtrain.recipes.train import train_from_config

    raw = cfg.to_dict()
    for key, value in (tuned or {}).items():
        set_dotted(raw, key, value)
    set_dotted(raw, "train.max_minutes", seconds / 60.0)
    train_cfg = build_config(raw)
    run_dir = Path(train_cfg.train.output_dir)
    _fresh_run_dir(run_dir)
    run_dir, summary = train_from_config(train_cfg)
    if isinstance(summary, dict):
        shown = {k: v for k, v in summary.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}
        print(
            "training summary: "
            + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in shown.items())
        )
    return run_dir


def process_age() -> float | None:
    """Seconds since this process started (Linux ``/proc``; None elsewhere): what a fresh ``speechtrain``
    process takes to import torch and start, which every ladder row pays again."""
    try:
        stat = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - int(stat[19]) / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def demo_estimate(so_far: float, train: float, ladder: float, rows: int, row_floor: float, reserve: float) -> float:
    """Seconds the whole demo takes: the stages done (measured), training (bounded), the ladder (its share of
    the budget, but at least ``row_floor`` per measured row) and the report."""
    return so_far + train + max(ladder, rows * row_floor) + reserve


def _estimate(so_far: float, budget: dict[str, float], cfg: Any, info: Any, tuned: Any, args: Any) -> str:
    """The demo's own estimate of its length on this machine, from what it has measured."""
    from speechtrain.bench.ablate import plan_ladder

    skip = args.skip if args.skip is not None else ([] if info.has_gpu else list(CPU_SKIPS))
    rows = sum(1 for v in plan_ladder(cfg.data, info.device_type, info, skip, tuned) if not v.skip_reason)
    started = process_age()
    floor = max(MEASUREMENT_SECONDS, (started or 0.0) + 3.0)  # a fresh process, then >= 1 s warm-up and window
    ladder = budget["total"] - so_far - budget["train"] - budget["reserve"]
    total = demo_estimate(so_far, budget["train"], ladder, rows, floor, budget["reserve"])
    start = f"a fresh process took {started:.0f}s to start here" if started is not None else "not measured here"
    return (
        f"estimate for this machine: about {total / 60:.0f} min in all ({so_far:.0f}s so far, measured; training "
        f"bounded to {budget['train']:.0f}s; the ladder {rows} rows, at least {floor:.0f}s each: {start})"
    )


#: what one ladder measurement costs at least on 2 idle CPU cores: a fresh process, the model and the data
#: (~5-6 s), warm-up and a window of a few steps (measured: 39 measurements took 300 s in the demo)
MEASUREMENT_SECONDS = 8.0


def passes_that_fit(measured_rows: int, seconds: float, repeat: int) -> int:
    """Interleaved passes over ``measured_rows`` rows that ``seconds`` hold at ~MEASUREMENT_SECONDS per
    measurement: ``repeat`` at most, 1 at least."""
    return max(1, min(repeat, int(seconds // (max(1, measured_rows) * MEASUREMENT_SECONDS))))


class Pacer:
    """Shares what is left of the ladder's time among the measurements still to run (every measured
    row, ``repeat`` passes): each timed window gets (time left / measurements left) minus the
    start-up cost seen so far (a fresh process, the model, the data: ~5 s per row on 2 idle cores)."""

    def __init__(self, rows: list[Any], seconds: float, repeat: int = 1, overhead: float = 5.0) -> None:
        self.total = sum(1 for v in rows if not v.skip_reason) * max(1, repeat)
        self.deadline = time.perf_counter() + seconds
        self.overhead = overhead
        self.limits: list[float] = []
        self._started: float | None = None
        self._costs: list[float] = []

    def row_started(self) -> None:
        now = time.perf_counter()
        if self._started is not None and self.limits:
            self._costs.append(max(0.0, now - self._started - self.limits[-1]))
        self._started = now

    def limit(self, i: int) -> float:
        left = max(0.0, self.deadline - time.perf_counter())
        measurements_left = max(1, self.total - len(self.limits))
        overhead = sum(self._costs) / len(self._costs) if self._costs else self.overhead
        self.limits.append(max(1.0, left / measurements_left - overhead))
        return self.limits[-1]

    def summary(self) -> str:
        return f"{min(self.limits):.0f}-{max(self.limits):.0f}s" if self.limits else "-"

    @property
    def costs(self) -> list[float]:
        """Seconds each measurement took beyond its timed window (a fresh process, the model, the data)."""
        return list(self._costs)


#: a ladder that ends within this share of its announced time (plus OVERRUN_SLACK seconds) kept to it
OVERRUN_SHARE, OVERRUN_SLACK = 0.1, 5.0


def overrun_note(took: float, announced: float, costs: list[float], measurements: int) -> str | None:
    """What the demo says when its ladder ran past the time it announced, and why: the measurements' cost beyond
    their timed windows (each a fresh process, the model and the data), which no window can shrink; None when it kept
    to its time. (It once announced 63 s left and ran 7 minutes, without a word.)"""
    if took <= announced * (1 + OVERRUN_SHARE) + OVERRUN_SLACK:
        return None
    overhead = sum(costs) / len(costs) if costs else None
    why = (
        f"its {measurements} measurements cost {overhead:.0f}s each beyond their timed windows (a fresh process, "
        f"the model and the data), {measurements * overhead:.0f}s in all"
        if overhead is not None
        else f"its {measurements} measurements' start-up was not measured"
    )
    return (
        f"the ladder ran {took:.0f}s, {took - announced:.0f}s past the {announced:.0f}s it announced: {why}; give the "
        "demo more --minutes, or skip rungs with --skip"
    )


def _ladder(cfg: Any, tuned: dict[str, Any] | None, args: argparse.Namespace, info: Any, seconds: float) -> dict:
    from tqdm import tqdm

    from speechtrain.bench.ablate import plan_ladder
    from speechtrain.recipes.bench import run_bench

    skip = args.skip if args.skip is not None else ([] if info.has_gpu else list(CPU_SKIPS))
    rows = plan_ladder(cfg.data, info.device_type, info, skip, tuned)
    repeat = passes_that_fit(sum(1 for v in rows if not v.skip_reason), seconds, cfg.bench.repeat)
    pacer = Pacer(rows, seconds, repeat)
    bar = tqdm(total=pacer.total, desc="ladder", unit="run", file=sys.stdout)

    def on_row(i: int, n: int, label: str) -> None:
        pacer.row_started()
        bar.n = len(pacer.limits)
        bar.set_postfix_str(label[:40])
        bar.refresh()

    command = "speechtrain " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    started = time.perf_counter()
    report = run_bench(
        cfg,
        steps=1000,  # the same method as `bench`, the window set by the time left: min_seconds 0, time_limit
        min_seconds=0.0,
        warmup=3 if info.has_gpu else 1,  # GPU: cuDNN autotune and compile settle in the first steps
        repeat=repeat,
        ablate=True,
        skip=skip,
        time_limit=pacer.limit,
        tuned=tuned,
        command=command.strip() or "speechtrain demo",
        on_row=on_row,
    )
    pacer.row_started()
    bar.n = pacer.total
    bar.refresh()
    bar.close()
    overran = overrun_note(time.perf_counter() - started, seconds, pacer.costs, len(pacer.limits))
    if overran:
        print(overran)
        report["notes"].append(overran)
    fewer = f" (of bench.repeat={cfg.bench.repeat}: no more fit in {seconds:.0f}s)" if repeat < cfg.bench.repeat else ""
    report["notes"].append(
        f"demo: each measurement timed for {pacer.summary()}, {repeat} passes{fewer} (bounded demo; run "
        "`speechtrain bench --ablate` for longer windows)"
    )
    return report
