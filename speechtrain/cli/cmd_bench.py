"""speechtrain bench --config CFG [--steps N] [--warmup N] [--ablate] [--json OUT] [--markdown OUT] [--plot PNG]
speechtrain bench --peers [ARGS of bench/peers/run.py]"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from speechtrain.cli.common import add_config_args, user_file, write_user_file

if TYPE_CHECKING:
    from speechtrain.progress import Progress


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "bench",
        help="measure speechtrain against a plain PyTorch loop (audio-s/s, memory, padding, data wait, MFU)",
        description="Measure the plain-PyTorch baseline and speechtrain on the same model and data in one run. "
        "With --ablate: every change alone on top of the baseline, then all recommended settings.",
    )
    add_config_args(p)
    p.add_argument("--steps", type=int, default=None, help="timed steps per measurement, at least (bench.steps)")
    p.add_argument(
        "--min-seconds", type=float, default=None, help="timed seconds per measurement, at least (bench.min_seconds)"
    )
    p.add_argument("--warmup", type=int, default=None, help="untimed warm-up steps (default: bench.warmup)")
    p.add_argument("--ablate", action="store_true", help="run the whole ladder of changes")
    p.add_argument("--skip", action="append", default=[], metavar="RUNG", help="leave a rung out (e.g. compile)")
    p.add_argument("--tune", action="store_true", help="run the batch-size tuner first (for the tuned-batch rung)")
    p.add_argument("--fake-data", type=int, default=None, metavar="N", help="N synthetic utterances, no manifest")
    p.add_argument("--time-limit", type=float, default=None, metavar="S", help="cap each configuration's timing")
    p.add_argument(
        "--row-timeout",
        type=float,
        default=None,
        metavar="S",
        help="kill a row whose process runs longer than S seconds in all (start, warm-up, compilation): it is "
        "marked 'timed out' and the next row runs (bench.row_timeout)",
    )
    p.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="after the passes, one more run per row under torch.profiler: its top N host and device operators, "
        "the device's idle share of the step and the launches per step, in the JSON and the markdown",
    )
    p.add_argument(
        "--logs", default=None, metavar="DIR", help="keep each row's output in DIR/<row>.log (default: beside --json)"
    )
    p.add_argument(
        "--repeat", type=int, default=None, help="passes over the rows, interleaved; median and range (bench.repeat)"
    )
    p.add_argument("--threads", type=_threads, default=None, help="torch threads per row, or auto (bench.threads)")
    p.add_argument(
        "--max-spread",
        type=float,
        default=None,
        help="widest range of a ratio's passes, as a fraction, still called a speed-up (bench.max_spread)",
    )
    p.add_argument(
        "--nproc",
        type=int,
        default=None,
        metavar="N",
        help="measure scaling instead: training in 1..N processes (torchrun, DDP; one GPU each), "
        "audio-s/s, scaling efficiency and the gradient sync share of the step",
    )
    p.add_argument(
        "--peers",
        nargs=argparse.REMAINDER,
        default=None,
        metavar="ARGS",
        help="compare with the trainers users would pick instead (Coqui's XTTS trainer, Piper's VITS trainer, "
        "SingingVocoders' NSF task) on the same corpus and model: runs bench/peers/run.py of this checkout with ARGS "
        "(--install, --peer xtts|vits|nsf|hifigan, --repeat, --steps, --json, --markdown, --plot, ...; see its --help)",
    )
    p.add_argument(
        "--quality",
        type=float,
        default=None,
        metavar="TARGET",
        help="time-to-quality instead: train each configuration for equal audio (--quality-audio), --repeat seeds "
        "each, and report the quality metric after equal audio and the wall time to TARGET (docs/bench.md)",
    )
    p.add_argument(
        "--quality-audio",
        type=float,
        default=None,
        metavar="S",
        help="--quality: seconds of audio each (default 60); with --ablate: the ladder gains a 'quality after equal "
        "audio' column, every Trainer rung trained for S seconds of audio with --repeat seeds after the passes",
    )
    p.add_argument("--quality-metric", default=None, help="--quality: the metric (default: train.best_metric's)")
    p.add_argument(
        "--quality-variant",
        action="append",
        default=None,
        metavar="NAME:K=V,...",
        help="--quality: a configuration compared (repeatable; default fp32 and bf16; the first is the reference); "
        "fp32 or autopilot alone: the ablation ladder's 'speechtrain, all off' or 'all' rung (autopilot alone is "
        "compared against fp32)",
    )
    p.add_argument("--quality-out", default="runs/quality_bench", help="--quality: where the runs go")
    p.add_argument(
        "--time-to",
        default=None,
        metavar="TARGET",
        help="time to quality instead: train the configuration (--repeat seeds, each at most --time-minutes) until "
        "every goal of TARGET holds at an evaluation, e.g. pesq>=3.0,stoi>=0.9 or mcd_dtw<=8 or cer<=0.1 (any "
        "eval-row metric by name); writes the curves (--plot PNG; JSON in --quality-out) and the time to target "
        "per seed (docs/bench.md)",
    )
    p.add_argument("--time-minutes", type=float, default=10.0, help="--time-to: the wall-time limit per seed")
    p.add_argument(
        "--time-to-runs",
        nargs="+",
        default=None,
        metavar="[NAME=]RUN_DIR",
        help="--time-to: read these finished (or running) runs' evaluations instead of training; NAME= labels a "
        "run in the curves and the table (e.g. autopilot=runs/a their_settings=runs/b)",
    )
    p.add_argument("--in-process", action="store_true", help="no fresh process per configuration (faster start)")
    p.add_argument("--json", default=None, metavar="OUT", help="write the report as JSON")
    p.add_argument("--markdown", default=None, metavar="OUT", help="write the report as markdown")
    p.add_argument("--plot", default=None, metavar="OUT.png", help="write a chart (needs matplotlib)")
    return p


def _threads(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of threads or auto") from None


def _validate(args: argparse.Namespace) -> None:
    from speechtrain.errors import UserError
    from speechtrain.train.distributed import env_world_size

    if env_world_size() > 1:
        raise UserError(
            "speechtrain bench starts its own processes: run it once, without torchrun; "
            "`speechtrain bench --nproc N` measures training in 1..N processes"
        )

    if args.steps is not None and args.steps < 1:
        raise UserError(f"--steps must be >= 1, got {args.steps}")
    if args.warmup is not None and args.warmup < 0:
        raise UserError(f"--warmup must be >= 0, got {args.warmup}")
    if args.repeat is not None and args.repeat < 1:
        raise UserError(f"--repeat must be >= 1, got {args.repeat}")
    if args.min_seconds is not None and args.min_seconds < 0:
        raise UserError(f"--min-seconds must be >= 0, got {args.min_seconds}")
    if isinstance(args.threads, int) and args.threads < 1:
        raise UserError(f"--threads must be >= 1 or auto, got {args.threads}")
    if args.row_timeout is not None and args.row_timeout <= 0:
        raise UserError(f"--row-timeout must be > 0 seconds, got {args.row_timeout}")
    if args.profile < 0:
        raise UserError(f"--profile must be >= 0 operators, got {args.profile}")
    if args.max_spread is not None and args.max_spread <= 0:
        raise UserError(f"--max-spread must be > 0, got {args.max_spread}")
    if args.quality_audio is not None and args.quality_audio <= 0:
        raise UserError(f"--quality-audio must be > 0 seconds, got {args.quality_audio}")
    if args.quality_audio is not None and args.quality is None and not args.ablate:
        raise UserError("--quality-audio without --quality gives the ablation ladder its quality column: add --ablate")
    if args.fake_data is not None and args.fake_data < 2:
        raise UserError(f"--fake-data needs at least 2 utterances, got {args.fake_data}")
    if args.plot and not args.plot.lower().endswith(".png"):
        raise UserError(f"--plot {args.plot}: give a .png path")
    if args.nproc is not None:
        if args.nproc < 2:
            raise UserError(f"--nproc must be at least 2 (it measures 1..N processes), got {args.nproc}")
        clash = [
            flag
            for flag, on in (
                ("--ablate", args.ablate),
                ("--tune", args.tune),
                ("--plot", args.plot),
                ("--in-process", args.in_process),
                ("--time-limit", args.time_limit is not None),
                ("--row-timeout", args.row_timeout is not None),
                ("--profile", args.profile > 0),
                ("--quality-audio", args.quality_audio is not None),
            )
            if on
        ]
        if clash:
            raise UserError(f"--nproc measures scaling alone: leave out {', '.join(clash)}")


def tune_overrides(cfg: Any) -> dict[str, Any]:
    """Run the batch-size tuner on ``cfg``; its per-bucket sizes as overrides for the ladder."""
    from speechtrain.bench.ablate import tuned_overrides
    from speechtrain.recipes.tune import TuneRecipe

    report = TuneRecipe(cfg).run()
    print(report.table())
    return tuned_overrides(report.config.data, cfg.data)


def peers_script() -> Path:
    """``bench/peers/run.py`` of the checkout this package runs from (the peers' runners are no part of the
    installed package: they train other projects' code in an environment of their own)."""
    return Path(__file__).resolve().parents[2] / "bench" / "peers" / "run.py"


def run_peers(argv: list[str]) -> int:
    """``speechtrain bench --peers ARGS``: ``python bench/peers/run.py ARGS`` of this checkout."""
    import subprocess

    from speechtrain.errors import UserError

    script = peers_script()
    if not script.is_file():
        raise UserError(
            f"--peers runs bench/peers/run.py of a source checkout, and there is none beside this package "
            f"({script.parent.parent.parent}): run it from a clone of the repository"
        )
    return subprocess.run([sys.executable, str(script), *argv]).returncode


def log_folder(args: argparse.Namespace) -> Path | None:
    """Where the rows' logs go: ``--logs``, else beside ``--json`` (or ``--markdown``): ``OUT.logs/``."""
    if args.logs:
        return Path(args.logs)
    out = args.json or args.markdown
    return Path(out).with_suffix(".logs") if out else None


def run(args: argparse.Namespace) -> int:
    from speechtrain.bench.report import (
        diagnosis_text,
        markdown_table,
        row_line,
        write_json,
        write_markdown,
        write_plot,
    )
    from speechtrain.cli.common import config_from_args
    from speechtrain.progress import Progress
    from speechtrain.recipes.bench import run_bench

    if args.peers is not None:
        return run_peers(list(args.peers))
    _validate(args)
    for flag in ("json", "markdown", "plot"):  # before the measurement: a folder, under a file, a run's own file
        if getattr(args, flag, None):
            user_file(getattr(args, flag), f"--{flag}")
    say = Progress("bench")  # "row k of n (pass p of P): NAME" and the time left as each row starts, its figures after
    cfg = config_from_args(args, needs_model=True)
    command = "speechtrain " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    if args.nproc is not None:
        return _scaling(cfg, args, command, say)
    if args.quality is not None:
        return _quality(cfg, args)
    if args.time_to is not None:
        return _time_to(cfg, args)
    tuned = tune_overrides(cfg) if args.tune else None

    def on_report(partial: dict[str, Any], key: str) -> None:
        # the row's figures now, and the files rewritten (atomically): a killed ladder keeps every finished row
        print(row_line(partial, key), flush=True)
        if args.json:
            write_json(partial, args.json)
        if args.markdown:
            write_markdown(partial, args.markdown)

    report = run_bench(
        cfg,
        steps=args.steps,
        warmup=args.warmup,
        min_seconds=args.min_seconds,
        max_spread=args.max_spread,
        ablate=args.ablate,
        skip=args.skip,
        isolate=not args.in_process,
        fake_data=args.fake_data,
        time_limit=args.time_limit,
        tuned=tuned,
        repeat=args.repeat,
        threads=args.threads,
        command=command,
        progress=say,
        row_timeout=args.row_timeout,
        log_dir=log_folder(args),
        on_report=on_report,
        profile=args.profile,
        quality=_ladder_quality(cfg, args),
    )
    print()
    print(markdown_table(report))
    if report.get("headline"):
        print(f"headline: {report['headline']['text']}")
    print(diagnosis_text(report))
    if args.json:
        print(f"wrote {write_json(report, args.json)}")
    if args.markdown:
        print(f"wrote {write_markdown(report, args.markdown)}")
    if args.plot:
        print(f"wrote {write_plot(report, args.plot)}")
    return 0


def _scaling(cfg: Any, args: argparse.Namespace, command: str, say: Progress) -> int:
    """``--nproc N``: the scaling table."""
    from speechtrain.bench.report import write_json
    from speechtrain.bench.scaling import scaling_markdown, scaling_report_markdown
    from speechtrain.recipes.bench import run_scaling

    report = run_scaling(
        cfg,
        args.nproc,
        steps=args.steps,
        warmup=args.warmup,
        repeat=args.repeat,
        threads=args.threads,
        fake_data=args.fake_data,
        command=command,
        progress=say,
    )
    print()
    print(scaling_markdown(report))
    for note in report["notes"]:
        print(f"- {note}")
    if args.json:
        print(f"wrote {write_json(report, args.json)}")
    if args.markdown:
        print(f"wrote {write_user_file(args.markdown, scaling_report_markdown(report), '--markdown')}")
    failed = [line for line in report["scaling"] if line.get("audio_seconds_per_second") is None]
    return 1 if failed else 0


def _ladder_quality(cfg: Any, args: argparse.Namespace) -> Any:
    """``--ablate --quality-audio S``: the plan of the ladder's quality column (None without the flag)."""
    if args.quality_audio is None:
        return None
    from speechtrain.recipes.quality_bench import LadderQualityPlan

    return LadderQualityPlan(args.quality_audio, args.repeat or cfg.bench.repeat, args.quality_metric, args.quality_out)


def _quality(cfg: Any, args: argparse.Namespace) -> int:
    """``bench --quality TARGET``: time-to-quality (:mod:`speechtrain.recipes.quality_bench`)."""
    import json

    from speechtrain.recipes.quality_bench import run_quality_bench

    report = run_quality_bench(
        cfg,
        args.quality,
        audio_seconds=60.0 if args.quality_audio is None else args.quality_audio,
        repeat=args.repeat or 3,
        variants=args.quality_variant,
        metric=args.quality_metric,
        out_dir=args.quality_out,
    )
    text = report.markdown()
    print(text)
    if args.json:
        print(f"wrote {write_user_file(args.json, json.dumps(report.to_dict(), indent=2) + chr(10))}")
    if args.markdown:
        print(f"wrote {write_user_file(args.markdown, text + chr(10), '--markdown')}")
    return 0


def _time_to(cfg: Any, args: argparse.Namespace) -> int:
    """``bench --time-to TARGET``: time to quality (:mod:`speechtrain.recipes.time_to`)."""
    import json

    from speechtrain.recipes.time_to import (
        TimeToReport,
        machine_load,
        parse_goals,
        read_runs,
        run_time_to,
        write_curves,
    )

    goals = parse_goals(args.time_to)
    if args.time_to_runs:
        runs = read_runs(args.time_to_runs, goals)
        # the load now, when the runs are read: not the load they trained under (the title says so)
        machine = {**machine_load(), "when": "read"}
        report = TimeToReport(Path(cfg.train.output_dir).name, goals, args.time_minutes, runs, machine)
        if args.plot:
            write_curves(report, args.plot)
    else:
        report = run_time_to(cfg, goals, args.time_minutes, args.repeat or 1, args.quality_out, args.plot)
    print(report.markdown())
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_dict(), indent=2) + "\n")
        print(f"wrote {args.json}")
    if args.markdown:
        Path(args.markdown).write_text(report.markdown() + "\n")
        print(f"wrote {args.markdown}")
    if args.plot:
        print(f"wrote {args.plot}")
    return 0
