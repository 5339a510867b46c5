"""``speechtrain bench --time-to``: goals by metric name, the curve and the first evaluation at the target, the report
on disk as evaluations arrive, the curves' PNG, and a run stopped once its target holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from speechtrain.errors import UserError
from speechtrain.recipes.time_to import Goal, SeedRun, TimeToReport, parse_goals, seed_from_run

ROOT = Path(__file__).resolve().parents[1]


def test_goals_parse_by_name_and_take_the_metrics_direction() -> None:
    assert parse_goals("pesq>=3.0, stoi>=0.9") == [Goal("pesq", "max", 3.0), Goal("stoi", "max", 0.9)]
    assert parse_goals("mcd_dtw=8") == [Goal("mcd_dtw", "min", 8.0)]  # MCD: lower is better
    assert parse_goals("cer<=0.1") == [Goal("cer", "min", 0.1)]  # the judge's metric, by name
    assert parse_goals("my_score>=2") == [Goal("my_score", "max", 2.0)]  # any eval-row key with a direction
    with pytest.raises(UserError, match="METRIC>=VALUE"):
        parse_goals("pesq 3")
    with pytest.raises(UserError, match="not a known metric"):
        parse_goals("my_score=2")


def _rows(values: list[tuple[float, float]]) -> list[dict]:
    return [
        {
            "split": "eval",
            "step": 100 * (i + 1),
            "train_seconds": 10.0 * (i + 1),
            "audio_seconds_seen": 50.0 * (i + 1),
            "pesq": p,
            "stoi": s,
        }
        for i, (p, s) in enumerate(values)
    ]


def test_the_target_is_the_first_evaluation_where_every_goal_holds() -> None:
    goals = parse_goals("pesq>=3.0,stoi>=0.9")
    run = SeedRun(0, "x")
    met = [run.add(r, goals) for r in _rows([(2.0, 0.95), (3.1, 0.85), (3.2, 0.91), (3.5, 0.95)])]
    assert met == [False, False, True, False]  # pesq alone, stoi alone: not yet; both: the third
    assert (run.seconds_to_target, run.audio_to_target, run.step_to_target) == (30.0, 150.0, 300)
    assert len(run.points) == 4 and run.points[0]["pesq"] == 2.0
    resumed = SeedRun(0, "x")
    for r in _rows([(1.0, 0.5), (1.2, 0.6)]) + [{**_rows([(1.3, 0.7)])[0], "step": 300}]:
        resumed.add(r, goals)  # the third row's train_seconds (10) restarted in a resumed process
    assert resumed.resumed_after == [200] and [p["train_seconds"] for p in resumed.points] == [10.0, 20.0, 30.0]
    nan_row = {"split": "eval", "step": 1, "pesq": float("nan"), "stoi": 1.0}
    assert not Goal("pesq", "max", 0.0).met(nan_row)  # no value is never at the target


def test_reading_runs_and_writing_the_curves(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    train = {"split": "train", "step": 50, "loss": 1.0}
    lines = [json.dumps(r) for r in [train, *_rows([(1.1, 0.7), (1.4, 0.8)])]]
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    from speechtrain.cli.main import main

    out_png, out_json = tmp_path / "curve.png", tmp_path / "t.json"
    rc = main(
        [
            "bench",
            "--config",
            str(ROOT / "recipes" / "vocoder_hifigan_tiny.yaml"),
            "--time-to",
            "pesq>=3,stoi>=0.9",
            "--time-to-runs",
            str(run_dir),
            "--time-minutes",
            "5",
            "--plot",
            str(out_png),
            "--json",
            str(out_json),
        ]
    )
    assert rc == 0 and out_png.stat().st_size > 1000
    report = json.loads(out_json.read_text())
    assert [p["pesq"] for p in report["runs"][0]["points"]] == [1.1, 1.4]
    assert report["runs"][0]["seconds_to_target"] is None and "load_1m" in report["machine"]
    assert report["machine"]["when"] == "read"  # the load when read, not while training: the plot's title says so
    text = TimeToReport("x", parse_goals("pesq>=3"), 5, [seed_from_run(run_dir, parse_goals("pesq>=3"))]).markdown()
    assert "not reached in 5 min" in text and "1.400" in text


@pytest.mark.slow
def test_a_run_stops_once_its_target_holds(tmp_path: Path, demo_corpus: Path) -> None:
    """The tiny vocoder with a target its first evaluation meets: the child is stopped there (SIGTERM), long before
    its step limit, and the report on disk has the curve."""
    from speechtrain.config import load_config
    from speechtrain.recipes.time_to import run_time_to

    cfg = load_config(
        ROOT / "recipes" / "vocoder_hifigan_tiny.yaml",
        [
            f"data.manifest={demo_corpus}",
            f"data.cache_dir={tmp_path / 'cache'}",
            "train.eval_every=2",
            "train.quality_items=0",
            "train.best_metric=loss",
            "train.save_every=1000",
        ],
    )
    report = run_time_to(cfg, parse_goals("mel_l1<=100"), minutes=5, repeat=1, out_dir=tmp_path / "tt")
    run = report.runs[0]
    assert run.stopped == "target" and run.step_to_target == 2
    on_disk = json.loads((tmp_path / "tt" / "time_to.json").read_text())
    assert on_disk["runs"][0]["step_to_target"] == 2
    last = max(r["step"] for r in map(json.loads, Path(run.run_dir, "metrics.jsonl").read_text().splitlines()))
    assert last < 1000  # stopped by the target, not by max_steps


def test_runs_of_different_settings_read_side_by_side_under_their_names(tmp_path: Path) -> None:
    """`--time-to-runs autopilot=A their_settings=B`: the autopilot beside "their settings" in one table and one
    plot, each run under its name (they were "seed 0" and "seed 1", as if one configuration); a folder that is not a
    run is refused by name."""
    pytest.importorskip("matplotlib")
    from speechtrain.errors import UserError
    from speechtrain.recipes.time_to import read_runs, write_curves

    dirs = {}
    for name, values in (("autopilot", [(1.1, 0.7), (3.2, 0.95)]), ("their_settings", [(1.0, 0.6), (1.3, 0.8)])):
        dirs[name] = tmp_path / name
        dirs[name].mkdir()
        (dirs[name] / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in _rows(values)) + "\n")
    goals = parse_goals("pesq>=3,stoi>=0.9")
    runs = read_runs([f"{n}={d}" for n, d in dirs.items()], goals)
    assert [r.name() for r in runs] == ["autopilot", "their_settings"]
    assert runs[0].step_to_target is not None and runs[1].step_to_target is None
    text = TimeToReport("vits_small", goals, 80, runs).markdown()
    assert "| autopilot |" in text and "| their_settings |" in text and "seed 1" not in text
    assert write_curves(TimeToReport("vits_small", goals, 80, runs), tmp_path / "c.png").stat().st_size > 1000
    assert [r.name() for r in read_runs([str(dirs["autopilot"])], goals)] == ["seed 0"]
    with pytest.raises(UserError, match="no metrics.jsonl"):
        read_runs([f"x={tmp_path}"], goals)
