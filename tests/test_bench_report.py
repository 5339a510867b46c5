"""Diagnosis rules, report consistency, markdown table and PNG chart (synthetic runs, no training)."""

from __future__ import annotations

import json

import pytest

from speechtrain.bench.ablate import LadderRow, Variant, applied_text
from speechtrain.bench.diagnose import diagnose
from speechtrain.bench.measure import RunResult
from speechtrain.bench.report import build_report, markdown_table, write_json, write_markdown, write_plot

CPU = {"type": "cpu", "name": "test cpu", "cpu_count": 2}
GPU = {"type": "cuda", "name": "test gpu", "total_memory_bytes": 80 * 2**30}


def run(name: str = "all (recommended settings)", **kw: object) -> dict:
    rec = {
        "name": name,
        "steps_per_second": 2.0,
        "data_wait_fraction": 0.01,
        "gpu_busy_fraction": None,
        "mfu": None,
        "mean_batch_size": 16.0,
        "tuned_batch_size": None,
        "items_per_batch_limit": 1000.0,
        "peak_memory_bytes": 50 * 2**30,
    }
    rec.update(kw)
    return rec


def test_input_bound_when_data_wait_is_high() -> None:
    out = diagnose([run("baseline (plain PyTorch loop)"), run(data_wait_fraction=0.45)], CPU)
    assert out["kind"] == "input-bound"
    assert "45%" in out["evidence"]
    assert any("num_workers" in a for a in out["advice"])


def test_host_sync_bound_when_gpu_idles_without_data_wait() -> None:
    out = diagnose([run(gpu_busy_fraction=0.35, data_wait_fraction=0.02)], GPU)
    assert out["kind"] == "host-sync-bound"
    assert "35%" in out["evidence"]
    assert any("reduce-overhead" in a for a in out["advice"])


def test_host_sync_needs_a_gpu_reading() -> None:
    assert diagnose([run(gpu_busy_fraction=None)], CPU)["kind"] == "compute-bound"


def test_memory_bound_when_batches_are_far_below_the_tuned_size() -> None:
    out = diagnose([run(mean_batch_size=4.0, tuned_batch_size=32.0, gpu_busy_fraction=0.95)], GPU)
    assert out["kind"] == "memory-bound"
    assert "4.0 items" in out["evidence"]


def test_small_batches_are_not_memory_bound_when_the_data_is_the_limit() -> None:
    # 20 utterances in 10 buckets: two per batch is all the data allows
    r = run(mean_batch_size=2.0, tuned_batch_size=200.0, items_per_batch_limit=2.0)
    assert diagnose([r], CPU)["kind"] == "compute-bound"


def test_memory_bound_on_a_mostly_empty_gpu() -> None:
    out = diagnose([run(gpu_busy_fraction=0.97, peak_memory_bytes=4 * 2**30)], GPU)
    assert out["kind"] == "memory-bound"


def test_compute_bound_at_high_mfu() -> None:
    out = diagnose([run(gpu_busy_fraction=0.98, mfu=0.52)], GPU)
    assert out["kind"] == "compute-bound"
    assert "52.0%" in out["evidence"]


def test_diagnose_prefers_the_all_row_and_handles_no_runs() -> None:
    runs = [run("all (recommended settings)", data_wait_fraction=0.5), run("+ bucketing")]
    assert diagnose(runs, CPU)["kind"] == "input-bound"
    assert diagnose([], CPU)["kind"] == "unknown"


def result(name: str, seconds: float, audio: float, peak: int, **kw: object) -> RunResult:
    base = dict(steps=4, samples=16, padded_frames=1000, real_frames=700, data_wait_seconds=0.1 * seconds)
    base.update(kw)
    return RunResult(name=name, seconds=seconds, audio_seconds=audio, peak_memory_bytes=peak, **base)


def ladder() -> list[LadderRow]:
    rows = [
        LadderRow(Variant("baseline", "baseline", kind="baseline"), result("baseline", 2.0, 10.0, 1000)),
        LadderRow(Variant("engine", "all off"), result("all off", 2.5, 10.0, 1100)),
        LadderRow(
            Variant("sdpa", "+ sdpa", records=("sdpa",)),
            result("+ sdpa", 1.0, 10.0, 600, applied={"sdpa": {"applied": False, "detail": "no attention"}}),
        ),
        LadderRow(Variant("tf32", "+ TF32", skip_reason="not applicable on cpu"), None),
        LadderRow(Variant("compile", "+ compile"), None, error="failed: boom"),
    ]
    rows[0].result.flops_per_padded_frame = 1e6
    return rows


def test_report_numbers_are_consistent() -> None:
    rep = build_report(ladder(), dict(CPU), None, "speechtrain bench", ["note"])
    json.dumps(rep)  # JSON-safe
    assert set(rep) >= {"device", "runs", "bottleneck", "skipped"}
    by = {r["name"]: r for r in rep["runs"]}
    base = by["baseline"]
    for r in rep["runs"]:
        assert r["audio_seconds_per_second"] == pytest.approx(r["audio_seconds"] / r["seconds"])
        assert r["speedup_vs_baseline"] == pytest.approx(
            r["audio_seconds_per_second"] / base["audio_seconds_per_second"]
        )
        assert r["steps_per_second"] == pytest.approx(r["steps"] / r["seconds"])
        assert 0.0 <= r["padding_fraction"] <= 1.0 and 0.0 <= r["data_wait_fraction"] <= 1.0
        assert r["mfu"] is None  # no peak known without a probe
        for key in ("samples_per_second", "peak_memory_bytes", "gpu_busy_fraction", "applied"):
            assert key in r
    assert by["+ sdpa"]["speedup_vs_baseline"] == pytest.approx(2.0)
    assert {s["key"] for s in rep["skipped"]} == {"tf32", "compile"}
    assert set(rep["bottleneck"]) == {"kind", "evidence", "advice"}


def test_applied_text_reports_the_record_reason() -> None:
    rows = ladder()
    assert applied_text(rows[2].result, rows[2].variant) == "no: no attention"
    assert applied_text(None, rows[3].variant) == "not applicable on cpu"
    assert applied_text(rows[0].result, rows[0].variant) == "reference"


def test_markdown_table_in_ladder_order_with_reasons(tmp_path) -> None:
    rep = build_report(ladder(), dict(CPU))
    table = markdown_table(rep)
    lines = table.strip().splitlines()
    assert lines[0].startswith("| configuration | audio-s/s | speed-up")
    names = [ln.split("|")[1].strip() for ln in lines[2:]]
    assert names == ["baseline", "all off", "+ sdpa", "+ TF32", "+ compile"]
    assert "2.00x" in lines[4] and "not applicable on cpu" in lines[5] and "failed: boom" in lines[6]
    assert "+40%" in lines[4]  # 600 vs 1000 bytes: 40% saved
    md = write_markdown(rep, tmp_path / "r" / "bench.md")
    assert "Bottleneck:" in md.read_text()
    data = json.loads(write_json(rep, tmp_path / "bench.json").read_text())
    assert data["runs"][0]["name"] == "baseline"


def test_png_chart_is_written(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    path = write_plot(build_report(ladder(), dict(CPU)), tmp_path / "bench.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cpu_table_has_cpu_time_and_load_columns_and_a_load_note() -> None:
    rows = ladder()
    for row in rows:
        if row.result is not None:
            row.result.cpu_seconds, row.result.host_load = 2 * row.result.seconds, 7.5
    rep = build_report(rows, dict(CPU))
    lines = markdown_table(rep).strip().splitlines()
    assert "audio-s/CPU-s | load |" in lines[0]
    assert len(lines[1].split("|")) == len(lines[2].split("|")) == len(lines[-1].split("|"))
    assert " 7.5 |" in lines[2]
    assert rep["runs"][0]["audio_seconds_per_cpu_second"] == pytest.approx(10.0 / 4.0)
    assert any("load average up to 7.5" in n for n in rep["notes"])


def test_repeated_ladder_keeps_the_median_run() -> None:
    from speechtrain.bench.ablate import _median_row

    v = Variant("sdpa", "+ sdpa")
    runs = [LadderRow(v, result("+ sdpa", s, 10.0, 1)) for s in (1.0, 4.0, 2.0)]
    assert _median_row(runs).result.seconds == 2.0
    failed = LadderRow(v, None, error="failed: x")
    assert _median_row([failed, runs[0]]).result.seconds == 1.0
    assert _median_row([failed]).error == "failed: x"


def test_verdict_needs_every_pass_on_one_side_of_one_and_a_narrow_range() -> None:
    from speechtrain.bench.ablate import Spread, Verdict, verdict

    assert verdict(Spread.of([1.40, 1.45, 1.50]), 0.2)[0] is Verdict.FASTER
    assert verdict(Spread.of([0.70, 0.72, 0.75]), 0.2)[0] is Verdict.SLOWER
    assert verdict(Spread.of([0.97, 1.01, 1.05]), 0.2)[0] is Verdict.INCONCLUSIVE  # across 1.0x
    kind, why = verdict(Spread.of([1.5, 2.0, 3.0]), 0.2)
    assert kind is Verdict.INCONCLUSIVE and "wider than 20%" in why  # all above 1.0x, but 75% wide
    assert verdict(Spread.of([2.0]), 0.2)[0] is Verdict.UNREPEATED
    assert verdict(None, 0.2)[0] is Verdict.UNREPEATED


def _repeated(rates: dict[str, list[float]]) -> list[LadderRow]:
    rows = []
    for key, rs in rates.items():
        v = Variant(key, key, kind="baseline" if key == "baseline" else "engine")
        runs = [LadderRow(v, result(key, 10.0 / r, 10.0, 1000)) for r in rs]
        from speechtrain.bench.ablate import _median_row

        row = _median_row(runs)
        row.rates = list(rs)
        rows.append(row)
    return rows


def test_report_gives_ranges_verdicts_and_a_headline() -> None:
    rows = _repeated({"baseline": [1.0, 1.1, 0.9], "engine": [1.05, 1.0, 0.93], "all": [1.5, 1.6, 1.4]})
    rep = build_report(rows, dict(CPU), max_spread=0.2)
    by = {r["key"]: r for r in rep["runs"]}
    assert by["baseline"]["verdict"] == "reference"
    assert by["engine"]["verdict"] == "inconclusive"  # 1.05, 0.91, 1.03: across 1.0x
    assert by["all"]["verdict"] == "faster"
    assert by["all"]["speedup_spread"]["low"] == pytest.approx(1.4545, abs=1e-3)  # paired: 1.6/1.1
    assert by["all"]["speedup_spread"]["high"] == pytest.approx(1.5556, abs=1e-3)  # 1.4/0.9
    assert by["all"]["speedup_vs_baseline"] == pytest.approx(1.5)  # ratio of the medians
    assert by["engine"]["rate_spread_fraction"] == pytest.approx((1.05 - 0.93) / 1.0)
    assert rep["headline"]["key"] == "all" and rep["headline"]["verdict"] == "faster"
    table = markdown_table(rep)
    assert "inconclusive" in table.splitlines()[3] and "1.50x (1.45-1.56)" in table
    json.dumps(rep)


def test_an_inconclusive_headline_is_said_so_with_the_load() -> None:
    rows = _repeated({"baseline": [1.0, 1.2, 0.8], "all": [1.3, 0.9, 1.2]})
    for row in rows:
        row.result.host_load = 5.0
    rep = build_report(rows, dict(CPU))
    assert rep["headline"]["verdict"] == "inconclusive"
    assert any(n.startswith("headline inconclusive: the machine was too loaded") for n in rep["notes"])


def test_ladder_passes_are_interleaved_round_robin_and_failures_not_retried() -> None:
    from speechtrain.bench.ablate import run_ladder
    from speechtrain.bench.measure import RowNotApplicable, RunFailed, RunSpec

    order: list[str] = []

    def execute(spec: RunSpec) -> RunResult:
        order.append(spec.name)
        if spec.name == "broken":
            raise RunFailed("boom")
        if spec.name == "naive":
            raise RowNotApplicable("not applicable: no attention")
        return result(spec.name, 1.0 + len(order) / 100, 10.0, 1000)

    names = ["baseline", "a", "b", "broken", "naive"]
    variants = [Variant(n, n) for n in names] + [Variant("skipped", "skipped", skip_reason="--skip")]
    specs = [RunSpec(name=n, raw={}) for n in names] + [None]
    rows = run_ladder(variants, specs, repeat=3, isolate=False, execute=execute)
    assert order[:5] == names and order[5] == "a"  # pass 2 starts 5 // 3 rows down the ladder
    assert order.count("baseline") == order.count("a") == 3
    assert order.count("broken") == order.count("naive") == 1
    by = {r.variant.key: r for r in rows}
    assert len(by["a"].rates) == 3 and all(r is not None for r in by["a"].rates)
    assert by["broken"].error == "failed: boom" and by["naive"].error == "not applicable: no attention"
    assert by["skipped"].result is None and by["skipped"].rates == []


def test_auto_threads_leave_a_core_per_loader_worker() -> None:
    from speechtrain.recipes.bench import row_threads

    assert row_threads("auto", {"data": {"num_workers": 0}}, 4) == 4
    assert row_threads("auto", {"data": {"num_workers": 1}}, 4) == 3
    assert row_threads("auto", {"data": {"num_workers": 8}}, 2) == 1
    assert row_threads(2, {"data": {"num_workers": 1}}, 4) == 2


def test_the_rows_own_threads_are_not_counted_as_other_processes_load() -> None:
    """A row at 2 torch threads on 2 cores makes a load of about 2 by itself: no 'loaded machine' note; the
    same load at 1 thread per row leaves a core's worth to others (noted)."""
    for threads, noted in ((2, False), (1, True)):
        rows = ladder()
        for row in rows:
            if row.result is not None:
                row.result.host_load, row.result.threads = 2.0, threads
        rep = build_report(rows, {**CPU, "usable_cores": 2})
        assert any(n.startswith("other processes loaded") for n in rep["notes"]) is noted


def test_compute_bound_advice_follows_the_measured_precision_row() -> None:
    """bf16 measured at 0.18x of 'all off' (a CPU without fast bf16): the advice keeps fp32, and TF32 (a GPU
    format) is not offered on the CPU; without such a row, lower precision is advised."""
    off = run("speechtrain, all off", key="engine", audio_seconds_per_second=400.0)
    slow = run("+ bf16 autocast", key="precision", audio_seconds_per_second=75.0)
    advice = diagnose([off, slow, run()], CPU)["advice"]
    assert any(a.startswith("keep accel.precision=fp32") and "0.19x" in a for a in advice)
    assert not any("TF32" in a for a in advice)
    assert any("accel.precision=bf16" in a for a in diagnose([run()], GPU)["advice"])


def _guard_ladder(loader_rates: list[float], wait: float = 0.056) -> list[LadderRow]:
    """baseline, 'all off' and the loader rung over 3 passes; the base rows wait ``wait`` of their time."""
    from speechtrain.bench.ablate import _median_row

    rows = []
    for key, rs in (("baseline", [1.0, 1.0, 1.0]), ("engine", [1.0, 1.02, 0.98]), ("loader", loader_rates)):
        v = Variant(key, key, kind="baseline" if key == "baseline" else "engine", records=("loader",))
        if key != "loader":
            v = Variant(key, key, kind="baseline" if key == "baseline" else "engine")
        runs = [
            LadderRow(
                v,
                result(
                    key,
                    10.0 / r,
                    10.0,
                    1000,
                    data_wait_seconds=wait * 10.0 / r,
                    applied={"loader": {"applied": True, "detail": "num_workers=1"}},
                ),
            )
            for r in rs
        ]
        row = _median_row(runs)
        row.rates = list(rs)
        rows.append(row)
    return rows


def test_a_loader_gain_beyond_the_data_wait_bound_is_flagged_not_reported() -> None:
    """Under load the loader rung once read 9.1x while the base's data wait (5.6%) bounds it near 1.06x: the
    report must call it noise, whatever its spread (here every pass agrees)."""
    rep = build_report(_guard_ladder([9.0, 9.1, 9.3]), dict(CPU), max_spread=0.2)
    row = next(r for r in rep["runs"] if r["key"] == "loader")
    assert row["verdict"] == "exceeds its mechanism"
    assert row["bound"]["limit"] == pytest.approx(1 / (1 - 0.056))
    assert "5.6%" in row["verdict_detail"] and "noise" in row["verdict_detail"]
    assert "exceeds its mechanism (<= 1.06x)" in markdown_table(rep)
    assert any(n.startswith("'loader' flagged") for n in rep["notes"])


def test_a_loader_gain_within_its_bound_keeps_its_verdict() -> None:
    rep = build_report(_guard_ladder([1.04, 1.05, 1.03]), dict(CPU), max_spread=0.2)
    row = next(r for r in rep["runs"] if r["key"] == "loader")
    assert row["verdict"] == "faster" and row["bound"]["limit"] == pytest.approx(1.0593, abs=1e-3)


def test_mechanism_bounds_of_bucketing_and_of_a_change_that_did_not_apply() -> None:
    from speechtrain.bench.ablate import Spread, exceeds_bound, mechanism_bound

    base = result("all off", 1.0, 10.0, 1, padded_frames=1000, real_frames=600)  # 40% padding
    bucketing = Variant("bucketing", "+ bucketing", records=("bucketing",))
    on = result("+ bucketing", 1.0, 10.0, 1, applied={"bucketing": {"applied": True}})
    bound = mechanism_bound(bucketing, on, base)
    assert bound is not None and bound.limit == pytest.approx((1 / 0.6) ** 2)
    assert not exceeds_bound(Spread.of([1.6, 1.7]), bound) and exceeds_bound(Spread.of([3.0, 3.1]), bound)
    channels = Variant("channels_last", "+ channels-last", records=("channels_last",))
    off = result("+ cl", 1.0, 10.0, 1, applied={"channels_last": {"applied": False, "detail": "no Conv2d"}})
    bound = mechanism_bound(channels, off, base)
    assert bound is not None and bound.limit == 1.0
    assert exceeds_bound(Spread.of([1.2, 1.25, 1.3]), bound)  # a gain where nothing changed: noise
    assert not exceeds_bound(Spread.of([0.98, 1.02, 1.04]), bound)
    assert mechanism_bound(Variant("precision", "+ bf16", records=("precision",)), on, base) is None


def test_the_chart_shows_spreads_and_verdicts_as_the_table_does(tmp_path) -> None:
    from speechtrain.bench.report import chart_label, rate_error

    rows = _repeated({"baseline": [1.0, 1.2, 0.8], "engine": [1.3, 0.9, 1.2], "all": [1.5, 1.6, 1.4]})
    rep = build_report(rows, dict(CPU), max_spread=0.2)
    by = {r["key"]: r for r in rep["runs"]}
    assert "inconclusive" in chart_label(by["engine"]) and "(0.75-1.50)" in chart_label(by["engine"])
    assert chart_label(by["all"]).strip() == "1.50x (1.33-1.75) inconclusive"  # 28% wide
    below, above = rate_error(by["engine"])
    assert below == pytest.approx(0.3) and above == pytest.approx(0.1)
    one = build_report(_repeated({"baseline": [1.0], "all": [1.5]}), dict(CPU))
    assert chart_label(one["runs"][1]).strip() == "1.50x (one pass)" and rate_error(one["runs"][1]) == (0, 0)
    pytest.importorskip("matplotlib")
    assert write_plot(rep, tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
