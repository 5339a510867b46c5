"""speechtrain demo [--minutes M] [--out DIR]: the whole tour on the built-in demo corpus.

Makes the demo corpus when missing (data/demo), prepares it, probes the hardware, tunes the
per-bucket batch sizes, trains a tiny recipe for a bounded time, runs the ablation ladder, and
writes a report folder (markdown, JSON, PNG, the run directory). Training and the ladder share the
``--minutes`` budget; what the other stages take depends on the machine, so once they have run the demo
prints its own estimate of the whole, from what it measured here, and a revised one whenever what it measures
during training and the ladder moves it (``demo_pace``).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from speechtrain.cli.demo_pace import (
    MEASUREMENT_SECONDS,
    DemoPlan,
    Estimator,
    Pacer,
    Revisions,
    TrainPace,
    TrainWatch,
    overrun_note,
    passes_that_fit,
)

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
    startup = startup_seconds()  # first: the recipes' modules import torch
    from speechtrain.recipes.common import find_recipe

    find_recipe(args.recipe)  # a bad name fails before any work
    stages = Stages()
    budget = _budget(args)
    out, data = Path(args.out), Path(args.data)
    out.mkdir(parents=True, exist_ok=True)

    stages.header("demo corpus")
    _corpus(data, args.utterances)

    cfg = _demo_config(args, data, out)
    stages.header("prepare")
    _prepare(cfg)

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

    plan = _plan(budget, cfg, info, tuned, args, startup)
    revisions = Revisions()
    print(revisions.offer(*_first_estimate(plan, stages.elapsed(), budget["train"], startup)), flush=True)
    stages.header("train", f"(bounded to {budget['train']:.0f}s)")
    run_dir = _train(cfg, tuned, out, budget["train"], Estimator(plan, revisions, stages.elapsed))
    revised = revisions.offer(plan.total(stages.elapsed(), 0.0), "training done, its time measured")
    if revised:
        print(revised, flush=True)

    left = budget["total"] - stages.elapsed() - budget["reserve"]
    seconds = plan.ladder_seconds(stages.elapsed())
    more = "" if seconds <= left + 1 else f": the budget left {max(left, 0):.0f}s, its {plan.rows} rows need more here"
    stages.header("ablation ladder", f"({seconds:.0f}s{more})")
    report = _ladder(cfg, tuned, args, info, seconds, Estimator(plan, revisions, stages.elapsed))

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


def _prepare(cfg: Any) -> None:
    """The feature cache, prepared when missing or stale: ``ensure_prepared`` says what it prepared (its summary was
    printed a second time here)."""
    from speechtrain.recipes import build_task
    from speechtrain.recipes.data import DataRecipe

    if DataRecipe(cfg).ensure_prepared(require_text=build_task(cfg).needs().text) is None:
        print("feature cache is up to date")


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


def _train(cfg: Any, tuned: dict[str, Any] | None, out: Path, seconds: float, estimator: Estimator) -> Path:
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
    pace = TrainPace(seconds, started=time.time())
    with TrainWatch(run_dir, lambda record: estimator.training(pace, record)):  # the estimate, from its steps
        run_dir, summary = train_from_config(train_cfg)
    if isinstance(summary, dict):
        shown = {k: v for k, v in summary.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}
        print(
            "training summary: "
            + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in shown.items())
        )
    return run_dir


def startup_seconds() -> float | None:
    """What a fresh ``speechtrain`` process pays before its first step, which every ladder row pays again: importing
    torch and the bench's modules, timed here as the demo starts (None when this process had imported them already).
    Not the process's age: read after the tuner it is the demo's elapsed time (a row priced at 4 minutes, "about
    62 min in all" for a demo of 10), and under ``scripts/run.sh`` (``exec``) it includes the install."""
    if "torch" in sys.modules:
        return None
    t0 = time.perf_counter()
    import torch  # noqa: F401 - timed: the demo imports both anyway

    import speechtrain.recipes.bench  # noqa: F401

    return time.perf_counter() - t0


def _plan(budget: dict[str, float], cfg: Any, info: Any, tuned: Any, args: Any, startup: float | None) -> DemoPlan:
    from speechtrain.bench.ablate import plan_ladder

    skip = args.skip if args.skip is not None else ([] if info.has_gpu else list(CPU_SKIPS))
    rows = sum(1 for v in plan_ladder(cfg.data, info.device_type, info, skip, tuned) if not v.skip_reason)
    floor = max(MEASUREMENT_SECONDS, (startup or 0.0) + 3.0)  # a fresh process, then >= 1 s warm-up and window
    return DemoPlan(budget["total"], budget["reserve"], rows, floor)


def _first_estimate(plan: DemoPlan, so_far: float, train: float, startup: float | None) -> tuple[float, str]:
    start = f"a fresh process's imports take {startup:.0f}s here" if startup is not None else "start-up not measured"
    why = (
        f"{so_far:.0f}s so far, measured; training bounded to {train:.0f}s; the ladder {plan.rows} rows, at least "
        f"{plan.floor:.0f}s each: {start}; revised as training and the ladder go"
    )
    return plan.total(so_far, train), why


def _ladder(
    cfg: Any, tuned: dict[str, Any] | None, args: argparse.Namespace, info: Any, seconds: float, estimator: Estimator
) -> dict:
    from tqdm import tqdm

    from speechtrain.bench.ablate import plan_ladder
    from speechtrain.recipes.bench import run_bench

    skip = args.skip if args.skip is not None else ([] if info.has_gpu else list(CPU_SKIPS))
    rows = plan_ladder(cfg.data, info.device_type, info, skip, tuned)
    repeat = passes_that_fit(sum(1 for v in rows if not v.skip_reason), seconds, cfg.bench.repeat)
    pacer = Pacer(rows, seconds, repeat)
    bar = tqdm(total=pacer.total, desc="ladder", unit="run", file=sys.stdout)

    overruns: list[str] = []

    def measured(label: str = "") -> None:
        """A measurement ends (the next one starts: ``label``): its overrun, if any, and the estimate revised."""
        note = pacer.row_started(label)
        if note is not None:
            estimator.say(note)
            overruns.append(note)
        if len(pacer.measurements) > 1 or not label:
            estimator.ladder(pacer)

    def on_row(i: int, n: int, label: str) -> None:
        measured(label)
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
    measured()
    bar.n = pacer.total
    bar.refresh()
    bar.close()
    report["notes"].extend(overruns)
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
