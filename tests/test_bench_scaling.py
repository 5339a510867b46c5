"""``speechtrain bench --nproc N``: the scaling rows, their arithmetic, the ranks' merge, a real 2-process run."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from speechtrain.bench.ablate import LadderRow
from speechtrain.bench.measure import RunResult, last_error_line
from speechtrain.bench.scaling import build_scaling_report, scaling_markdown, scaling_variants, variant_processes
from speechtrain.cli.main import main
from speechtrain.recipes.bench import merge_ranks
from tests.test_bench_measure import TINY


def _result(name: str, rate: float, processes: int = 1) -> RunResult:
    return RunResult(
        name=name,
        steps=10,
        seconds=10.0,
        samples=40 * processes,
        audio_seconds=10.0 * rate,
        padded_frames=1000,
        real_frames=900,
        data_wait_seconds=0.1,
        peak_memory_bytes=2**30,
        processes=processes,
    )


def _row(variant_index: int, nproc: int, rates: list[float]) -> LadderRow:
    variant = scaling_variants(nproc)[variant_index]
    processes, _ = variant_processes(variant)
    median = sorted(rates)[(len(rates) - 1) // 2]
    return LadderRow(variant, _result(variant.label, median, processes), rates=list(rates))


def test_rows_are_one_to_n_processes_then_the_all_reduce_twins() -> None:
    rows = scaling_variants(3)
    assert [variant_processes(v) for v in rows] == [(1, True), (2, True), (3, True), (2, False), (3, False)]
    assert rows[0].label == "1 process" and rows[1].label == "2 processes" and "left out" in rows[3].label


def test_efficiency_and_all_reduce_share_are_taken_pass_by_pass() -> None:
    # pass rates: 1 process 100/110; 2 processes 150/176; 2 processes without the all-reduce 200/220
    rows = [_row(0, 2, [100.0, 110.0]), _row(1, 2, [150.0, 176.0]), _row(2, 2, [200.0, 220.0])]
    report = build_scaling_report(rows, {"name": "cpu"}, "speechtrain bench --nproc 2", ["a note"])
    one, two = report["scaling"]
    assert one["processes"] == 1 and one["scaling_efficiency"]["median"] == pytest.approx(1.0)
    eff = two["scaling_efficiency"]
    assert (eff["low"], eff["high"]) == (pytest.approx(0.75), pytest.approx(0.8))  # 150/200, 176/220
    share = two["allreduce_share"]
    assert (share["low"], share["high"]) == (pytest.approx(0.2), pytest.approx(0.25))  # 1-176/220, 1-150/200
    assert two["audio_seconds_per_second_per_process"] == pytest.approx(two["audio_seconds_per_second"] / 2)
    table = scaling_markdown(report)
    assert "| 2 | single process |" in table and "0.78 (0.75 to 0.80)" in table and "22.5% (20.0% to 25.0%)" in table


def test_a_failed_row_is_listed_with_its_error() -> None:
    rows = [_row(0, 2, [100.0]), LadderRow(scaling_variants(2)[1], None, "failed: gloo timed out"), _row(2, 2, [90.0])]
    report = build_scaling_report(rows, {}, "", [])
    assert report["scaling"][1]["error"] == "failed: gloo timed out"
    assert "failed: failed: gloo timed out" in scaling_markdown(report)


def test_ranks_merge_into_one_row_summed_with_the_slowest_ranks_seconds() -> None:
    a, b = _result("r", 100.0), _result("r", 50.0)
    b.seconds, b.peak_memory_bytes, b.cpu_seconds, a.cpu_seconds = 12.0, 2**31, 3.0, 2.0
    merged = merge_ranks([asdict(a), asdict(b)])
    assert merged.processes == 2 and merged.seconds == 12.0 and merged.peak_memory_bytes == 2**31
    assert merged.samples == 80 and merged.audio_seconds == pytest.approx(1500.0) and merged.cpu_seconds == 5.0


def test_a_torchrun_failure_names_the_workers_error() -> None:
    stderr = (
        "W1123 torch/distributed/run.py] Setting OMP_NUM_THREADS\n"
        "[rank1]: Traceback (most recent call last):\n"
        "[rank1]: speechtrain.errors.UserError: data.manifest is not set\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        "============================================================\n"
    )
    assert last_error_line(stderr) == "speechtrain.errors.UserError: data.manifest is not set"
    assert last_error_line("one\ntwo\n") == "two" and last_error_line("") is None


def test_nproc_flags_are_checked() -> None:
    assert main(["bench", "--nproc", "1", "--fake-data", "4", *TINY]) == 2
    assert main(["bench", "--nproc", "2", "--ablate", "--fake-data", "4", *TINY]) == 2


@pytest.mark.slow
def test_bench_nproc_2_measures_one_and_two_processes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "scaling.json"
    md = tmp_path / "scaling.md"
    args = ["bench", "--nproc", "2", "--fake-data", "16", "--steps", "3", "--warmup", "1", "--repeat", "1"]
    assert main([*args, "--json", str(out), "--markdown", str(md), *TINY]) == 0
    report = json.loads(out.read_text())
    one, two = report["scaling"]
    assert (one["processes"], two["processes"]) == (1, 2)
    assert one["audio_seconds_per_second"] > 0 and two["audio_seconds_per_second"] > 0
    assert two["scaling_efficiency"]["median"] > 0 and two["allreduce_share"] is not None
    runs = {r["row"]: r for r in report["runs"]}
    assert runs["2 processes"]["processes"] == 2 and runs["1 process"]["processes"] == 1
    assert runs["2 processes, all-reduce left out"]["processes"] == 2
    # two ranks ran the same 3 timed steps, each on its own batches: more items than one process
    assert runs["2 processes"]["samples"] > runs["1 process"]["samples"]
    assert two["strategy"] == "ddp" and one["strategy"] == "single process"
    assert "| 2 | ddp |" in capsys.readouterr().out and "scaling efficiency" in md.read_text()


def test_bench_under_torchrun_says_to_run_it_once(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["bench", "--nproc", "2", "--fake-data", "4", *TINY]) == 2
    assert "without torchrun" in capsys.readouterr().err
