"""The CPU ablation figures of docs/benchmarks.md: the ladder for the tiny recipes on the demo corpus.

    python bench/ablate_cpu.py                      # gpt_tts_tiny and classifier_cnn_lstm_tiny
    python bench/ablate_cpu.py --recipes gpt_tts_tiny vocoder_hifigan_tiny --steps 30 --with-compile
    python bench/ablate_cpu.py --recipes vocoder_hifigan_tiny --quality-audio 6   # + quality after equal audio

Makes the demo corpus when missing (data/demo, 200 utterances, labelled), runs
`speechtrain bench --ablate` in-library for each recipe (each configuration in a fresh process),
writes reports/bench_cpu/<recipe>.{json,md,png}, and prints a markdown section per recipe, ready to
paste into docs/benchmarks.md: device, date, command, the table, the all-vs-baseline ratio and the
diagnosis. Run it on a quiet machine: other processes on the cores change every figure (not the quality
column of --quality-audio: every Trainer rung trained for that many seconds of audio, --repeat seeds, its runs in
reports/bench_cpu/<recipe>.quality/). The JSON and markdown are rewritten after every row and every quality run.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

RECIPES = ("gpt_tts_tiny", "classifier_cnn_lstm_tiny")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipes", nargs="+", default=list(RECIPES), help="recipe names in recipes/")
    p.add_argument("--steps", type=int, default=None, help="timed steps per measurement, at least (bench.steps)")
    p.add_argument("--min-seconds", type=float, default=None, help="timed seconds per measurement, at least")
    p.add_argument("--warmup", type=int, default=None, help="untimed warm-up steps per measurement (bench.warmup)")
    p.add_argument("--data", default="data/demo", help="demo corpus folder (made when missing)")
    p.add_argument("--utterances", type=int, default=200, help="utterances when the corpus is made")
    p.add_argument("--out", default="reports/bench_cpu", help="where the JSON/markdown/PNG go")
    p.add_argument("--repeat", type=int, default=None, help="passes over the rows, interleaved (bench.repeat)")
    p.add_argument("--threads", default=None, help="torch threads per row, or auto (bench.threads)")
    p.add_argument("--with-compile", action="store_true", help="include the torch.compile rung (minutes on a CPU)")
    p.add_argument("--tune", action="store_true", help="run the batch-size tuner first (tuned-batch rung)")
    p.add_argument(
        "--quality-audio",
        type=float,
        default=None,
        metavar="S",
        help="a 'quality after equal audio' column: every Trainer rung trained for S s of audio, --repeat seeds",
    )
    p.add_argument("--quality-metric", default=None, help="the quality column's metric (default: the family's)")
    args = p.parse_args(argv)

    from speechtrain.bench.report import row_line, write_json, write_markdown, write_plot
    from speechtrain.config import load_config, read_yaml
    from speechtrain.data.demo import make_demo_corpus
    from speechtrain.recipes.bench import run_bench
    from speechtrain.recipes.common import find_recipe
    from speechtrain.recipes.quality_bench import LadderQualityPlan

    data = Path(args.data)
    if not (data / "metadata.csv").is_file():
        make_demo_corpus(data, utterances=args.utterances, seed=0, labelled=True)
    out = Path(args.out)
    sections = []
    for name in args.recipes:
        path = find_recipe(name)
        manifest = (read_yaml(path).get("data") or {}).get("manifest") or str(data)
        if Path(manifest).parts[:2] == ("data", "demo"):
            manifest = str(data.joinpath(*Path(manifest).parts[2:]))
        cfg = load_config(path, [f"data.manifest={manifest}", "train.progress=false", "train.tensorboard=false"])
        tuned = None
        if args.tune:
            from speechtrain.cli.cmd_bench import tune_overrides

            tuned = tune_overrides(cfg)
        skip = [] if args.with_compile else ["compile"]
        command = f"python bench/ablate_cpu.py {' '.join(shlex.quote(a) for a in (argv or sys.argv[1:]))}".strip()

        def on_row(i: int, n: int, label: str, name: str = name) -> None:
            print(f"[{name} {i + 1}/{n}] {label}", file=sys.stderr, flush=True)

        def on_report(partial: dict, key: str, name: str = name) -> None:
            # every row (and every quality run) on disk as it ends: a killed ladder keeps what it measured
            print(row_line(partial, key), file=sys.stderr, flush=True)
            write_json(partial, out / f"{name}.json")
            write_markdown(partial, out / f"{name}.md", f"CPU ablation: {name}")

        quality = None
        if args.quality_audio is not None:
            repeat = args.repeat or cfg.bench.repeat
            quality = LadderQualityPlan(args.quality_audio, repeat, args.quality_metric, out / f"{name}.quality")

        report = run_bench(
            cfg,
            steps=args.steps,
            warmup=args.warmup,
            min_seconds=args.min_seconds,
            ablate=True,
            skip=skip,
            tuned=tuned,
            repeat=args.repeat,
            threads=None if args.threads in (None, "auto") else int(args.threads),
            command=command,
            on_row=on_row,
            on_report=on_report,
            quality=quality,
        )
        write_json(report, out / f"{name}.json")
        write_markdown(report, out / f"{name}.md", f"CPU ablation: {name}")
        try:
            write_plot(report, out / f"{name}.png")
        except Exception as exc:  # the chart is optional (matplotlib); the figures are not
            print(f"no chart for {name}: {exc}", file=sys.stderr)
        sections.append(section(name, report))
    print("\n".join(sections))
    return 0


def section(name: str, report: dict) -> str:
    """A markdown block for docs/benchmarks.md."""
    from speechtrain.bench.report import diagnosis_text, markdown_table

    dev = report["device"]
    by_key = {r["key"]: r for r in report["runs"]}
    base, all_on = by_key.get("baseline"), by_key.get("all")
    if base and all_on:
        ratio = (
            f"all vs baseline: {all_on['audio_seconds_per_second']:.1f} / {base['audio_seconds_per_second']:.1f} "
            f"audio-s/s = **{all_on['speedup_vs_baseline']:.2f}x**; padding {base['padding_fraction']:.0%} -> "
            f"{all_on['padding_fraction']:.0%}"
        )
        if base.get("audio_seconds_per_cpu_second") and all_on.get("audio_seconds_per_cpu_second"):
            per_cpu = all_on["audio_seconds_per_cpu_second"] / base["audio_seconds_per_cpu_second"]
            ratio += f"; per CPU second: {per_cpu:.2f}x"
        spread = all_on.get("speedup_spread") or {}
        if spread.get("passes", 0) >= 2:
            ratio += f"; passes {spread['low']:.2f}-{spread['high']:.2f}x ({all_on.get('verdict')})"
    else:
        ratio = "all vs baseline: not measured (a row failed; see the table)"
    keep = ("headline inconclusive", "other processes", "quality after equal audio")
    notes = [n for n in report.get("notes", []) if n.startswith(keep) or "' costs quality: " in n]
    return "\n".join(
        [
            f"### {name}",
            "",
            f"- device: {dev.get('name')} ({dev.get('cpu_count')} cores, {dev.get('torch_threads')} torch threads), "
            f"torch {dev.get('torch')}",
            f"- date: {dev.get('date')}",
            f"- command: `{report.get('command')}`",
            f"- {ratio}",
            *[f"- {n}" for n in notes],
            "",
            markdown_table(report),
            "```",
            diagnosis_text(report),
            "```",
            "",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
