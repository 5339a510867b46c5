"""What the Train and Runs tabs read quality from (issue 50): eval metrics in their own units (each its own small
chart), the run's best quality metric with its step in the Runs table, memory series that coincide drawn as one."""

from __future__ import annotations

import json
from pathlib import Path

from speechtrain.ui import charts, runs


def _eval_rows() -> list[dict[str, float]]:
    """A KL term that rose 1.66x beside the one quality number that fell: what the relative chart flattened."""
    return [
        {"split": "eval", "step": 100, "loss": 60.0, "kl_loss": 1.0, "mcd_dtw": 63.27, "quality_items": 4},
        {"split": "eval", "step": 200, "loss": 55.0, "kl_loss": 1.66, "mcd_dtw": 61.66, "quality_items": 4},
        {"split": "eval", "step": 300, "loss": 54.0, "kl_loss": 1.5, "mcd_dtw": 62.0, "quality_items": 4},
    ]


def test_eval_series_keep_their_units_and_each_is_a_panel_of_its_own() -> None:
    series = runs.eval_series(_eval_rows())
    mcd = [v for _, name, v in series if name.startswith("mcd_dtw")]
    assert mcd == [63.27, 61.66, 62.0]  # dB, not divided by the first value (was 1.0, 0.9746, ...)
    assert "mcd_dtw (dB, lower is better)" in {name for _, name, _ in series}
    assert not any(name.startswith("quality_items") for _, name, _ in series)
    spec = json.loads(charts.chart(series, "eval", panels=True).plot)  # type: ignore[union-attr]
    assert spec["facet"]["field"] == "series" and spec["resolve"]["scale"]["y"] == "independent"
    assert spec["spec"]["encoding"]["y"]["axis"]["format"] == ".4~g"  # one point's tick read 1.000000


def test_the_runs_table_shows_the_best_quality_metric_and_its_step(tmp_path: Path) -> None:
    run = tmp_path / "r"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("model:\n  name: vits\ntrain:\n  max_steps: 300\n")
    rows = [{"split": "train", "step": 300, "loss": 100.0}, *_eval_rows()]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    info = runs.run_info(run)
    assert info.best == runs.BestQuality("mcd_dtw", 61.66, 200)
    row = dict(zip(runs.COLUMNS, info.row()))
    assert row["best quality @ step"] == "mcd_dtw 61.66 dB @ 200"
    # train.best_metric names the metric (and its direction)
    assert runs.best_quality(_eval_rows(), "kl_loss:max") == runs.BestQuality("kl_loss", 1.66, 200)
    assert runs.best_quality([{"split": "eval", "step": 1, "loss": 3.0}]) is None  # no quality metric: nothing


def test_memory_columns_equal_at_every_step_are_one_series() -> None:
    rows = [{"step": s, "mem_rss": s * 2**30, "mem_peak_rss": s * 2**30, "mem_reserved": 2**30} for s in (1, 2, 3)]
    names = {name for _, name, _ in runs.memory_series(rows)}
    assert names == {"rss = peak_rss", "reserved"}  # was rss and peak_rss, one drawn over the other
    rows[1]["mem_peak_rss"] = 3 * 2**30
    assert {name for _, name, _ in runs.memory_series(rows)} == {"rss", "peak_rss", "reserved"}


def test_the_output_box_shows_each_progress_bar_step_once(tmp_path: Path) -> None:
    from speechtrain.ui import jobs

    bar = "train:  50%| 2/4 [00:12]\rtrain:  50%| 2/4 [00:12, loss=157.7]\rtrain:  75%| 3/4 [00:37, loss=153.3]"
    (tmp_path / "output.log").write_text(f"run: r\n{bar}\n[eval] step 4\r\n")
    shown = jobs.log_tail(tmp_path).splitlines()
    assert shown == ["run: r", "train:  75%| 3/4 [00:37, loss=153.3]", "[eval] step 4"]
