"""Charts that read at a glance (issue 40): the bench and demo PNG has short row labels (the rows' keys; the
full names are in the table beside it), no text over other text or cut off at the edge (checked with
matplotlib's renderer by :func:`tests.chart_check.text_problems`), a bar's note inside its own panel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from speechtrain.bench.ablate import LadderRow, Variant
from speechtrain.bench.measure import RunResult
from speechtrain.bench.report import build_report, plot_figure, write_plot
from tests.chart_check import text_problems

pytest.importorskip("matplotlib")

CPU = {"type": "cpu", "name": "AMD EPYC 7B13 64-Core Processor (2 of 64 cores)", "cpu_count": 2, "date": "2026-11-27"}
#: the demo ladder's rows with their real names (the loader's is a sentence on a 2-core machine)
ROWS = [
    ("baseline", "baseline (plain PyTorch loop)", "baseline"),
    ("naive_attention", "naive (explicit attention)", "baseline"),
    ("lightning", "Lightning (same model and loss, plain DataLoader)", "lightning"),
    ("engine", "speechtrain, all off", "engine"),
    ("bucketing", "+ bucketing", "engine"),
    ("loader", "+ loader workers/pin/prefetch (recommendation: 0 workers on this machine; measured with 1)", "engine"),
    ("sdpa", "+ SDPA (fused attention kernels)", "engine"),
    ("fused_optimizer", "+ fused/foreach optimizer step", "engine"),
    ("tuned_batch", "+ tuned batch sizes", "engine"),
    ("all", "all (recommended settings)", "engine"),
]


def _ladder() -> list[LadderRow]:
    rows = []
    for i, (key, name, kind) in enumerate(ROWS):
        seconds = 2.0 - 0.1 * i
        result = RunResult(
            name=name,
            seconds=seconds,
            audio_seconds=10.0,
            peak_memory_bytes=(600 + 40 * i) * 2**20,
            steps=4,
            samples=16,
            padded_frames=1000,
            real_frames=700,
            data_wait_seconds=0.1 * seconds,
        )
        rows.append(LadderRow(Variant(key, name, kind=kind), result))
    return rows


def _report() -> dict[str, Any]:
    return build_report(_ladder(), dict(CPU), None, "speechtrain demo", [])


def test_the_bench_chart_reads_at_a_glance() -> None:
    import matplotlib.pyplot as plt

    report = _report()
    fig = plot_figure(report)
    try:
        assert text_problems(fig) == []  # was: the two x-axis titles overlapped, the loader's label ran long
        rows = [t.get_text() for t in fig.axes[0].get_yticklabels()]
        assert sorted(rows) == sorted(key for key, _, _ in ROWS)  # short labels: the keys of the table's rows
    finally:
        plt.close(fig)


def test_the_demo_chart_is_the_bench_chart_and_is_written(tmp_path: Path) -> None:
    path = write_plot(_report(), tmp_path / "bench.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
