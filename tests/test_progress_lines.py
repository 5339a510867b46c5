"""A word on every long wait (issue 40): ``tune`` (per stage, per bucket, the time left), ``export`` (load,
trace, check), ``rtf`` (load, each timed call) and ``prepare`` (each stage, and the files and utterances done
with the time left every few seconds) say what they are doing as each stage begins, on standard error,
before the first slow stage and not only at the end. Checked by the lines' presence and order (never by how
long anything took); the time left by a fake clock, the count lines with their interval set to 0."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

import speechtrain.progress
from speechtrain.config import load_config
from speechtrain.memory.oom import INJECT_ENV
from speechtrain.progress import Progress, Tally, clock

ROOT = Path(__file__).resolve().parents[1]


def _lines(err: str, prefix: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(prefix)]


def _order(lines: list[str], *marks: str) -> list[int]:
    """The index of the first line holding each mark (every mark present)."""
    found = []
    for mark in marks:
        hits = [i for i, line in enumerate(lines) if mark in line]
        assert hits, f"no line with {mark!r} in:\n" + "\n".join(lines)
        found.append(hits[0])
    return found


def test_rounds_say_how_far_and_the_time_left(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    progress = Progress("tune", now=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="speechtrain"):
        progress.stage("building the model")
        now[0] += 5
        progress.round(1, 3, "bucket 2")
        now[0] += 20
        progress.round(2, 3, "bucket 1")
        now[0] += 40
        progress.round(3, 3, "bucket 0")
    assert [r.getMessage() for r in caplog.records] == [
        "tune: building the model (0:00 so far)",
        "tune: bucket 2, 1 of 3 (0:05 so far)",
        "tune: bucket 1, 2 of 3 (0:25 so far, about 0:40 left)",  # 20 s a bucket, 2 to go (this one too)
        "tune: bucket 0, 3 of 3 (1:05 so far, about 0:30 left)",  # (20 + 40) / 2 s a bucket, 1 to go
    ]
    assert clock(3725) == "1:02:05"


def test_counts_come_every_few_seconds_with_the_time_left(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    progress = Progress("prepare", now=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="speechtrain"):
        progress.stage("checking the audio of 800 listed item(s)")
        tally = Tally(progress, 800, "files checked")
        for _ in range(800):
            now[0] += 0.0625  # 16 files a second: 50 s in all
            tally.update()
        progress.stage("text front end")
        quick = Tally(progress, 3, "transcripts")
        for _ in range(3):
            now[0] += 0.5
            quick.update()
        Tally(None, 3, "silent").update()
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "prepare: checking the audio of 800 listed item(s) (0:00 so far)"
    assert lines[1] == "prepare: 48 of 800 files checked (0:03 so far, about 0:47 left)"  # the first after 3 s
    assert lines[2] == "prepare: 96 of 800 files checked (0:06 so far, about 0:44 left)"
    assert len(lines) == 1 + 16 + 1 + 1  # a line every 3 s (48 files), the last one, then the next stage only
    assert lines[-3] == "prepare: 768 of 800 files checked (0:48 so far, about 0:02 left)"
    assert lines[-2] == "prepare: 800 of 800 files checked (0:50 so far)"
    assert lines[-1] == "prepare: text front end (0:50 so far)"  # 1.5 s of transcripts: no count line


def test_the_ladder_says_row_pass_time_left_and_each_rows_figures(caplog: pytest.LogCaptureFixture) -> None:
    from speechtrain.bench.ablate import Variant, run_ladder
    from speechtrain.bench.measure import RunFailed, RunResult, RunSpec

    now = [0.0]

    def execute(spec: RunSpec) -> RunResult:
        now[0] += 10  # every measurement takes 10 s
        if spec.name == "b":
            raise RunFailed("out of memory")
        return RunResult(spec.name, 10, 2.0, 20, 50.0, 0, 0, 0.0, None)

    variants = [Variant(k, f"row {k}") for k in "abcd"]
    variants[3].skip_reason = "skipped (--skip d)"
    specs = [RunSpec(name=v.key, raw={}) for v in variants]
    progress = Progress("bench", now=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="speechtrain"):
        run_ladder(variants, specs, repeat=2, isolate=False, execute=execute, progress=progress)
    figures = "took 0:10: 25.0 audio-s/s, 5.00 steps/s"
    assert [r.getMessage() for r in caplog.records] == [
        "bench: row 1 of 3 (pass 1 of 2): row a (0:00 so far)",
        f"bench: row 1 of 3 (pass 1 of 2) {figures}",
        "bench: row 2 of 3 (pass 1 of 2): row b (0:10 so far, about 0:50 left)",  # 10 s a row, 5 to go
        "bench: row 2 of 3 (pass 1 of 2) took 0:10: failed: out of memory",
        "bench: row 3 of 3 (pass 1 of 2): row c (0:20 so far, about 0:30 left)",  # b is not measured again
        f"bench: row 3 of 3 (pass 1 of 2) {figures}",
        "bench: row 1 of 2 (pass 2 of 2): row c (0:30 so far, about 0:20 left)",  # the pass rotated by a row
        f"bench: row 1 of 2 (pass 2 of 2) {figures}",
        "bench: row 2 of 2 (pass 2 of 2): row a (0:40 so far, about 0:10 left)",
        f"bench: row 2 of 2 (pass 2 of 2) {figures}",
    ]


def test_bench_ablate_says_each_row_as_it_starts_and_ends(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from speechtrain.bench.ablate import plan_ladder
    from speechtrain.cli.main import main
    from tests.test_bench_measure import TINY

    keys = [v.key for v in plan_ladder(load_config(None, TINY).data, "cpu", None)]
    skips = [a for key in keys if key not in ("baseline", "all") for a in ("--skip", key)]
    args = ["bench", "--ablate", "--in-process", "--steps", "2", "--warmup", "1", "--min-seconds", "0"]
    args += ["--repeat", "2", "--fake-data", "8", "--json", str(tmp_path / "b.json"), *skips, *TINY]
    assert main(args) == 0
    out = capsys.readouterr()
    json.loads((tmp_path / "b.json").read_text())  # the report stays JSON
    err = out.err.splitlines()
    assert err[0].startswith("bench: probing the device")  # before the probe's matmul timing and the first row
    lines = _lines(out.err, "bench: row ")
    starts = [line for line in lines if "took" not in line]
    assert [line.split(":")[1].strip() for line in starts] == [
        f"row {k} of 2 (pass {p} of 2)" for p, k in ((1, 1), (1, 2), (2, 1), (2, 2))
    ]
    assert all("left)" in line for line in starts[1:])  # the time left once a row has been measured
    ends = [line for line in lines if " took " in line]
    assert len(ends) == 4 and all("audio-s/s" in line for line in ends)
    assert lines.index(ends[0]) == lines.index(starts[0]) + 1  # the row's figures as it ends


def _prepare_lines(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[list[str], list[str]]:
    from speechtrain.cli.main import main

    assert main(argv) == 0
    err = capsys.readouterr().err.splitlines()
    if "--config" not in argv:  # first, which recipe's data settings it prepares with (issue 50)
        assert err[0].startswith("prepare: no --config: preparing with the data settings of")
        err = err[1:]
    return err, _lines("\n".join(err), "prepare: ")


def test_prepare_says_each_stage_and_how_far_it_is(
    tmp_path: Path, demo_corpus: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(speechtrain.progress, "EVERY", 0.0)  # a count line per item, whatever the clock says
    cache = f"data.cache_dir={tmp_path / 'cache'}"
    n = len((demo_corpus / "metadata.csv").read_text().splitlines())
    err, lines = _prepare_lines(["prepare", str(demo_corpus), "--workers", "2", cache], capsys)
    assert err[0].startswith(f"prepare: reading {demo_corpus} as data.format=ljspeech")  # before any file is read
    marks = [f"checking the audio of {n} listed item(s)", f"1 of {n} files checked", f"{n} of {n} files checked"]
    marks += ["text front end", "computing features of", f"1 of {n} utterances computed"]
    marks += [f"{n} of {n} utterances computed"]
    stages = _order(lines, *marks)
    assert stages == sorted(stages)
    checked = [line for line in lines if "files checked" in line]
    assert len(checked) == n and all("left)" in line for line in checked[:-1])  # each with the time left
    assert len([line for line in lines if "utterances computed" in line]) == n

    err, lines = _prepare_lines(["prepare", str(demo_corpus), "--no-progress", cache], capsys)  # fresh cache
    assert lines and lines[0].startswith("prepare: reading")
    assert not any(" of " in line and ("checked" in line or "computed" in line) for line in lines)
    assert not any("computing features" in line for line in lines)


@pytest.mark.slow
def test_tune_says_each_stage_and_bucket_before_its_trials(
    tmp_path: Path, demo_corpus: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from speechtrain.cli.main import main
    from tests.test_memory_tune import _demo_tune_config

    monkeypatch.setenv(INJECT_ENV, "3000")
    cfg_path = _demo_tune_config(tmp_path, demo_corpus, "toy")
    assert main(["tune", "--config", str(cfg_path), "--out", str(tmp_path / "tuned.yaml")]) == 0
    err = capsys.readouterr().err.splitlines()
    lines = _lines("\n".join(err), "tune: ")
    stages = _order(lines, "building the model", "feature cache", "estimating", "building the trainer", "1 of 2")
    assert stages == sorted(stages)
    assert any("2 of 2" in line and "left)" in line for line in lines)  # the time left, once a bucket is done
    first_trial = next(i for i, line in enumerate(err) if line.startswith("  bucket"))
    assert err.index(next(line for line in err if "1 of 2" in line)) < first_trial
    assert err[0].startswith("tune: building the model")  # before the model, the data and the estimate


@pytest.mark.slow
def test_export_and_rtf_say_each_stage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from speechtrain.cli.main import main
    from speechtrain.recipes.train import train_from_config

    corpus = tmp_path / "corpus"
    assert main(["make-dataset", str(corpus), "-n", "8"]) == 0
    cfg = load_config(
        ROOT / "recipes" / "vocoder_hifigan_tiny.yaml",
        [
            f"data.manifest={corpus}",
            f"data.cache_dir={tmp_path / 'cache'}",
            f"train.output_dir={tmp_path / 'run'}",
            "train.max_steps=1",
            "train.eval_every=1",
            "train.save_every=1",
            "train.progress=false",
            "train.eval_audio_samples=0",
        ],
    )
    run_dir, _ = train_from_config(cfg)
    capsys.readouterr()
    assert main(["export", str(run_dir), str(tmp_path / "onnx")]) == 0
    err = capsys.readouterr().err.splitlines()
    lines = _lines("\n".join(err), "export: ")
    assert _order(lines, "loading", "tracing and writing the onnx files", "onnx checked") == [0, 1, 2]
    assert err[0].startswith("export: loading")  # the first line, before the checkpoint is read

    assert main(["rtf", str(run_dir), "--items", "2", "--warmup", "1", "--json", str(tmp_path / "rtf.json")]) == 0
    err = capsys.readouterr().err.splitlines()
    lines = _lines("\n".join(err), "rtf: ")
    timed = len(json.loads((tmp_path / "rtf.json").read_text())["items"])
    assert _order(lines, "loading", "1 untimed warm-up", "timing vocode of mel") == [0, 1, 2]
    assert [line.split(", ")[-1].split(" (")[0] for line in lines[2:]] == [
        f"{k} of {timed}" for k in range(1, timed + 1)
    ]
    assert err[0].startswith("rtf: loading")
