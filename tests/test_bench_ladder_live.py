"""A ladder that keeps its rows: figures written after every row (a SIGKILL leaves them on disk), a per-row time
limit that marks the row timed out and runs the next one, a failed row's real error and its log, and the
profiler's view of a row (issue 36)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_bench_measure import TINY


def test_row_timeout_marks_the_row_timed_out_and_the_next_row_runs(tmp_path, monkeypatch) -> None:
    import speechtrain.bench.measure as measure
    from speechtrain.bench.ablate import RowStatus, Variant, run_ladder
    from speechtrain.bench.measure import RunSpec

    monkeypatch.setattr(measure, "CHILD_MODULE", "tests.bench_child")
    names = ["baseline", "hang", "crash", "after"]
    variants = [Variant(n, n) for n in names]
    specs = [RunSpec(name=n, raw={}) for n in names]
    seen: list[tuple[int, list[str]]] = []

    def on_result(rows, i) -> None:  # the ladder so far, after every measurement
        seen.append((i, [r.status.value for r in rows]))

    t0 = time.perf_counter()
    rows = run_ladder(variants, specs, row_timeout=5.0, log_dir=tmp_path / "logs", on_result=on_result)
    assert time.perf_counter() - t0 < 100  # the hanging row (120 s) was killed, not waited for
    by = {r.variant.key: r for r in rows}
    assert by["baseline"].status == by["after"].status == RowStatus.MEASURED  # the row after the timeout ran
    assert by["hang"].status == RowStatus.TIMED_OUT and by["hang"].error.startswith("timed out after 5 s")
    assert "row hang starting" in Path(by["hang"].log).read_text()
    crash = by["crash"]
    assert crash.status == RowStatus.FAILED
    # the real error, not only the last line of stderr ("Set TORCHDYNAMO_VERBOSE=1 ...")
    assert crash.error == "failed: torch._dynamo.exc.Unsupported: Graph break under GenericContextWrappingVariable"
    assert any("Hint: move the context manager" in ln for ln in crash.error_lines)
    assert "Set TORCHDYNAMO_VERBOSE=1" in Path(crash.log).read_text()  # the whole output stays in the log
    assert seen[0] == (0, ["measured", "not measured yet", "not measured yet", "not measured yet"])
    assert [i for i, _ in seen] == [0, 1, 2, 3]


def test_error_excerpt_reads_the_last_exception_and_torchrun_lines() -> None:
    from speechtrain.bench.measure import error_excerpt
    from tests.bench_child import DYNAMO_ERROR

    lines = error_excerpt(DYNAMO_ERROR)
    assert lines[0].startswith("torch._dynamo.exc.Unsupported:") and len(lines) <= 8
    assert error_excerpt(
        "[rank0]: Traceback (most recent call last):\n[rank0]:   File x\n[rank0]: ValueError: bad\n"
    ) == ["ValueError: bad"]
    assert error_excerpt("RuntimeError: DataLoader worker (pid 12) is killed by signal: Killed.\n") == [
        "RuntimeError: DataLoader worker (pid 12) is killed by signal: Killed."
    ]


@pytest.mark.slow
def test_a_ladder_killed_with_sigkill_keeps_the_rows_it_measured(tmp_path) -> None:
    """The bench CLI in a subprocess: once its JSON holds a measured row, kill -9; the JSON (and the markdown)
    on disk hold that row's figures and list the rows it never reached."""
    out = tmp_path / "ladder.json"
    skips = ["naive_attention", "lightning", "loader", "compile", "activation_checkpointing", "channels_last"]
    skips += ["fused_optimizer", "precision", "cpu_allocator", "memory_saving", "all_compile"]
    cmd = [sys.executable, "-m", "speechtrain", "bench", "--ablate", "--steps", "2", "--warmup", "1"]
    cmd += ["--min-seconds", "0", "--repeat", "1", "--fake-data", "10", "--json", str(out)]
    cmd += ["--markdown", str(tmp_path / "ladder.md"), *[a for s in skips for a in ("--skip", s)]]
    cmd += ["model.name=speechtrain.testing.toy.task:build_toy", *TINY[1:]]  # the toy family is the tests' own
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy())
    deadline = time.monotonic() + 400
    rows: list[dict] = []
    alive = False
    try:
        while time.monotonic() < deadline:
            alive = proc.poll() is None
            if out.is_file():
                rows = json.loads(out.read_text())["runs"]  # the file is replaced whole: never half-written
                if rows:
                    break
            if not alive:
                break
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert alive, "the bench ended before its JSON held a row: the report was written only at the end"
    rep = json.loads(out.read_text())
    first = rep["runs"][0]
    assert first["key"] == "baseline" and first["audio_seconds_per_second"] > 0 and first["steps"] == 2
    pending = [s["key"] for s in rep["skipped"] if s.get("status") == "not measured yet"]
    assert pending and "all" in pending  # the rows it never reached are listed as such
    assert any("not measured yet" in n for n in rep["notes"])
    assert "| baseline (plain PyTorch loop) |" in (tmp_path / "ladder.md").read_text()


@pytest.mark.slow
def test_profile_view_of_each_row_on_the_cpu() -> None:
    from speechtrain.bench.report import markdown_report
    from speechtrain.config import load_config
    from speechtrain.recipes.bench import run_bench

    cfg = load_config(None, TINY)
    rep = run_bench(
        cfg,
        steps=3,
        warmup=1,
        min_seconds=0,
        repeat=1,
        isolate=False,
        fake_data=12,
        measure_peak=False,
        profile=5,
        skip=["fair_baseline"],
    )
    for run in rep["runs"]:
        view = run["profile_view"]
        assert view["steps"] >= 3  # the timed steps (the warm-up step left out)
        assert 0 < len(view["host_ops"]) <= 5
        assert all(0 < op["share"] <= 1 and op["calls"] >= 1 for op in view["host_ops"])
        assert sum(op["share"] for op in view["host_ops"]) <= 1.0 + 1e-6
        assert any(op["op"].startswith("aten::") for op in view["host_ops"])
        assert view["launches_per_step"] > 10  # a forward, a backward and an optimizer step of ATen operators
        assert view["device_ops"] == [] and view["device_idle_fraction"] is None  # no device on a CPU
        assert view["step_ms"] > 0
    assert "## Profile" in markdown_report(rep)
